// Package coretest holds hand-written fakes of the agent's OS seam
// (core.OS) for the tests of the components and the wiring: they hold
// state, log the calls that change something, and are safe for concurrent
// use. Time is the real clock: the loop tests run in a testing/synctest
// bubble, where it is fake. Test code only.
package coretest

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/edgeheal/edgeheal/agent/core"
	"github.com/edgeheal/edgeheal/netfix/netfixtest"
	"github.com/edgeheal/edgeheal/probes"
)

// Links is a hand-written core.Links: links and default routes in memory,
// and subscriptions that a test feeds with Add, Remove, Touch and
// SetDefaultRoute.
type Links struct {
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

var _ core.Links = (*Links)(nil)

// NewLinks returns a namespace without links.
func NewLinks() *Links {
	return &Links{links: map[string]probes.Link{}, next: 10}
}

func (f *Links) Links() ([]probes.Link, error) {
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

func (f *Links) DefaultRouteLinks() ([]int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.dr), nil
}

func (f *Links) Routes() ([]probes.RouteInfo, error) {
	return []probes.RouteInfo{{Dst: "default", Link: "uplink0"}}, nil
}

func (f *Links) LinkStats() ([]probes.LinkStat, error) { return nil, nil }

func (f *Links) Subscribe(ctx context.Context) (<-chan probes.LinkEvent, error) {
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

func (f *Links) send(ev probes.LinkEvent) {
	for _, s := range f.subs {
		s <- ev
	}
}

// Add creates a link (a new index each time, as the kernel does) and sends its event.
func (f *Links) Add(name string) probes.Link {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.next++
	l := probes.Link{Name: name, Index: f.next, Up: true}
	f.links[name] = l
	f.send(probes.LinkEvent{Link: l})
	return l
}

func (f *Links) Remove(name string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	l := f.links[name]
	delete(f.links, name)
	f.send(probes.LinkEvent{Link: l, Deleted: true})
}

// Touch sends a change event for an existing link (a feature change notification).
func (f *Links) Touch(name string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.send(probes.LinkEvent{Link: f.links[name]})
}

func (f *Links) SetDefaultRoute(names ...string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.dr = nil
	for _, n := range names {
		f.dr = append(f.dr, f.links[n].Index)
	}
	f.send(probes.LinkEvent{DefaultRoute: true})
}

// SetListErr makes Links fail with err (nil: list again).
func (f *Links) SetListErr(err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.listErr = err
}

// SetSubscribeErr makes Subscribe fail with err (nil: subscribe again).
func (f *Links) SetSubscribeErr(err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.subErr = err
}

// Subscribes is how many times Subscribe was called.
func (f *Links) Subscribes() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.subscribe
}

// Break ends every subscription with an error.
func (f *Links) Break() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.send(probes.LinkEvent{Err: errors.New("receive failed: no buffer space available")})
	f.subs = nil
}

func (f *Links) Running() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.running
}

// Clock is a core.Clock on the real (in a bubble: fake) time with a clock
// status a test sets.
type Clock struct {
	mu     sync.Mutex
	status probes.ClockStatus
	err    error
}

func (c *Clock) Now() time.Time { return time.Now() }

func (c *Clock) Status() (probes.ClockStatus, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.status, c.err
}

// NewClock returns a clock that NTP keeps synchronised.
func NewClock() *Clock { return &Clock{status: probes.ClockStatus{Synchronized: true}} }

// Set sets the clock status Status returns.
func (c *Clock) Set(cs probes.ClockStatus) {
	c.mu.Lock()
	c.status, c.err = cs, nil
	c.mu.Unlock()
}

// SetErr makes Status fail with err.
func (c *Clock) SetErr(err error) {
	c.mu.Lock()
	c.err = err
	c.mu.Unlock()
}

