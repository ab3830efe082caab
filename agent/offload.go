package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/edgeheal/edgeheal/configs"
	"github.com/edgeheal/edgeheal/netfix"
	"github.com/edgeheal/edgeheal/probes"
)

// Offload guard event kinds and the action name.
const (
	EventOffloadDrift = "offload-drift" // a guarded feature found in the wrong state
	EventAction       = "action"
	ActionOffloadOff  = netfix.ActionOffloadOff
)

// DefaultOffloadFloor is the drift-check period used when none is given.
// Link and route events are the fast path; the floor catches what sends no
// event (a driver reset that keeps the link, another tool's ethtool -K
// before the feature-change notification existed) and missed events.
const DefaultOffloadFloor = 30 * time.Second

// OffloadGuardConfig is what an OffloadGuard is made from.
type OffloadGuardConfig struct {
	Uplinks []configs.Uplink
	DryRun  bool
	Floor   time.Duration // the periodic drift check; 0 means DefaultOffloadFloor
	NIC     netfix.NIC
	Links   probes.LinkWatcher
	Log     *slog.Logger
	Emit    Emit             // nil: events are dropped
	Now     func() time.Time // nil: time.Now
	// OnChanged, if set, is called (from the enforcing goroutine: it must
	// not block) after a link's features were changed for real, with the
	// link's name: the wiring tells the tunnel monitor, whose tunnels were
	// dark because of it (TunnelMonitor.Nudge).
	OnChanged func(link string)
}

// OffloadGuard keeps TX checksum offload (and any extra configured
// features) as configured on the selected uplinks of one network
// namespace: the namespace its NIC and Links are bound to.
//
// It enforces at start, re-enforces a link within milliseconds of a
// netlink event saying it appeared, came up or changed (and every link when
// a default route changed), and checks every selected link each Floor.
// Every drift (a guarded feature found in the wrong state) is an event of
// kind "offload-drift", every change an event of kind "action" with action
// "offload-off". With DryRun it reports what it would change and changes
// nothing. It never acts on a link whose features it could not read.
type OffloadGuard struct {
	uplinks   []configs.Uplink
	dryRun    bool
	floor     time.Duration
	nic       netfix.NIC
	links     probes.LinkWatcher
	log       *slog.Logger
	emit      Emit
	now       func() time.Time
	onChanged func(link string)

	pass sync.Mutex // one enforcement at a time (Run and Enforce callers)

	mu     sync.Mutex
	state  map[string]*uplinkState // by link name; only selected links
	absent []int                   // uplink configs that selected no link in the last full pass
	dr     map[int]bool            // default-route link indexes, from the last full pass
}

// uplinkState is what the guard knows about one selected link.
type uplinkState struct {
	link       probes.Link
	by         []int // indexes into uplinks
	state      string
	healthy    bool
	detail     string
	since      time.Time
	lastAction string
	info       UplinkInfo
	// Event deduplication: an event is sent when these change, so a
	// dry run or a stuck feature does not repeat every floor tick.
	lastWrong string
	lastFixed string
	lastErr   string
}

// Check states of an uplink.
const (
	uplinkOK       = "ok"
	uplinkDrift    = "drift"    // dry run: a guarded feature is in the wrong state
	uplinkFixed    = "fixed"    // a guarded feature is wrong and the driver does not allow changing it
	uplinkDegraded = "degraded" // the change was accepted and did not apply
	uplinkError    = "error"    // the features could not be read or changed, or a config error
	uplinkAbsent   = "absent"   // the selector matches no link now
)

