package tunnel

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"time"

	"golang.zx2c4.com/wireguard/wgctrl/wgtypes"

	"github.com/edgeheal/edgeheal/agent/core"
	"github.com/edgeheal/edgeheal/configs"
	"github.com/edgeheal/edgeheal/netfix"
	"github.com/edgeheal/edgeheal/probes"
)

// The ladder runner: it asks ladderDecide what to do for each down peer,
// runs the rung through netfix, and reports it. The decisions are pure
// (ladder.go); this file is where they meet the system.

const (
	// tunnelActionTimeout bounds one rung; restart-unit waits for the unit
	// to be active again and gets longer.
	tunnelActionTimeout = 30 * time.Second
	tunnelUnitTimeout   = 2 * time.Minute
	// hostPathTimeout bounds the host's own probe of a peer's endpoint.
	hostPathTimeout = time.Second
)

// ErrTunnelResolve marks a reresolve that could not resolve endpoint_host:
// no address was observed, so the rung is skipped (no budget, no wait)
// rather than counted as a failed repair.
var errTunnelResolve = errors.New("endpoint_host did not resolve")

// longestAction is the longest a rung of this tunnel may hold its monitor.
// Called with m.mu held or from Run's goroutine; it reads only the config.
func (m *Monitor) longestAction() time.Duration {
	if ladderApplicable(configs.HealRestartUnit, m.spec.cfg) {
		return tunnelUnitTimeout
	}
	return tunnelActionTimeout
}

// enforceKeepalive re-asserts the configured keepalive when a peer drifted
// (Flannel rewrites peers on resync; a re-created interface starts at 0).
// It is configuration, not a repair: no budget. It runs every round while
// it changes something; when it did not (it failed, or a dry run), it waits
// the cooldown, then twice that, and so on up to the window, so that a dry
// run or a broken device does not repeat the same event every 30 s.
func (m *Monitor) enforceKeepalive(ctx context.Context) {
	start := m.os.Clock.Now()
	if start.Before(m.kaRetryAt) {
		return
	}
	actx, cancel := context.WithTimeout(ctx, tunnelActionTimeout)
	res, err := netfix.EnsureKeepalive(actx, m.os.WireGuard, m.spec.cfg.Interface, m.spec.selected, m.spec.cfg.PersistentKeepalive.D(), m.dryRun)
	cancel()
	end := m.os.Clock.Now()
	if err == nil && res.Changed {
		m.kaRetryAt, m.kaBackoff = time.Time{}, 0
	} else {
		first := max(m.cooldown, m.spec.interval)
		m.kaBackoff = min(max(2*m.kaBackoff, first), max(m.window, first))
		m.kaRetryAt = end.Add(m.kaBackoff)
	}
	m.actionEvent(m.spec.cfg.Interface, "keepalive", "keepalive drifted from "+m.spec.cfg.PersistentKeepalive.String(), start, end, res, err, nil)
}

// bringUp keeps setting the interface up after a bounce left it down: a
// rung must never leave the tunnel worse than it found it. Reported when
// it fails the first time and when it succeeds.
func (m *Monitor) bringUp(ctx context.Context) {
	if !m.book.leftDown() || m.dryRun {
		return
	}
	start := m.os.Clock.Now()
	actx, cancel := context.WithTimeout(ctx, tunnelActionTimeout)
	res, err := netfix.EnsureLinkUp(actx, m.os.Bounce, m.spec.cfg.Interface)
	cancel()
	end := m.os.Clock.Now()
	switch {
	case err == nil:
		m.book.setLeftDown(false, end)
		m.actionEvent(m.spec.cfg.Interface, "link-up", "a bounce left the interface down", start, end, res, nil, nil)
	case !m.upFailing:
		m.actionEvent(m.spec.cfg.Interface, "link-up", "a bounce left the interface down; trying again every round", start, end, res, err, nil)
	}
	m.upFailing = err != nil
}

// rungOutcome is what one rung did.
type rungOutcome struct {
	res        netfix.Result
	err        error
	start, end time.Time
	evidence   map[string]any // more for the action's event (rebind: the stuck mapping)
	event      core.Event     // the action's event
}

