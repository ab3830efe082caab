package probes

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/edgeheal/edgeheal/internal/testsupport"

	"github.com/edgeheal/edgeheal/configs"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
)

// needRoot skips a lab test when not root, with the command that runs it.
func needRoot(t *testing.T) {
	t.Helper()
	testsupport.RequireRoot(t, "network namespaces")
}

// newNetns creates an anonymous network namespace with lo up and returns
// it as a Netns whose path is this process's fd for it. The namespace is
// gone once the fd is closed at cleanup (and nothing else holds it).
func newNetns(t testing.TB) Netns {
	t.Helper()
	type made struct {
		h   netns.NsHandle
		err error
	}
	ch := make(chan made, 1)
	go func() {
		runtime.LockOSThread()
		orig, err := netns.Get()
		if err != nil {
			runtime.UnlockOSThread()
			ch <- made{err: err}
			return
		}
		defer orig.Close()
		h, err := netns.New()
		if err != nil {
			runtime.UnlockOSThread()
			ch <- made{err: err}
			return
		}
		if err := netns.Set(orig); err != nil {
			ch <- made{err: err} // thread stays locked and dies
			return
		}
		runtime.UnlockOSThread()
		ch <- made{h: h}
	}()
	m := <-ch
	if m.err != nil {
		t.Fatalf("creating a network namespace: %v", m.err)
	}
	t.Cleanup(func() { m.h.Close() })
	nh, err := netlink.NewHandleAt(m.h)
	if err != nil {
		t.Fatal(err)
	}
	defer nh.Close()
	lo, err := nh.LinkByName("lo")
	if err != nil {
		t.Fatal(err)
	}
	if err := nh.LinkSetUp(lo); err != nil {
		t.Fatal(err)
	}
	return Netns{Path: fmt.Sprintf("/proc/%d/fd/%d", os.Getpid(), int(m.h))}
}

// threadsInForeignNamespaces lists this process's threads whose network
// namespace is not the process's own.
func threadsInForeignNamespaces(t *testing.T) []string {
	t.Helper()
	self, err := os.Readlink("/proc/self/ns/net")
	if err != nil {
		t.Fatal(err)
	}
	tasks, err := filepath.Glob("/proc/self/task/*/ns/net")
	if err != nil {
		t.Fatal(err)
	}
	var foreign []string
	for _, p := range tasks {
		l, err := os.Readlink(p)
		if err != nil {
			continue // the thread exited
		}
		if l != self {
			foreign = append(foreign, p+" -> "+l)
		}
	}
	return foreign
}

// TestLabProbesRunInsideTheNamespace probes a mosquitto that exists only
// inside a namespace the test created: from inside it is reached, from the
// host the same address is refused, an address with no route is no-route,
// a port dropped by nftables in the namespace times out within the bound,
// and no thread of the process is left in the namespace afterwards.
func TestLabProbesRunInsideTheNamespace(t *testing.T) {
	needRoot(t)
	ns := newNetns(t)
	b := startMosquittoIn(t, ns)
	dns := startDNS(t, ns, map[string][4]byte{"broker.test.": {127, 0, 0, 1}})
	silent := silentListener(t, ns)
	_, silentPort, _ := strings.Cut(silent, ":")
	nft(t, ns, fmt.Sprintf(`table inet edgeheal_probe_test {
	chain input { type filter hook input priority 0; tcp dport %s drop; }
}`, silentPort))
	ok := MQTTConfig{Broker: "tcp://" + b.PlainAddr, Username: b.user, PasswordFile: b.passwd, Timeout: 2 * time.Second}
	_, port, _ := strings.Cut(b.TLSAddr, ":")

	tests := []struct {
		name  string
		probe func() (Result, error)
		want  Class
	}{
		{"mqtt from inside reaches the broker", func() (Result, error) { return MQTT(context.Background(), ns, ok) }, ClassOK},
		{"mqtt over tls by name from inside reaches the broker", func() (Result, error) {
			nsDNS := ns
			nsDNS.DNSServers = []string{dns}
			return MQTT(context.Background(), nsDNS, MQTTConfig{Broker: "ssl://broker.test:" + port, TLS: configs.TLS{CA: b.PKI.CAFile}, Timeout: 2 * time.Second})
		}, ClassAuth}, // no credentials: the pod's resolver is used, and the broker asks for them
		{"mqtt with credentials by a name the host resolves reaches the broker", func() (Result, error) {
			orig := hostLookup
			defer func() { hostLookup = orig }()
			hostLookup = func(context.Context, string) ([]netip.Addr, error) {
				return []netip.Addr{netip.MustParseAddr("127.0.0.1")}, nil // as the host's resolver would answer
			}
			return MQTT(context.Background(), ns, MQTTConfig{Broker: "ssl://broker.test:" + port, Username: b.user, PasswordFile: b.passwd, TLS: configs.TLS{CA: b.PKI.CAFile}, Timeout: 2 * time.Second})
		}, ClassOK},
		{"mqtt from the host to the same address is refused", func() (Result, error) { return MQTT(context.Background(), Netns{}, ok) }, ClassRefused},
		{"tcp from inside reaches the broker", func() (Result, error) { return TCP(context.Background(), ns, b.PlainAddr, time.Second) }, ClassOK},
		{"tcp from inside to an unrouted address is no-route", func() (Result, error) { return TCP(context.Background(), ns, "192.0.2.1:1883", time.Second) }, ClassNoRoute},
		{"mqtt to a port dropped by nftables is a timeout", func() (Result, error) {
			return MQTT(context.Background(), ns, MQTTConfig{Broker: "tcp://" + silent, Timeout: 500 * time.Millisecond})
		}, ClassTimeout},
		{"dns from inside answers", func() (Result, error) {
			return DNS(context.Background(), Netns{Path: ns.Path, DNSServers: []string{dns}}, "broker.test", time.Second)
		}, ClassOK},
		{"dns from inside for an unknown name is dns", func() (Result, error) {
			return DNS(context.Background(), Netns{Path: ns.Path, DNSServers: []string{dns}}, "nowhere.test", time.Second)
		}, ClassDNS},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			start := time.Now()
			got, err := tt.probe()
			if err != nil {
				t.Fatalf("probe: %v", err)
			}
			if got.Class != tt.want {
				t.Errorf("class %q (detail %q), want %q", got.Class, got.Detail, tt.want)
			}
			if took := time.Since(start); took > 4*time.Second {
				t.Errorf("probe took %v, beyond its bound", took)
			}
		})
	}
	if foreign := threadsInForeignNamespaces(t); len(foreign) > 0 {
		t.Errorf("threads left in a foreign namespace:\n%s", strings.Join(foreign, "\n"))
	}
}

