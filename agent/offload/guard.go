// Package offload is the agent's offload guard: it keeps TX checksum
// offload (and any other configured feature) as configured on the uplinks
// the config selects, re-asserting it within milliseconds of a modem
// re-plug. It depends on nothing but its NIC handle and netlink: it is the
// one part that runs whenever the process runs, and nothing another part
// does can hold it up (its events leave through a queue that never
// blocks, core.Emit).
package offload

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/edgeheal/edgeheal/agent/core"
	"github.com/edgeheal/edgeheal/configs"
	"github.com/edgeheal/edgeheal/netfix"
	"github.com/edgeheal/edgeheal/probes"
	"github.com/edgeheal/edgeheal/wire"
)

// actionOffloadOff is the action of the guard's fixes (wire.EventAction).
const actionOffloadOff = netfix.ActionOffloadOff

// defaultFloor is the drift-check period used when none is given.
// Link and route events are the fast path; the floor catches what sends no
// event (a driver reset that keeps the link, another tool's ethtool -K)
// and missed events.
const defaultFloor = 30 * time.Second

// OffloadFloor is the floor the agent gives the guard: netlink events do
// the fast work, so the floor need not be faster than 10 s, nor than the
// loop's interval.
func Floor(interval time.Duration) time.Duration {
	return max(interval, 10*time.Second)
}

// Config is what an Guard is made from. The uplinks
// have been validated by configs.
type Config struct {
	Uplinks []configs.Uplink
	DryRun  bool
	Floor   time.Duration // the periodic drift check; 0 means DefaultOffloadFloor
	OS      core.OS       // NIC, Links and Clock are used
	Log     *slog.Logger
	Emit    core.Emit // nil: events are dropped
	// OnChanged, if set, is called (from the enforcing goroutine: it must
	// not block) after a link's features were changed for real, with the
	// link's name: the agent tells the tunnels, whose tunnels were dark
	// because of it (the tunnels' Nudge).
	OnChanged func(link string)
}

// Guard keeps TX checksum offload (and any extra configured
// features) as configured on the selected uplinks of one network
// namespace: the namespace of its OS.
//
// It enforces at start, re-enforces a link within milliseconds of a
// netlink event saying it appeared, came up or changed (and every link when
// a default route changed), and checks every selected link each Floor.
// Every drift (a guarded feature found in the wrong state) is an event of
// kind "offload-drift", every change an event of kind "action" with action
// "offload-off". With DryRun it reports what it would change and changes
// nothing. It never acts on a link whose features it could not read.
//
// It is the agent's component "offload", the one part that runs whenever
// the process runs.
type Guard struct {
	uplinks   []configs.Uplink
	dryRun    bool
	floor     time.Duration
	os        core.OS
	log       *slog.Logger
	emit      core.Emit
	onChanged func(link string)

	pass sync.Mutex // one enforcement at a time (Run and Enforce callers)

	mu       sync.Mutex
	state    map[string]*uplinkState // by link name; only selected links
	absent   []configs.Uplink        // configs that selected no link in the last full pass
	dr       map[int]bool            // default-route link indexes, from the last full pass
	progress time.Time               // the last full pass
	subErr   string                  // the link subscription is down: why
}

var (
	_ core.Component = (*Guard)(nil)
	_ core.Checker   = (*Guard)(nil)
)

// NewOffloadGuard returns a guard. Uplinks with tx_checksum "leave" and no
// features guard nothing and are ignored. It starts nothing until Run.
func New(cfg Config) *Guard {
	g := &Guard{
		uplinks:   guardedUplinks(cfg.Uplinks),
		dryRun:    cfg.DryRun,
		floor:     cfg.Floor,
		os:        cfg.OS,
		log:       cfg.Log,
		emit:      cfg.Emit,
		onChanged: cfg.OnChanged,
		state:     map[string]*uplinkState{},
	}
	if g.floor <= 0 {
		g.floor = defaultFloor
	}
	if g.log == nil {
		g.log = slog.New(slog.DiscardHandler)
	}
	if g.emit == nil {
		g.emit = func(core.Event) {}
	}
	return g
}

// Name implements Component.
func (g *Guard) Name() string { return "offload" }