// runLadder decides and acts for every down peer of the tunnel. A rung that
// changed nothing cannot have fixed anything: the ladder moves past it in
// the same round (bounded by the length of the heal list). A tunnel-wide
// rung runs at most once per round, shared by every peer that needs it.
func (m *Monitor) runLadder(ctx context.Context, down []*peerTrack) {
	shared := map[string]rungOutcome{}
	for _, p := range down {
		for range len(m.spec.cfg.Heal) + 1 {
			if ctx.Err() != nil || !m.climb(ctx, p, shared) {
				break
			}
		}
	}
}

// climb takes one step of the ladder for p and reports whether the ladder
// moves on in this round (the rung changed nothing).
func (m *Monitor) climb(ctx context.Context, p *peerTrack, shared map[string]rungOutcome) bool {
	now := m.os.Clock.Now()
	if m.adoptEnded() {
		// The action this monitor waited for returned since the round
		// began: its peer is being verified now, not acted on again.
		return false
	}
	if in, done := m.book.inFlight(); in != nil {
		// A monitor of the previous config started an action that has not
		// returned: one action at a time per tunnel, so wait for it and
		// then verify it (adoptEnded).
		m.adopted, m.adoptPeer = done, in.Peer
		m.holdLadder(p, ladderStep{HoldKind: holdBusy, Rung: in.Rung,
			Hold: fmt.Sprintf("%s on %s, started %s by the previous config, has not returned", in.Rung, in.Target, in.Started.UTC().Format(time.RFC3339))}, now)
		return false
	}
	g := m.guards(p) // observed before the round decided (observeGuards)
	st := ladderDecide(m.spec.cfg, p.st.Rung, g, m.budget(), now)
	if st.HoldKind == holdUplink && g.Path == pathDown && !g.SessionValid {
		m.watchPathBack(ctx, m.hostTarget(p.sig.endpoint))
	}
	if st.GiveUp != "" {
		m.apply(p, peerObservation{Now: now, GaveUp: true, Reason: st.GiveUp})
		return false
	}
	if st.HoldKind != "" {
		m.holdLadder(p, st, now)
		return false
	}
	p.holdKind, p.hold = "", ""
	if st.Skip != "" {
		// Not called for by the evidence: passed over like a rung that
		// changed nothing, and said so.
		m.actionEvent(p.id, st.Rung, p.id+": "+p.st.Reason, now, now, netfix.Result{Action: st.Rung, Target: p.id},
			fmt.Errorf("%w: %s", errRebindNotIndicated, st.Skip), nil)
		m.apply(p, peerObservation{Now: now, Skipped: st.Rung})
		return true
	}
	o, done := shared[st.Rung]
	if !done && ladderDisruptive(st.Rung) {
		hs, ok := m.handshakeNow(p)
		if why := freshSession(p.sig.handshake, hs, ok); why != "" {
			m.holdLadder(p, ladderStep{Index: st.Index, Rung: st.Rung, HoldKind: holdFresh, Hold: why}, now)
			return false
		}
	}
	if !done {
		var cut bool
		if o, cut = m.act(ctx, p, st); cut {
			return false // stopping: the action finishes and records itself
		}
		if ladderTunnelWide(st.Rung) {
			shared[st.Rung] = o
		}
	}
	p.lastAction = fmt.Sprintf("%s: %s at %s", st.Rung, tunnelResultWord(o.res, o.err), o.start.UTC().Format(time.RFC3339))
	if tunnelNoop(o.res, o.err) {
		m.apply(p, peerObservation{Now: o.end, Skipped: st.Rung})
		return true
	}
	m.apply(p, peerObservation{Now: o.end, StartedAt: o.start, Started: st.Rung})
	m.forced(p, st.Rung, o)
	return false
}

// handshakeNow reads p's last handshake from the device again, the moment
// before a disruptive rung: one read, only when a rung that throws state
// away is about to run (budgeted, so rare). ok is false when the device or
// the peer cannot be read.
func (m *Monitor) handshakeNow(p *peerTrack) (time.Time, bool) {
	peers, _, err := probes.ReadDevice(m.os.WireGuard, m.spec.cfg.Interface)
	if err != nil {
		return time.Time{}, false
	}
	for i := range peers {
		if peers[i].PublicKey == p.key {
			return peers[i].LastHandshake, true
		}
	}
	return time.Time{}, false
}

