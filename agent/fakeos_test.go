package agent

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/edgeheal/edgeheal/netfix/netfixtest"
	"github.com/edgeheal/edgeheal/probes"
)

// Hand-written fakes of the agent's OS seam (os.go). They hold state, log
// the calls that change something, and are safe for concurrent use. Time
// is the real clock: the loop tests run in a testing/synctest bubble,
// where it is fake.

// fakeLinks is a hand-written Links: links and default routes in memory,
// and subscriptions that a test feeds with Add, Remove, Touch and
// SetDefaultRoute.
type fakeLinks struct {
	mu        sync.Mutex
	links     map[string]probes.Link
	dr        []int
	next      int
	subs      []chan probes.LinkEvent
	listErr   error
	subErr    error
	subscribe int // Subscribe calls
	running   int // subscription goroutines not yet ended
}

var _ Links = (*fakeLinks)(nil)

func newFakeLinks() *fakeLinks {
	return &fakeLinks{links: map[string]probes.Link{}, next: 10}
}

func (f *fakeLinks) Links() ([]probes.Link, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.listErr != nil {
		return nil, f.listErr
	}
	var out []probes.Link
	for _, l := range f.links {
		out = append(out, l)
	}
	slices.SortFunc(out, func(a, b probes.Link) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

func (f *fakeLinks) DefaultRouteLinks() ([]int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.dr), nil
}

func (f *fakeLinks) Routes() ([]probes.RouteInfo, error) {
	return []probes.RouteInfo{{Dst: "default", Link: "uplink0"}}, nil
}

func (f *fakeLinks) LinkStats() ([]probes.LinkStat, error) { return nil, nil }

func (f *fakeLinks) Subscribe(ctx context.Context) (<-chan probes.LinkEvent, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.subscribe++
	if f.subErr != nil {
		return nil, f.subErr
	}
	in := make(chan probes.LinkEvent, 64)
	out := make(chan probes.LinkEvent)
	f.subs = append(f.subs, in)
	f.running++
	go func() {
		defer func() {
			f.mu.Lock()
			f.running--
			f.mu.Unlock()
			close(out)
		}()
		for {
			select {
			case <-ctx.Done():
				return
			case ev, ok := <-in:
				if !ok {
					return
				}
				select {
				case out <- ev:
				case <-ctx.Done():
					return
				}
				if ev.Err != nil {
					return
				}
			}
		}
	}()
	return out, nil
}

func (f *fakeLinks) send(ev probes.LinkEvent) {
	for _, s := range f.subs {
		s <- ev
	}
}

// Add creates a link (a new index each time, as the kernel does) and sends its event.
func (f *fakeLinks) Add(name string) probes.Link {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.next++
	l := probes.Link{Name: name, Index: f.next, Up: true}
	f.links[name] = l
	f.send(probes.LinkEvent{Link: l})
	return l
}

func (f *fakeLinks) Remove(name string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	l := f.links[name]
	delete(f.links, name)
	f.send(probes.LinkEvent{Link: l, Deleted: true})
}

// Touch sends a change event for an existing link (a feature change notification).
func (f *fakeLinks) Touch(name string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.send(probes.LinkEvent{Link: f.links[name]})
}

func (f *fakeLinks) SetDefaultRoute(names ...string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.dr = nil
	for _, n := range names {
		f.dr = append(f.dr, f.links[n].Index)
	}
	f.send(probes.LinkEvent{DefaultRoute: true})
}

// Break ends every subscription with an error.
func (f *fakeLinks) Break() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.send(probes.LinkEvent{Err: errors.New("receive failed: no buffer space available")})
	f.subs = nil
}

func (f *fakeLinks) Running() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.running
}

// fakeClock is a Clock on the real (in a bubble: fake) time with a clock
// status a test sets.
type fakeClock struct {
	mu     sync.Mutex
	status probes.ClockStatus
	err    error
}

func (c *fakeClock) Now() time.Time { return time.Now() }

func (c *fakeClock) Status() (probes.ClockStatus, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.status, c.err
}

func (c *fakeClock) set(cs probes.ClockStatus) {
	c.mu.Lock()
	c.status = cs
	c.mu.Unlock()
}

// fakeNet is a Prober whose answers are functions a test sets; nil
// answers: every tunnel probe succeeds, MQTT probes fail to be made, and
// names do not resolve.
type fakeNet struct {
	mu     sync.Mutex
	tunnel func(target string) probes.ProbeResult
	// waits: a probe that times out takes its whole timeout (or until its
	// context ends: then it is an error, as a real probe cut short).
	waits  bool
	mqtt   func(ns probes.Netns, cfg probes.MQTTConfig) (probes.Result, error)
	lookup func(name string) ([]netip.Addr, error)
}

func (n *fakeNet) Tunnel(ctx context.Context, target string, timeout time.Duration) probes.ProbeResult {
	n.mu.Lock()
	f, waits := n.tunnel, n.waits
	n.mu.Unlock()
	if f == nil {
		return probes.ProbeResult{OK: true, Answered: true, Class: "ok", Latency: 2 * time.Millisecond}
	}
	r := f(target)
	if waits && r.Class == "timeout" {
		select {
		case <-time.After(timeout):
		case <-ctx.Done():
			return probes.ProbeResult{Class: "error", Err: ctx.Err()}
		}
	}
	return r
}

func (n *fakeNet) MQTT(_ context.Context, ns probes.Netns, cfg probes.MQTTConfig) (probes.Result, error) {
	n.mu.Lock()
	f := n.mqtt
	n.mu.Unlock()
	if f == nil {
		return probes.Result{}, errors.New("no mqtt answer set")
	}
	return f(ns, cfg)
}

func (n *fakeNet) Lookup(_ context.Context, name string) ([]netip.Addr, error) {
	n.mu.Lock()
	f := n.lookup
	n.mu.Unlock()
	if f == nil {
		return nil, fmt.Errorf("lookup %s: no such host", name)
	}
	return f(name)
}

// fakePods is a PodLocator that answers a fixed target or error.
type fakePods struct {
	mu     sync.Mutex
	target probes.Target
	err    error
	calls  []string
}

func (p *fakePods) Locate(_ context.Context, w probes.Where) (probes.Target, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.calls = append(p.calls, "locate "+w.String())
	return p.target, p.err
}

// testOS is an OS of fakes; the caller replaces the parts it drives.
func testOS() OS {
	return OS{
		NIC:       netfixtest.NewNIC(),
		Links:     newFakeLinks(),
		WireGuard: netfixtest.NewWireGuard(),
		Bounce:    nil,
		Systemd:   netfixtest.NewSystemd(),
		Net:       &fakeNet{},
		Pods:      &fakePods{err: errors.New("no pods here")},
		Clock:     &fakeClock{status: probes.ClockStatus{Synchronized: true}},
	}
}
