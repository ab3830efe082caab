package system

import (
	"errors"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"golang.zx2c4.com/wireguard/wgctrl/wgtypes"

	"github.com/edgeheal/edgeheal/agent/core"
)

// wedgedClient answers every device at once but one, whose calls wait
// until released (a userspace device whose UAPI socket accepts and never
// answers).
type wedgedClient struct {
	wedged  string
	release chan struct{}
	mu      sync.Mutex
	calls   map[string]int
}

func (c *wedgedClient) Device(name string) (*wgtypes.Device, error) {
	c.mu.Lock()
	c.calls[name]++
	c.mu.Unlock()
	if name == c.wedged {
		<-c.release
		return nil, errors.New("read unix @->/var/run/wireguard/" + name + ".sock: connection reset by peer")
	}
	return &wgtypes.Device{Name: name}, nil
}

func (c *wedgedClient) ConfigureDevice(name string, _ wgtypes.Config) error {
	_, err := c.Device(name)
	return err
}

func (c *wedgedClient) Close() error { return nil }

func (c *wedgedClient) count(name string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.calls[name]
}

func TestAWedgedDeviceCostsOneWaitingCallAndStallsNothingElse(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := &wedgedClient{wedged: "wg0", release: make(chan struct{}), calls: map[string]int{}}
		s := &System{}
		s.wg.open = func() (wgClient, error) { return c, nil }
		wg := wireGuard{s}

		start := time.Now()
		_, err := wg.Device("wg0")
		if !errors.Is(err, core.ErrNoAnswer) || err.Error() != "wireguard device wg0 gave no answer within 2s" {
			t.Fatalf("the wedged device: %v, want the deadline's error", err)
		}
		if took := time.Since(start); took != deviceReadTimeout {
			t.Errorf("the call returned after %s, want its deadline %s", took, deviceReadTimeout)
		}
		// Asked again while the first call waits: at once, and not again.
		start = time.Now()
		_, err = wg.Device("wg0")
		if !errors.Is(err, core.ErrNoAnswer) || !strings.Contains(err.Error(), "a call waits for it since") || time.Since(start) != 0 {
			t.Errorf("asked again: %v after %s, want an error at once that a call still waits", err, time.Since(start))
		}
		if err := wg.ConfigureDevice("wg0", wgtypes.Config{}); !errors.Is(err, core.ErrNoAnswer) {
			t.Errorf("a change to the wedged device: %v, want ErrNoAnswer", err)
		}
		if n := c.count("wg0"); n != 1 {
			t.Errorf("the wedged device was asked %d times, want once: one goroutine waits, not one per call", n)
		}
		// Another device answers meanwhile.
		if d, err := wg.Device("wg1"); err != nil || d.Name != "wg1" {
			t.Errorf("another device while wg0 is wedged: %v, %v", d, err)
		}
		// Once the waiting call returns, the device is asked again.
		close(c.release)
		synctest.Wait()
		if _, err := wg.Device("wg0"); errors.Is(err, core.ErrNoAnswer) || err == nil {
			t.Errorf("after the wedged call returned: %v, want the device's own answer", err)
		}
	})
}