// budget is the tunnel's budget as the ledger has it now.
func (m *Monitor) budget() *actionBudget {
	spent, last := m.book.budget()
	return budgetFrom(m.pol, spent, last)
}

// act runs one rung for p. It is recorded in the ledger before it starts
// (the budget it spends, the action in flight) and runs on a goroutine of
// its own with its own timeout, so that a reload cannot cut it short: if
// ctx ends first (a reload, a stop), act returns at once with cut set, and
// the action reports and records its outcome by itself when it returns;
// the next monitor waits for it (climb) and verifies it (adoptEnded). A
// rung that changed nothing gets its budget back.
func (m *Monitor) act(ctx context.Context, p *peerTrack, st ladderStep) (o rungOutcome, cut bool) {
	start := m.os.Clock.Now()
	disruptive := ladderDisruptive(st.Rung)
	in := inFlight{Rung: st.Rung, Target: p.id, Peer: p.key.String(), Next: st.Index + 1, Started: start}
	if ladderTunnelWide(st.Rung) {
		in.Target = m.spec.cfg.Interface
	}
	m.book.begin(in, disruptive) // false only while another monitor's action runs, which climb ruled out
	req := rungRequest{rung: st.Rung, key: p.key, endpoint: p.sig.endpoint, keepalive: p.sig.keepalive, listenPort: m.listenPort}
	before, why := p.st, fmt.Sprintf("%s: %s", p.id, p.st.Reason)
	out := make(chan rungOutcome, 1)
	go func() {
		var o rungOutcome
		if err := core.Recovered(func() error { o = m.runRung(context.WithoutCancel(ctx), req); return nil }); err != nil {
			// A rung that panicked failed; the tunnel must not stay busy.
			m.log.Error("tunnel action panicked", "action", st.Rung, "error", err)
			o = rungOutcome{err: err, end: m.os.Clock.Now()}
			m.setBusy("")
		}
		o.start = start
		noop := tunnelNoop(o.res, o.err)
		obs := peerObservation{Now: o.end, StartedAt: o.start, Started: st.Rung}
		if noop {
			obs = peerObservation{Now: o.end, Skipped: st.Rung}
		}
		if errors.Is(o.err, netfix.ErrLeftDown) {
			m.book.setLeftDown(true, o.end)
		}
		m.book.end(nextPeer(before, obs, m.spec.pol), noop && disruptive, o.end)
		o.event = m.actionEventOf(in.Target, st.Rung, why, o.start, o.end, o.res, o.err, o.evidence)
		out <- o
	}()
	select {
	case o = <-out:
		m.event(o.event)
		return o, false
	case <-ctx.Done():
		// The round is over; the action reports itself when it returns.
		go func() { o := <-out; m.emit(o.event) }()
		return o, true
	}
}

// adoptEnded verifies an action a previous monitor started, once it has
// returned: the ledger has the state it left its peer in. It reports
// whether it did (the peer's state was replaced).
func (m *Monitor) adoptEnded() bool {
	if m.adopted == nil {
		return false
	}
	select {
	case <-m.adopted:
	default:
		return false
	}
	m.adopted = nil
	st, ok := m.book.peers(m.spec.cfg.Heal)[m.adoptPeer]
	m.log.Info("an action of the previous config returned: verifying it", "peer", m.adoptPeer, "recorded", ok, "state", st.Phase, "next_rung", st.Rung)
	for _, p := range m.peers {
		if p.key.String() == m.adoptPeer && ok {
			p.st, p.holdKind, p.hold = st, "", ""
		}
	}
	return ok
}

