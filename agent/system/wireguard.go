package system

import (
	"fmt"
	"sync"
	"time"

	"golang.zx2c4.com/wireguard/wgctrl"
	"golang.zx2c4.com/wireguard/wgctrl/wgtypes"

	"github.com/edgeheal/edgeheal/agent/core"
	"github.com/edgeheal/edgeheal/netfix"
)

// wgClient is the part of *wgctrl.Client the backend uses.
type wgClient interface {
	netfix.WireGuard
	Close() error
}

func openWireGuard() (wgClient, error) { return wgctrl.New() }

// How long a WireGuard device may take to answer. wgctrl sets no deadline
// of its own: a userspace device's UAPI socket that accepts and never
// answers (a wedged wireguard-go) held every caller forever. A read is a
// few milliseconds on a healthy device, a hub's 5,000 peers well under a
// second (docs/performance.md); a change of many peers takes longer.
const (
	deviceReadTimeout  = 2 * time.Second
	deviceWriteTimeout = 5 * time.Second
)

// wireGuard is netfix.WireGuard on the namespace's wgctrl client, every
// call bounded: it runs on a goroutine of its own, and the caller waits
// for it at most the call's timeout. A device whose earlier call still
// waits is not asked again (its answer would wait behind it): calls to it
// fail at once, so a wedged device costs one goroutine, not one per round,
// and stalls only what reads it.
type wireGuard struct {
	s *System
}

var _ netfix.WireGuard = wireGuard{}

func (w wireGuard) Device(name string) (*wgtypes.Device, error) {
	var d *wgtypes.Device
	err := w.s.wgCalls.do(w.s, name, deviceReadTimeout, func(c wgClient) (err error) {
		d, err = c.Device(name)
		return err
	})
	return d, err
}

func (w wireGuard) ConfigureDevice(name string, cfg wgtypes.Config) error {
	return w.s.wgCalls.do(w.s, name, deviceWriteTimeout, func(c wgClient) error { return c.ConfigureDevice(name, cfg) })
}

// deviceCalls are the calls to WireGuard devices still waiting, by device.
type deviceCalls struct {
	mu      sync.Mutex
	waiting map[string]time.Time // device → when its call that overran started
}

// noAnswerError is a device that gave no answer in time.
type noAnswerError struct {
	device string
	within time.Duration
	since  time.Time // zero: this call overran; else an earlier call still waits since then
}

func (e *noAnswerError) Error() string {
	if e.since.IsZero() {
		return fmt.Sprintf("wireguard device %s gave no answer within %s", e.device, e.within)
	}
	return fmt.Sprintf("wireguard device %s gave no answer within %s (a call waits for it since %s)", e.device, e.within, e.since.UTC().Format(time.RFC3339))
}

func (e *noAnswerError) Is(target error) bool { return target == core.ErrNoAnswer }

// do runs fn on the client for device name, bounded by timeout.
func (b *deviceCalls) do(s *System, name string, timeout time.Duration, fn func(wgClient) error) error {
	c, err := s.wg.use()
	if err != nil {
		return err
	}
	b.mu.Lock()
	if since, ok := b.waiting[name]; ok {
		b.mu.Unlock()
		return &noAnswerError{device: name, within: timeout, since: since}
	}
	b.mu.Unlock()
	start := time.Now()
	var (
		finished, overran bool // guarded by b.mu
		result            error
	)
	done := make(chan struct{})
	go func() {
		err := core.Recovered(func() error { return fn(c) })
		b.mu.Lock()
		finished, result = true, err
		if overran {
			delete(b.waiting, name)
		}
		b.mu.Unlock()
		close(done)
	}()
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if finished {
		return result
	}
	overran = true
	if b.waiting == nil {
		b.waiting = map[string]time.Time{}
	}
	b.waiting[name] = start
	return &noAnswerError{device: name, within: timeout}
}