// Health implements Component: progress is the last full pass, due every
// floor; a link subscription that is down degrades the guard to its floor.
func (g *Guard) Health() core.Health {
	g.mu.Lock()
	defer g.mu.Unlock()
	h := core.Health{LastProgress: g.progress, Deadline: 3 * g.floor}
	if len(g.uplinks) == 0 {
		return core.Health{Detail: "no uplinks configured to guard"}
	}
	h.Detail = fmt.Sprintf("guarding %d links", len(g.state))
	if g.subErr != "" {
		h.Degraded = true
		h.Detail = "link events lost, checking every " + g.floor.String() + " only: " + g.subErr
	}
	return h
}

// Run enforces at once, then on every matching link or default-route event
// and every floor, until ctx is cancelled; then it returns nil, after the
// subscription's goroutines have ended. A subscription that cannot be made
// or breaks is logged and retried after 1 s, doubling up to the floor,
// with a full pass once it is back (events may have been missed); the
// floor keeps the guard working meanwhile. Run never returns an error for
// a link it could not fix: that is reported in Checks and events.
func (g *Guard) Run(ctx context.Context) error {
	if len(g.uplinks) == 0 {
		<-ctx.Done()
		return nil
	}
	sub := &linkSubscription{links: g.os.Links, onErr: g.setSubErr}
	// Subscribe first, then enforce: a link that appears in between is
	// seen by either.
	events := sub.start(ctx)
	defer sub.stop()
	g.fullPass(ctx, "start")

	tick := time.NewTicker(g.floor)
	defer tick.Stop()
	var retry <-chan time.Time // set while the subscription is down
	backoff := time.Second
	if events == nil {
		retry = time.After(backoff)
	}
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
			g.fullPass(ctx, "periodic")
		case <-retry:
			retry = nil
			if events = sub.start(ctx); events == nil {
				backoff = min(2*backoff, g.floor)
				retry = time.After(backoff)
				continue
			}
			backoff = time.Second
			g.fullPass(ctx, "resubscribed") // events may have been missed
		case ev, ok := <-events:
			if !ok || ev.Err != nil {
				if ok {
					g.log.Warn("link subscription broke; resubscribing", "error", ev.Err)
					g.setSubErr(ev.Err)
				}
				sub.stop()
				events = nil
				retry = time.After(backoff)
				continue
			}
			g.handle(ctx, batchLinkEvents(ev, events))
		}
	}
}

func (g *Guard) setSubErr(err error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.subErr = ""
	if err != nil {
		g.subErr = err.Error()
	}
}

// linkSubscription is the guard's subscription to link and route changes,
// which it restarts when it breaks.
type linkSubscription struct {
	links  probes.LinkWatcher
	onErr  func(error)
	cancel context.CancelFunc
	ch     <-chan probes.LinkEvent
}

// start subscribes; nil when the subscription cannot be made (logged
// through onErr).
func (s *linkSubscription) start(ctx context.Context) <-chan probes.LinkEvent {
	sctx, cancel := context.WithCancel(ctx)
	ch, err := s.links.Subscribe(sctx)
	if err != nil {
		cancel()
		s.onErr(fmt.Errorf("subscribing to link and route changes: %w", err))
		return nil
	}
	s.onErr(nil)
	s.cancel, s.ch = cancel, ch
	return ch
}

// stop ends the subscription and waits for its goroutines (the channel is
// closed once they ended).
func (s *linkSubscription) stop() {
	if s.cancel == nil {
		return
	}
	s.cancel()
	for range s.ch {
	}
	s.cancel, s.ch = nil, nil
}

// batchLinkEvents collects ev and whatever else is already queued, so that
// a burst of messages for one link (a re-plug sends several) costs one
// pass.
func batchLinkEvents(ev probes.LinkEvent, events <-chan probes.LinkEvent) []probes.LinkEvent {
	evs := []probes.LinkEvent{ev}
	for range 64 {
		select {
		case e, ok := <-events:
			if !ok || e.Err != nil {
				return evs // Run sees the break on its next receive
			}
			evs = append(evs, e)
		default:
			return evs
		}
	}
	return evs
}