// holdLadder records why the ladder waits, and reports an uplink outage or a
// bad clock once per incident: they are the diagnosis, not noise.
func (m *Monitor) holdLadder(p *peerTrack, st ladderStep, now time.Time) {
	p.holdKind, p.hold = st.HoldKind, st.Hold
	if st.HoldKind == holdCooldown || st.HoldKind == holdSettle || st.HoldKind == holdPending || st.HoldKind == holdFresh || p.reported[st.HoldKind] {
		return
	}
	if p.reported == nil {
		p.reported = map[string]bool{}
	}
	p.reported[st.HoldKind] = true
	if st.HoldKind == holdBusy {
		m.log.Info("waiting for an action in flight before the next", "peer", p.id, "why", st.Hold)
		return
	}
	kind, result := "uplink-outage", "held"
	switch st.HoldKind {
	case holdClock:
		kind = "clock"
	case holdPath:
		kind, result = "held", holdPath
	}
	m.log.Warn("not acting on tunnel", "peer", p.id, "why", st.Hold, "next_rung", st.Rung)
	m.event(core.Event{Time: now, Kind: kind, Target: p.id, Result: result,
		Summary:  fmt.Sprintf("%s dark, not acting (%s): %s", p.id, st.Rung, st.Hold),
		Evidence: p.evidence(now)})
}

// rungRequest is what one rung acts on: copied from the peer's track, so
// that the rung's goroutine shares nothing with the monitor's.
type rungRequest struct {
	rung       string
	key        wgtypes.Key
	endpoint   *net.UDPAddr
	keepalive  time.Duration // the peer's own, for keepalive 0 in config
	listenPort int           // the tunnel's listen port in the round that chose the rung
}

// runRung runs one rung through netfix, bounded by its timeout.
func (m *Monitor) runRung(ctx context.Context, r rungRequest) rungOutcome {
	timeout := tunnelActionTimeout
	if r.rung == configs.HealRestartUnit {
		timeout = tunnelUnitTimeout
	}
	actx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	m.setBusy(r.rung)
	defer m.setBusy("")
	o := rungOutcome{start: m.os.Clock.Now()}
	iface, ka := m.spec.cfg.Interface, m.spec.cfg.PersistentKeepalive.D()
	switch r.rung {
	case configs.HealReassert:
		o.res, o.err = m.reassert(actx)
	case configs.HealHandshake, configs.HealRebind:
		if ka <= 0 {
			ka = r.keepalive // keepalive 0 in config: keep the peer's own
		}
		if r.rung == configs.HealRebind {
			o.res, o.evidence, o.err = m.rebind(actx, r, ka)
			break
		}
		o.res, o.err = netfix.ForceHandshake(actx, m.os.WireGuard, iface, r.key, ka, m.dryRun)
	case configs.HealReresolve:
		o.res, o.err = m.reresolve(actx, r.key, r.endpoint)
	case configs.HealBounce:
		o.res, o.err = netfix.ForceBounce(actx, m.os.Bounce, iface, m.dryRun)
	case configs.HealRestartUnit:
		o.res, o.err = netfix.RestartUnit(actx, m.os.Systemd, m.spec.cfg.Unit, m.dryRun)
	default:
		o.err = fmt.Errorf("unknown heal rung %q", r.rung)
	}
	o.end = m.os.Clock.Now()
	return o
}

// reassert is the first rung: the offload guard's Enforce, then the
// keepalive on the selected peers (skipped for keepalive 0). One Result,
// Action "reassert", with every change of both.
func (m *Monitor) reassert(ctx context.Context) (netfix.Result, error) {
	out := netfix.Result{Action: "reassert", Target: m.spec.cfg.Interface}
	var errs []error
	add := func(r netfix.Result) {
		out.Changed = out.Changed || r.Changed
		out.DryRun = out.DryRun || r.DryRun
		out.Changes = append(out.Changes, r.Changes...)
		out.Fixed = append(out.Fixed, r.Fixed...)
	}
	if m.offload != nil {
		rs, err := m.offload.Enforce(ctx)
		for _, r := range rs {
			add(r)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("re-asserting offload: %w", err))
		}
	}
	if ka := m.spec.cfg.PersistentKeepalive.D(); ka > 0 {
		r, err := netfix.EnsureKeepalive(ctx, m.os.WireGuard, m.spec.cfg.Interface, m.spec.selected, ka, m.dryRun)
		add(r)
		if err != nil {
			errs = append(errs, err)
		}
	}
	return out, errors.Join(errs...)
}