// NewOffloadGuard validates cfg and returns a guard. Uplinks with
// tx_checksum "leave" and no features guard nothing and are ignored. It
// starts nothing until Run.
func NewOffloadGuard(cfg OffloadGuardConfig) (*OffloadGuard, error) {
	var errs []error
	if cfg.NIC == nil {
		errs = append(errs, errors.New("offload guard: no NIC"))
	}
	if cfg.Links == nil {
		errs = append(errs, errors.New("offload guard: no link watcher"))
	}
	var ups []configs.Uplink
	for i, u := range cfg.Uplinks {
		if err := probes.ValidUplinkSelector(u.Name); err != nil {
			errs = append(errs, fmt.Errorf("uplinks[%d].name: %w", i, err))
		}
		switch u.TxChecksum {
		case "", "off", "leave":
		default:
			errs = append(errs, fmt.Errorf("uplinks[%d].tx_checksum: %q is not off or leave", i, u.TxChecksum))
		}
		for k, v := range u.Features {
			if v := strings.ToLower(v); v != "on" && v != "off" {
				errs = append(errs, fmt.Errorf("uplinks[%d].features.%s: %q is not on or off", i, k, v))
			}
		}
		if u.TxChecksum == "leave" && len(u.Features) == 0 {
			continue
		}
		ups = append(ups, u)
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	g := &OffloadGuard{
		uplinks:   ups,
		dryRun:    cfg.DryRun,
		floor:     cfg.Floor,
		nic:       cfg.NIC,
		links:     cfg.Links,
		log:       cfg.Log,
		emit:      cfg.Emit,
		now:       cfg.Now,
		onChanged: cfg.OnChanged,
		state:     map[string]*uplinkState{},
	}
	if g.floor <= 0 {
		g.floor = DefaultOffloadFloor
	}
	if g.log == nil {
		g.log = slog.New(slog.DiscardHandler)
	}
	if g.emit == nil {
		g.emit = func(Event) {}
	}
	if g.now == nil {
		g.now = time.Now
	}
	return g, nil
}

var _ Part = (*OffloadGuard)(nil)

// Run enforces at once, then on every matching link or default-route event
// and every floor, until ctx is cancelled; then it returns nil, after the
// subscription's goroutines have ended. A subscription that cannot be made
// or breaks is logged and retried after 1 s, doubling up to the floor,
// with a full pass once it is back (events may have been missed); the
// floor keeps the guard working meanwhile. Run never returns an error for a link it could not fix: that
// is reported in Checks and events.
func (g *OffloadGuard) Run(ctx context.Context) error {
	if len(g.uplinks) == 0 {
		<-ctx.Done()
		return nil
	}
	stopSub := func() {}
	subscribe := func() <-chan probes.LinkEvent {
		sctx, cancel := context.WithCancel(ctx)
		ch, err := g.links.Subscribe(sctx)
		if err != nil {
			cancel()
			g.log.Error("subscribing to link and route changes; relying on the periodic check", "error", err)
			return nil
		}
		stopSub = func() {
			cancel()
			for range ch { // closed once the subscription's goroutines ended
			}
		}
		return ch
	}
	// Subscribe first, then enforce: a link that appears in between is
	// seen by either.
	events := subscribe()
	defer func() { stopSub() }()
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
			if events = subscribe(); events == nil {
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
				}
				stopSub()
				stopSub, events = func() {}, nil
				retry = time.After(backoff)
				continue
			}
			g.handle(ctx, g.batch(ev, events))
		}
	}
}