// Net is a core.Prober whose answers are functions a test sets; nil
// answers: every tunnel probe succeeds, MQTT probes fail to be made, and
// names do not resolve.
type Net struct {
	mu     sync.Mutex
	tunnel func(target string) probes.ProbeResult
	// waits: a probe that times out takes its whole timeout (or until its
	// context ends: then it is an error, as a real probe cut short).
	waits  bool
	mqtt   func(ns probes.Netns, cfg probes.MQTTConfig) (probes.Result, error)
	lookup func(name string) ([]netip.Addr, error)
}

func (n *Net) Tunnel(ctx context.Context, target string, timeout time.Duration) probes.ProbeResult {
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

func (n *Net) MQTT(_ context.Context, ns probes.Netns, cfg probes.MQTTConfig) (probes.Result, error) {
	n.mu.Lock()
	f := n.mqtt
	n.mu.Unlock()
	if f == nil {
		return probes.Result{}, errors.New("no mqtt answer set")
	}
	return f(ns, cfg)
}

func (n *Net) Lookup(_ context.Context, name string) ([]netip.Addr, error) {
	n.mu.Lock()
	f := n.lookup
	n.mu.Unlock()
	if f == nil {
		return nil, fmt.Errorf("lookup %s: no such host", name)
	}
	return f(name)
}

// Pods is a core.PodLocator that answers a fixed target or error.
type Pods struct {
	mu     sync.Mutex
	target probes.Target
	err    error
	calls  []string
}

func (p *Pods) Locate(_ context.Context, w probes.Where) (probes.Target, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.calls = append(p.calls, "locate "+w.String())
	return p.target, p.err
}

// SetTunnel sets the answer of every tunnel probe (nil: each succeeds).
func (n *Net) SetTunnel(fn func(target string) probes.ProbeResult) {
	n.mu.Lock()
	n.tunnel = fn
	n.mu.Unlock()
}

// SetWaits makes a tunnel probe that times out take its whole timeout, as
// a real one does (or end with its context, as an error).
func (n *Net) SetWaits(waits bool) {
	n.mu.Lock()
	n.waits = waits
	n.mu.Unlock()
}

// SetMQTT sets the answer of every MQTT probe (nil: none can be made).
func (n *Net) SetMQTT(fn func(ns probes.Netns, cfg probes.MQTTConfig) (probes.Result, error)) {
	n.mu.Lock()
	n.mqtt = fn
	n.mu.Unlock()
}

// SetLookup sets the answer of every name lookup (nil: none resolves).
func (n *Net) SetLookup(fn func(name string) ([]netip.Addr, error)) {
	n.mu.Lock()
	n.lookup = fn
	n.mu.Unlock()
}

// NewPods returns a locator that answers err to every lookup.
func NewPods(err error) *Pods { return &Pods{err: err} }

// Calls are the lookups made, in order.
func (p *Pods) Calls() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.calls)
}

// OS is a core.OS of fakes; the caller replaces the parts it drives.
func OS() core.OS {
	mtus := netfixtest.NewMTUs(nil)
	return core.OS{
		NIC:       netfixtest.NewNIC(),
		Links:     NewLinks(),
		WireGuard: netfixtest.NewWireGuard(),
		Bounce:    nil,
		Systemd:   netfixtest.NewSystemd(),
		Net:       &Net{},
		Pods:      NewPods(errors.New("no pods here")),
		Clock:     NewClock(),
		PathMTU:   NewPathMTU(mtus),
		Nftables:  &Nftables{NFT: netfixtest.NewNFT()},
		MTU:       mtus,
	}
}

// Events records emitted events; its Emit is a core.Emit.
type Events struct {
	mu  sync.Mutex
	evs []core.Event
}

func (e *Events) Emit(ev core.Event) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.evs = append(e.evs, ev)
}

// Brief is "kind target action result" for each event, so tests compare the gist.
func (e *Events) Brief() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	var out []string
	for _, ev := range e.evs {
		s := ev.Kind + " " + ev.Target
		if ev.Action != "" {
			s += " " + ev.Action + " " + ev.Result
		}
		out = append(out, s)
	}
	return out
}

// All are the events emitted so far, in order.
func (e *Events) All() []core.Event {
	e.mu.Lock()
	defer e.mu.Unlock()
	return slices.Clone(e.evs)
}