// reresolve resolves endpoint_host and, unless the peer's current address
// is among the answers, sets the one pickEndpoint chooses. A lookup that
// fails matches ErrTunnelResolve.
func (m *Monitor) reresolve(ctx context.Context, key wgtypes.Key, current *net.UDPAddr) (netfix.Result, error) {
	iface, host := m.spec.cfg.Interface, m.spec.cfg.EndpointHost
	r := netfix.Result{Action: "endpoint", Target: netfix.PeerTarget(iface, key)}
	name, port, err := splitEndpointHost(host, current)
	if err != nil {
		return r, err
	}
	addrs, err := m.os.Net.Lookup(ctx, name)
	if err == nil && len(addrs) == 0 {
		err = errors.New("no addresses")
	}
	if err != nil {
		return r, fmt.Errorf("re-resolving %s: %w: %w", host, errTunnelResolve, err)
	}
	ep, changed := pickEndpoint(addrs, port, current)
	if !changed {
		return r, nil // the peer already uses one of the answers
	}
	return netfix.EnsureEndpoint(ctx, m.os.WireGuard, iface, key, ep, m.dryRun)
}

// tunnelNoop reports whether an action ran and changed nothing (and would
// have changed nothing: a dry run that needed a change is not a no-op), or
// could not apply now (tunnelSkipped).
func tunnelNoop(res netfix.Result, err error) bool {
	if tunnelSkipped(err) {
		return true
	}
	return err == nil && !res.Changed && !res.DryRun
}

// tunnelSkipped reports whether a rung's error means it could not apply
// now, rather than that it failed: a hub's peer without an endpoint cannot
// be sent a handshake; an endpoint_host that did not resolve gave no
// address to set.
func tunnelSkipped(err error) bool {
	return errors.Is(err, netfix.ErrNoEndpoint) || errors.Is(err, errTunnelResolve) || errors.Is(err, errRebindNotIndicated)
}

func tunnelResultWord(res netfix.Result, err error) string {
	switch {
	case tunnelSkipped(err):
		return "skipped"
	case err != nil:
		return "failed"
	case res.DryRun:
		return "dry-run"
	case res.Changed:
		return "changed"
	}
	return "unchanged"
}

// actionEvent reports one action with its result and duration.
func (m *Monitor) actionEvent(target, action, why string, start, end time.Time, res netfix.Result, err error, extra map[string]any) {
	m.event(m.actionEventOf(target, action, why, start, end, res, err, extra))
}

// actionEventOf is the event of one action, logged. Safe to call from a
// rung's own goroutine.
func (m *Monitor) actionEventOf(target, action, why string, start, end time.Time, res netfix.Result, err error, extra map[string]any) core.Event {
	word := tunnelResultWord(res, err)
	ev := core.Event{Time: start, Kind: "action", Target: target, Action: action, Result: word,
		Duration: end.Sub(start).Seconds(), Evidence: map[string]any{"reason": why}}
	for k, v := range extra {
		ev.Evidence[k] = v
	}
	if len(res.Changes) > 0 {
		ev.Evidence["changes"] = res.Changes
	}
	if len(res.Fixed) > 0 {
		ev.Evidence["fixed"] = res.Fixed
	}
	if ladderDisruptive(action) && action != "keepalive" {
		ev.Evidence["budget_left"] = m.budget().left(end)
	}
	switch word {
	case "skipped":
		ev.Evidence["error"] = err.Error()
		ev.Summary = fmt.Sprintf("%s on %s skipped: %v", action, target, err)
		m.log.Info("tunnel action skipped", "action", action, "target", target, "err", err)
	case "failed":
		ev.Evidence["error"] = err.Error()
		ev.Summary = fmt.Sprintf("%s on %s failed: %v", action, target, err)
		m.log.Error("tunnel action failed", "action", action, "target", target, "err", err)
	case "dry-run":
		ev.Summary = fmt.Sprintf("dry run: would %s on %s (%s)", action, target, strings.Join(res.Changes, "; "))
		m.log.Info("dry run: would act", "action", action, "target", target, "changes", res.Changes)
	default:
		ev.Summary = fmt.Sprintf("%s on %s: %s", action, target, word)
		m.log.Info("tunnel action", "action", action, "target", target, "result", word, "changes", res.Changes,
			"duration_seconds", end.Sub(start).Seconds())
	}
	ev.ID = core.NewEventID()
	return ev
}