// TestLabNamespaceGoneIsAnError shows that a probe into a namespace that
// no longer exists is "could not probe", never a network class.
func TestLabNamespaceGoneIsAnError(t *testing.T) {
	needRoot(t)
	ns := newNetns(t)
	dir := t.TempDir()
	// A bind mount keeps the namespace after its fd is closed, as
	// /var/run/netns/cni-* does for a pod; unmounting it is the pod going.
	path := filepath.Join(dir, "ns")
	if err := os.WriteFile(path, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("mount", "--bind", ns.Path, path).CombinedOutput(); err != nil {
		t.Fatalf("mount --bind: %v: %s", err, out)
	}
	t.Cleanup(func() { _ = exec.Command("umount", path).Run() })
	if _, err := TCP(context.Background(), Netns{Path: path}, "127.0.0.1:1", time.Second); err != nil {
		t.Fatalf("probe while mounted: %v", err)
	}
	if out, err := exec.Command("umount", path).CombinedOutput(); err != nil {
		t.Fatalf("umount: %v: %s", err, out)
	}
	r, err := TCP(context.Background(), Netns{Path: path}, "127.0.0.1:1", time.Second)
	if err == nil {
		t.Fatalf("probe after the namespace went: result %+v, want an error", r)
	}
	if !isNamespaceErr(err) {
		t.Errorf("error %v is not a NamespaceError", err)
	}
}

// TestLabOwnNamespaceWhileProbesRunElsewhere reads the process's own
// namespace while probes enter another one on other threads, under GC
// pressure, as the agent does at start: every read is the process's, and
// so is a Netlink's. A plain netns.Get here read the probes' namespace
// about once in 20,000 reads.
func TestLabOwnNamespaceWhileProbesRunElsewhere(t *testing.T) {
	needRoot(t)
	pod := newNetns(t)
	self, err := ownNamespace()
	if err != nil {
		t.Fatal(err)
	}
	defer self.Close()
	var stop atomic.Bool
	var wg sync.WaitGroup
	defer wg.Wait()
	defer stop.Store(true)
	for range 4 {
		wg.Go(func() {
			for !stop.Load() {
				if err := pod.Do(func() error { return nil }); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Go(func() { // garbage, so that GC assists park the reader now and then
		var keep [][]byte
		for !stop.Load() {
			if keep = append(keep, make([]byte, 4096)); len(keep) > 1000 {
				keep = nil
			}
		}
	})
	const reads = 100_000
	deadline := time.Now().Add(time.Minute)
	foreign := 0
	for i := 0; i < reads && time.Now().Before(deadline); i++ {
		ns, err := ownNamespace()
		if err != nil {
			t.Fatal(err)
		}
		if !ns.Equal(self) {
			foreign++
		}
		ns.Close()
	}
	if foreign > 0 {
		t.Errorf("%d of %d reads of the process's own namespace gave another one", foreign, reads)
	}
	n, err := NewNetlink()
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	if !n.ns.Equal(self) {
		t.Errorf("NewNetlink is bound to %v, want the process's namespace %v", n.ns, self)
	}
}

// nft loads a ruleset inside ns.
func nft(t *testing.T, ns Netns, ruleset string) {
	t.Helper()
	cmd := exec.Command("nsenter", "--net="+ns.Path, "nft", "-f", "-")
	cmd.Stdin = strings.NewReader(ruleset)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("nft in %s: %v: %s", ns.Path, err, out)
	}
}