// handle reacts to a batch of events: a full pass if a default route
// changed, else one pass per matching link, in order of first appearance.
func (g *Guard) handle(ctx context.Context, evs []probes.LinkEvent) {
	var order []string
	latest := map[string]probes.LinkEvent{}
	for _, ev := range evs {
		if ev.DefaultRoute {
			g.fullPass(ctx, "default-route-changed")
			return
		}
		if _, seen := latest[ev.Link.Name]; !seen {
			order = append(order, ev.Link.Name)
		}
		latest[ev.Link.Name] = ev
	}
	g.mu.Lock()
	dr := g.dr
	g.mu.Unlock()
	var jobs []job
	for _, name := range order {
		ev := latest[name]
		if ev.Deleted {
			g.forget(name)
			continue
		}
		t := selectUplink(g.uplinks, ev.Link, dr)
		if t == nil {
			continue
		}
		trigger := "link-changed"
		if st, known := g.known(name); !known || st.link.Index != ev.Link.Index {
			trigger = "link-appeared" // new, or deleted and re-created in this batch
		}
		jobs = append(jobs, job{*t, trigger})
	}
	if len(jobs) > 0 {
		g.pass.Lock()
		g.enforce(ctx, jobs)
		g.pass.Unlock()
	}
}

// Enforce runs one full pass now: every selected link is brought to its
// configured state (or, with DryRun, reported). It returns the results of
// the links it acted on and the errors joined; a link that disappeared
// during the pass is not an error. The tunnel ladder's reassert rung calls it.
func (g *Guard) Enforce(ctx context.Context) ([]netfix.Result, error) {
	return g.fullPass(ctx, "reassert")
}

func (g *Guard) fullPass(ctx context.Context, trigger string) ([]netfix.Result, error) {
	g.pass.Lock()
	defer g.pass.Unlock()
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	targets, dr, err := readUplinks(g.os.Links, g.uplinks)
	if err != nil {
		// Never act on what could not be observed: keep the last state.
		g.log.Error("selecting uplinks", "error", err)
		return nil, fmt.Errorf("selecting uplinks: %w", err)
	}
	g.forgetAllBut(targets, dr)
	jobs := make([]job, 0, len(targets))
	for _, t := range targets {
		trig := trigger
		if st, known := g.known(t.Name); (!known || st.link.Index != t.Index) && trigger != "start" {
			trig = "link-appeared"
		}
		jobs = append(jobs, job{t, trig})
	}
	results, err := g.enforce(ctx, jobs)
	g.mu.Lock()
	g.progress = g.os.Clock.Now()
	g.mu.Unlock()
	return results, err
}

// forgetAllBut drops the state of links no longer selected and records the
// configs that select nothing.
func (g *Guard) forgetAllBut(targets []uplinkTarget, dr map[int]bool) {
	names := map[string]bool{}
	for _, t := range targets {
		names[t.Name] = true
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	g.dr = dr
	for name := range g.state {
		if !names[name] {
			delete(g.state, name)
		}
	}
	g.absent = unmatched(g.uplinks, targets)
}

func (g *Guard) known(name string) (*uplinkState, bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	st, ok := g.state[name]
	return st, ok
}

func (g *Guard) forget(name string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	delete(g.state, name)
}

// Checks returns one check of kind "uplink" per selected link, and one per
// uplink config that selected no link in the last full pass (state
// "absent", healthy: nothing to expose). Safe to call from any goroutine.
func (g *Guard) Checks() []wire.Check {
	g.mu.Lock()
	defer g.mu.Unlock()
	var out []wire.Check
	for _, name := range slices.Sorted(maps.Keys(g.state)) {
		st := g.state[name]
		out = append(out, wire.Check{
			Kind: wire.KindUplink, Target: name, State: st.state, Healthy: st.healthy, Detail: st.detail,
			LastAction: st.lastAction, Since: st.since, Uplink: cloneUplinkInfo(st.info),
		})
	}
	for _, u := range g.absent {
		out = append(out, absentCheck(u))
	}
	return out
}

func absentCheck(u configs.Uplink) wire.Check {
	return wire.Check{Kind: wire.KindUplink, Target: u.Name, State: uplinkAbsent, Healthy: true,
		Detail: "no link matches", Uplink: &wire.UplinkInfo{SelectedBy: []string{u.Name}}}
}

func cloneUplinkInfo(i wire.UplinkInfo) *wire.UplinkInfo {
	i.SelectedBy = slices.Clone(i.SelectedBy)
	i.Features = maps.Clone(i.Features)
	return &i
}