// batch collects ev and whatever else is already queued, so that a burst
// of messages for one link (a re-plug sends several) costs one pass.
func (g *OffloadGuard) batch(ev probes.LinkEvent, events <-chan probes.LinkEvent) []probes.LinkEvent {
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
func (g *OffloadGuard) handle(ctx context.Context, evs []probes.LinkEvent) {
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
	for _, name := range order {
		ev := latest[name]
		if ev.Deleted {
			g.forget(name)
			continue
		}
		g.mu.Lock()
		dr := g.dr
		g.mu.Unlock()
		by := g.selectors(ev.Link, dr)
		if len(by) == 0 {
			continue
		}
		trigger := "link-changed"
		if st, known := g.known(name); !known || st.link.Index != ev.Link.Index {
			trigger = "link-appeared" // new, or deleted and re-created in this batch
		}
		g.pass.Lock()
		g.enforceLink(ctx, probes.SelectedLink{Link: ev.Link, Selectors: by}, trigger)
		g.pass.Unlock()
	}
}

// Enforce runs one full pass now: every selected link is brought to its
// configured state (or, with DryRun, reported). It returns the results of
// the links it acted on and the errors joined; a link that disappeared
// during the pass is not an error. The tunnel ladder's reassert rung calls it.
func (g *OffloadGuard) Enforce(ctx context.Context) ([]netfix.Result, error) {
	return g.fullPass(ctx, "reassert")
}

func (g *OffloadGuard) fullPass(ctx context.Context, trigger string) ([]netfix.Result, error) {
	g.pass.Lock()
	defer g.pass.Unlock()
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	selected, dr, err := g.selectAll()
	if err != nil {
		// Never act on what could not be observed: keep the last state.
		g.log.Error("selecting uplinks", "error", err)
		return nil, fmt.Errorf("selecting uplinks: %w", err)
	}
	names := map[string]bool{}
	covered := map[int]bool{}
	for _, s := range selected {
		names[s.Name] = true
		for _, i := range s.Selectors {
			covered[i] = true
		}
	}
	g.mu.Lock()
	g.dr = dr
	for name := range g.state {
		if !names[name] {
			delete(g.state, name)
		}
	}
	g.absent = g.absent[:0]
	for i := range g.uplinks {
		if !covered[i] {
			g.absent = append(g.absent, i)
		}
	}
	g.mu.Unlock()

	var results []netfix.Result
	var errs []error
	for _, s := range selected {
		trig := trigger
		if st, known := g.known(s.Name); (!known || st.link.Index != s.Index) && trigger != "start" {
			trig = "link-appeared"
		}
		res, err := g.enforceLink(ctx, s, trig)
		if res != nil {
			results = append(results, *res)
		}
		if err != nil {
			errs = append(errs, err)
		}
	}
	return results, errors.Join(errs...)
}

func (g *OffloadGuard) selectAll() ([]probes.SelectedLink, map[int]bool, error) {
	links, err := g.links.Links()
	if err != nil {
		return nil, nil, err
	}
	var dr map[int]bool
	if slices.ContainsFunc(g.uplinks, func(u configs.Uplink) bool { return u.Name == configs.DefaultRoute }) {
		idx, err := g.links.DefaultRouteLinks()
		if err != nil {
			return nil, nil, err
		}
		dr = map[int]bool{}
		for _, i := range idx {
			dr[i] = true
		}
	}
	var out []probes.SelectedLink
	for _, l := range links {
		if by := g.selectors(l, dr); len(by) > 0 {
			out = append(out, probes.SelectedLink{Link: l, Selectors: by})
		}
	}
	slices.SortFunc(out, func(a, b probes.SelectedLink) int { return strings.Compare(a.Name, b.Name) })
	return out, dr, nil
}

func (g *OffloadGuard) selectors(l probes.Link, dr map[int]bool) []int {
	var by []int
	for i, u := range g.uplinks {
		if probes.MatchUplink(u.Name, l, dr) {
			by = append(by, i)
		}
	}
	return by
}

// spec merges the uplink configs that select a link: TX checksum is guarded
// off if any of them says off (or leaves it unset), and features are merged
// in config order, a later uplink's value winning.
func (g *OffloadGuard) spec(by []int) (txOff bool, features map[string]string) {
	features = map[string]string{}
	for _, i := range by {
		u := g.uplinks[i]
		if u.TxChecksum != "leave" {
			txOff = true
		}
		maps.Copy(features, u.Features)
	}
	return txOff, features
}

func (g *OffloadGuard) known(name string) (*uplinkState, bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	st, ok := g.state[name]
	return st, ok
}

func (g *OffloadGuard) forget(name string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	delete(g.state, name)
}

// enforceLink brings one link to its configured state and records what it
// found. Called with g.pass held. It returns nil for a link that vanished.
func (g *OffloadGuard) enforceLink(ctx context.Context, s probes.SelectedLink, trigger string) (*netfix.Result, error) {
	txOff, features := g.spec(s.Selectors)
	start := g.now()
	var res netfix.Result
	var err error
	if txOff {
		res, err = netfix.EnsureTxChecksumOff(ctx, g.nic, s.Name, features, g.dryRun)
	} else {
		res, err = netfix.EnsureFeatures(ctx, g.nic, s.Name, features, g.dryRun)
	}
	took := g.now().Sub(start)
	if errors.Is(err, os.ErrNotExist) {
		g.forget(s.Name) // gone between the event or listing and the read: nothing to guard
		return nil, nil
	}
	if ctx.Err() != nil && errors.Is(err, ctx.Err()) {
		return nil, nil
	}

	var notApplied *netfix.NotAppliedError
	errors.As(err, &notApplied)
	wrongSet := map[string]bool{}
	for _, c := range res.Changes {
		wrongSet[netfix.FeatureOfEntry(c)] = true
	}
	if notApplied != nil {
		for _, f := range notApplied.Features {
			wrongSet[f] = true
		}
	}
	wrong := slices.Sorted(maps.Keys(wrongSet))
	var fixed []string
	for _, f := range res.Fixed {
		fixed = append(fixed, netfix.FeatureOfEntry(f))
	}

	log := g.log.With("link", s.Name)
	var sels []string
	for _, i := range s.Selectors {
		sels = append(sels, g.uplinks[i].Name)
	}

	g.mu.Lock()
	st, ok := g.state[s.Name]
	if !ok || st.link.Index != s.Index {
		st = &uplinkState{since: start}
		g.state[s.Name] = st
	}
	st.link, st.by = s.Link, s.Selectors
	var evs []Event

	key := strings.Join(wrong, ",")
	if len(wrong) > 0 && key != st.lastWrong {
		evs = append(evs, Event{
			ID: NewEventID(), Time: start, Kind: EventOffloadDrift, Target: s.Name,
			Summary: fmt.Sprintf("%s: guarded offload features in the wrong state: %s (%s)", s.Name, strings.Join(wrong, ", "), trigger),
			Evidence: map[string]any{
				"features": wrong, "changes": res.Changes, "trigger": trigger,
				"uplink": sels, "detected_at": start.UTC().Format(time.RFC3339Nano), "dry_run": g.dryRun,
			},
		})
	}
	if len(wrong) > 0 && key != st.lastWrong || (err != nil && err.Error() != st.lastErr) {
		result, summary := "changed", fmt.Sprintf("%s: %s", s.Name, strings.Join(res.Changes, ", "))
		switch {
		case err != nil:
			result, summary = "failed", fmt.Sprintf("%s: %v", s.Name, err)
		case res.DryRun:
			result, summary = "dry-run", fmt.Sprintf("%s: would change %s", s.Name, strings.Join(res.Changes, ", "))
		}
		ev := Event{
			ID: NewEventID(), Time: start, Kind: EventAction, Target: s.Name, Action: ActionOffloadOff,
			Result: result, Duration: took.Seconds(), Summary: summary,
			Evidence: map[string]any{"changes": res.Changes, "trigger": trigger},
		}
		if len(res.Fixed) > 0 {
			ev.Evidence["fixed"] = res.Fixed
		}
		if err != nil {
			ev.Evidence["error"] = err.Error()
		}
		evs = append(evs, ev)
		st.lastAction = fmt.Sprintf("%s %s at %s", ActionOffloadOff, result, start.UTC().Format(time.RFC3339))
	}
	fkey := strings.Join(fixed, ",")
	if len(fixed) > 0 && fkey != st.lastFixed {
		evs = append(evs, Event{
			ID: NewEventID(), Time: start, Kind: EventOffloadDrift, Target: s.Name,
			Summary: fmt.Sprintf("%s: %s in the wrong state and fixed by the driver: cannot be changed", s.Name, strings.Join(fixed, ", ")),
			Evidence: map[string]any{"fixed": res.Fixed, "trigger": trigger, "uplink": sels,
				"detected_at": start.UTC().Format(time.RFC3339Nano)},
		})
	}

	// Remember what was last seen wrong, for deduplication: after a
	// successful change the features are right again, so the next drift
	// is news; in a dry run or when the change did not apply they stay
	// wrong, and repeating that every tick is not.
	remaining := key // dry run, or the change failed
	switch {
	case notApplied != nil:
		remaining = strings.Join(notApplied.Features, ",")
	case res.Changed:
		remaining = ""
	}
	st.lastWrong = remaining
	st.lastFixed = fkey
	st.lastErr = ""
	if err != nil {
		st.lastErr = err.Error()
	}

	newState, healthy, detail := uplinkOK, true, ""
	switch {
	case notApplied != nil:
		newState, healthy, detail = uplinkDegraded, false, err.Error()
	case err != nil:
		newState, healthy, detail = uplinkError, false, err.Error()
	case len(fixed) > 0:
		newState, healthy, detail = uplinkFixed, false, strings.Join(res.Fixed, ", ")+": the driver does not allow changing it"
	case res.DryRun:
		newState, healthy, detail = uplinkDrift, false, "dry run, would change: "+strings.Join(res.Changes, ", ")
	case res.Changed:
		detail = "fixed: " + strings.Join(res.Changes, ", ")
	}
	if newState != st.state {
		st.since = start
	}
	st.state, st.healthy, st.detail = newState, healthy, detail
	st.info = UplinkInfo{SelectedBy: sels, TxChecksumGuarded: txOff}
	if len(features) > 0 {
		st.info.Features = maps.Clone(features)
	}
	g.mu.Unlock()

	for _, ev := range evs {
		g.emit(ev)
	}
	if res.Changed && g.onChanged != nil {
		g.onChanged(s.Name)
	}
	switch {
	case err != nil:
		log.Error("enforcing offload settings", "trigger", trigger, "error", err)
	case res.Changed:
		log.Info("offload settings restored", "trigger", trigger, "changes", res.Changes, "took_seconds", took.Seconds())
	case res.DryRun:
		log.Info("dry run: offload settings would change", "trigger", trigger, "changes", res.Changes)
	}
	if err != nil {
		return &res, fmt.Errorf("uplink %s: %w", s.Name, err)
	}
	return &res, nil
}

// Checks returns one check of kind "uplink" per selected link, and one per
// uplink config that selected no link in the last full pass (state
// "absent", healthy: nothing to expose). Safe to call from any goroutine.
func (g *OffloadGuard) Checks() []Check {
	g.mu.Lock()
	defer g.mu.Unlock()
	var out []Check
	for _, name := range slices.Sorted(maps.Keys(g.state)) {
		st := g.state[name]
		out = append(out, Check{
			Kind: KindUplink, Target: name, State: st.state, Healthy: st.healthy, Detail: st.detail,
			LastAction: st.lastAction, Since: st.since, Uplink: cloneUplinkInfo(st.info),
		})
	}
	for _, i := range g.absent {
		out = append(out, Check{
			Kind: KindUplink, Target: g.uplinks[i].Name, State: uplinkAbsent, Healthy: true,
			Detail: "no link matches", Uplink: &UplinkInfo{SelectedBy: []string{g.uplinks[i].Name}},
		})
	}
	return out
}

func cloneUplinkInfo(i UplinkInfo) *UplinkInfo {
	i.SelectedBy = slices.Clone(i.SelectedBy)
	i.Features = maps.Clone(i.Features)
	return &i
}
