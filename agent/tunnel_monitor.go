package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"strings"
	"sync"
	"time"

	"golang.zx2c4.com/wireguard/wgctrl/wgtypes"

	"github.com/edgeheal/edgeheal/configs"
	"github.com/edgeheal/edgeheal/netfix"
)

// Fallbacks for zero configuration values; configs' embedded defaults
// normally set them (probe 1s × 3 misses, verify_timeout 15s).
const (
	tunnelDefaultInterval = time.Second
	tunnelDefaultMisses   = 3
	tunnelDefaultVerify   = 15 * time.Second
	// tunnelActionTimeout bounds one rung; restart-unit waits for the unit
	// to be active again and gets longer.
	tunnelActionTimeout = 30 * time.Second
	tunnelUnitTimeout   = 2 * time.Minute
)

// TunnelMonitor watches the peers of the configured WireGuard tunnels and
// runs the remediation ladder for the ones that go dark. One goroutine (Run)
// owns all its state; Suspect and Checks are safe to call from any
// goroutine, before, during and after Run.
type TunnelMonitor struct {
	tunnels  []*tunnelRun
	byName   map[string]*tunnelRun
	dryRun   bool
	os       TunnelOS
	log      *slog.Logger
	emit     Emit
	tick     time.Duration
	cooldown time.Duration
	window   time.Duration

	wake chan struct{} // a suspicion arrived: run a round now

	// owned by Run's goroutine
	roundNo     uint64
	clockRound  uint64
	clockOK     bool
	clockSoft   bool
	clockCause  string
	uplinkCache map[string]UplinkStatus // per round, by endpoint
	uplinkErr   map[string]error

	mu        sync.Mutex
	suspects  map[string]string // tunnel → reason, drained by the loop
	nudge     string            // an uplink was just fixed: why; drained by the loop
	views     []peerView
	clockView *ClockStatus
	clockErr  error
}

var _ Part = (*TunnelMonitor)(nil)

// tunnelRun is the monitor's state for one configured tunnel.
type tunnelRun struct {
	cfg       configs.Tunnel
	pol       PeerPolicy
	log       *slog.Logger
	interval  time.Duration
	timeout   time.Duration
	probeIP   net.IP // the probe target's address, to find the peer that carries it
	keys      map[wgtypes.Key]bool
	selected  func(wgtypes.Key) bool
	budget    *actionBudget
	due       time.Time
	round     uint64
	peers     map[wgtypes.Key]*peerTrack
	order     []*peerTrack // selected peers in device order, this round
	down      []*peerTrack // scratch, reused every round
	degraded  []*peerTrack
	readErr   error
	kaRetryAt time.Time
	kaBackoff time.Duration // wait after a keepalive fix that did not change anything (failed, dry run)
}

// peerTrack is the monitor's state for one peer.
type peerTrack struct {
	key        wgtypes.Key
	id         string // "wg0/AbCdEfGh"
	selected   bool
	round      uint64
	sig        peerSignals
	st         PeerState
	probe      string // this round's probe result for the peer, "" if none covers it
	lastAction string
	holdKind   string
	hold       string
	reported   map[string]bool // hold kinds already reported in this incident
	alertAt    time.Time
	alertEvery time.Duration
}

// peerView is what Checks shows of a peer, copied at the end of every round.
type peerView struct {
	id           string
	iface        string
	key          wgtypes.Key
	rx, tx       int64
	phase        PeerPhase
	since        time.Time
	reason       string
	gaveUp       string
	hold         string
	lastAction   string
	handshake    time.Time
	handshakeAge time.Duration
	rxDelta      int64
	txDelta      int64
	probe        string
	keepalive    time.Duration
	endpoint     *net.UDPAddr
	readErr      error
}

// NewTunnelMonitor returns a monitor for tunnels under policy. With dryRun
// every action is asked for with dryRun set: nothing changes, and the events
// say what would have been done. Events go to emit (which must not block);
// log receives operational logs. tos must not be nil; log and emit may be
// (nothing is logged or emitted). Zero probe interval, misses and
// verify_timeout fall back to the package defaults (1 s, 3, 15 s).
func NewTunnelMonitor(tunnels []configs.Tunnel, policy configs.Policy, dryRun bool, tos TunnelOS, log *slog.Logger, emit Emit) *TunnelMonitor {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if emit == nil {
		emit = func(Event) {}
	}
	m := &TunnelMonitor{
		byName:   make(map[string]*tunnelRun, len(tunnels)),
		dryRun:   dryRun,
		os:       tos,
		log:      log,
		emit:     emit,
		cooldown: policy.Cooldown.D(),
		window:   policy.Window.D(),
		wake:     make(chan struct{}, 1),
		suspects: map[string]string{},
	}
	verify := policy.VerifyTimeout.D()
	if verify <= 0 {
		verify = tunnelDefaultVerify
	}
	for _, t := range tunnels {
		tr := &tunnelRun{
			cfg:      t,
			log:      log.With("tunnel", t.Interface),
			interval: t.Probe.Interval.D(),
			timeout:  t.Probe.Timeout.D(),
			probeIP:  tunnelProbeIP(t.Probe.Target),
			budget:   newActionBudget(policy.MaxDisruptive, policy.Window.D(), policy.Cooldown.D()),
			peers:    map[wgtypes.Key]*peerTrack{},
			pol:      PeerPolicy{Misses: t.Probe.Misses, VerifyTimeout: verify, Heal: t.Heal},
		}
		if tr.interval <= 0 {
			tr.interval = tunnelDefaultInterval
		}
		if tr.timeout <= 0 || tr.timeout > tr.interval {
			tr.timeout = tr.interval
		}
		if tr.pol.Misses <= 0 {
			tr.pol.Misses = tunnelDefaultMisses
		}
		if !t.Peers.All {
			tr.keys = map[wgtypes.Key]bool{}
			for _, k := range t.Peers.Keys {
				if key, err := wgtypes.ParseKey(k); err == nil {
					tr.keys[key] = true
				}
			}
		}
		tr.selected = func(k wgtypes.Key) bool { return tr.keys == nil || tr.keys[k] }
		if m.tick == 0 || tr.interval < m.tick {
			m.tick = tr.interval
		}
		m.tunnels = append(m.tunnels, tr)
		m.byName[t.Interface] = tr
	}
	if m.tick == 0 {
		m.tick = tunnelDefaultInterval
	}
	return m
}

// tunnelProbeIP returns the address of a probe target ("tcp://ip:port",
// "icmp://ip"), or nil.
func tunnelProbeIP(target string) net.IP {
	if target == "" {
		return nil
	}
	u, err := url.Parse(target)
	if err != nil {
		return nil
	}
	return net.ParseIP(u.Hostname())
}

// Run observes every tunnel at its probe interval and acts, until ctx is
// done; then it returns nil. It must be called once.
func (m *TunnelMonitor) Run(ctx context.Context) error {
	if len(m.tunnels) == 0 {
		<-ctx.Done()
		return nil
	}
	tick := time.NewTicker(m.tick)
	defer tick.Stop()
	for {
		m.round(ctx)
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		case <-m.wake:
		}
	}
}

// Suspect reports that a workload's path through tunnel is dark while the
// host's path is fine (the workload monitor confirmed it with its own
// streak). The next round, which starts at once, treats it as a confirmed
// bad observation of the peer that carries the tunnel's probe target, or of
// every selected peer when no probe target identifies one. Unknown tunnels
// are logged and ignored.
func (m *TunnelMonitor) Suspect(tunnel, reason string) {
	m.mu.Lock()
	m.suspects[tunnel] = reason
	m.mu.Unlock()
	select {
	case m.wake <- struct{}{}:
	default:
	}
}

// Nudge reports that something known to darken tunnels was just fixed (the
// offload guard turned an uplink's TX checksum offload off). The next round
// starts at once for every tunnel, and in it a probe miss of a peer without
// a valid session is confirmed on the spot instead of after probe.misses in
// a row: the cause is known, and a tunnel that could not complete a
// handshake through the corrupting uplink only comes back with a fresh one
// (WireGuard alone retries every 5 s). A probe that answers changes nothing,
// and a peer whose session survived (a re-plug) keeps the usual streak.
func (m *TunnelMonitor) Nudge(reason string) {
	m.mu.Lock()
	m.nudge = reason
	m.mu.Unlock()
	select {
	case m.wake <- struct{}{}:
	default:
	}
}

// wgRejectAfterTime is WireGuard's REJECT_AFTER_TIME (a protocol constant,
// kernel and wireguard-go alike): a session older than this carries no data.
const wgRejectAfterTime = 180 * time.Second

// sessionValid reports whether the peer has a session WireGuard can still
// use: a handshake within REJECT_AFTER_TIME. A nudge confirms a probe miss
// only for a peer without one: a session that survived a re-plug is left to
// the usual streak, since a probe sent while the new link came up may just
// have been lost.
func sessionValid(ps *PeerStats, now time.Time) bool {
	return !ps.LastHandshake.IsZero() && now.Sub(ps.LastHandshake) < wgRejectAfterTime
}

func (m *TunnelMonitor) takeNudge() string {
	m.mu.Lock()
	defer m.mu.Unlock()
	n := m.nudge
	m.nudge = ""
	return n
}

func (m *TunnelMonitor) takeSuspects() map[string]string {
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.suspects) == 0 {
		return nil
	}
	s := m.suspects
	m.suspects = map[string]string{}
	return s
}

// tunnelReading is one tunnel's observations of one round.
type tunnelReading struct {
	peers []PeerStats
	err   error
	probe *TunnelProbeResult
}

// round observes the due tunnels (in parallel: a probe may take its whole
// timeout) and then, in this goroutine, updates state and acts.
func (m *TunnelMonitor) round(ctx context.Context) {
	m.roundNo++
	m.uplinkCache, m.uplinkErr = nil, nil
	suspects := m.takeSuspects()
	nudge := m.takeNudge()
	for name, why := range suspects {
		if _, ok := m.byName[name]; !ok {
			m.log.Warn("suspicion for a tunnel that is not configured", "tunnel", name, "reason", why)
		}
	}
	start := time.Now()
	var due []*tunnelRun
	for _, t := range m.tunnels {
		_, suspected := suspects[t.cfg.Interface]
		if suspected || nudge != "" || !start.Before(t.due.Add(-m.tick/2)) {
			due = append(due, t)
		}
	}
	readings := make([]tunnelReading, len(due))
	var wg sync.WaitGroup
	for i, t := range due {
		wg.Go(func() {
			r := &readings[i]
			if t.cfg.Probe.Target != "" {
				// The probe bounds itself with the timeout; a context that ended
				// first would make it an error (no observation), not a miss.
				p := m.os.Probe(ctx, t.cfg.Probe.Target, t.timeout)
				r.probe = &p
			}
			r.peers, r.err = m.os.ReadPeers(ctx, t.cfg.Interface)
		})
	}
	wg.Wait()
	if ctx.Err() != nil {
		return // stopping: these observations were cut short
	}
	// A nudge that arrived while this round observed applies to it too: a
	// probe that missed after the uplink was fixed, or while it was being
	// fixed, is all the evidence a fresh handshake needs.
	if n := m.takeNudge(); n != "" {
		nudge = n
		if len(due) < len(m.tunnels) {
			m.Nudge(n) // the tunnels this round did not observe get it next round
		}
	}
	now := time.Now()
	for i, t := range due {
		t.due = start.Add(t.interval)
		m.roundTunnel(ctx, t, &readings[i], suspects[t.cfg.Interface], nudge, now)
	}
	m.publish()
}

// roundTunnel updates every peer of one tunnel from its reading and acts.
func (m *TunnelMonitor) roundTunnel(ctx context.Context, t *tunnelRun, r *tunnelReading, suspicion, nudge string, now time.Time) {
	t.round++
	if r.err != nil {
		// No observation: every peer keeps its state.
		if t.readErr == nil {
			t.log.Warn("cannot read tunnel peers", "err", r.err)
		}
		t.readErr = r.err
		return
	}
	if t.readErr != nil {
		t.log.Info("tunnel peers readable again")
		t.readErr = nil
	}

	probeKey, haveProbeKey := t.probePeer(r.peers)
	staleAfter, rxSilence := t.cfg.StaleAfter.D(), t.cfg.RxSilence.D()
	wantKA := t.cfg.PersistentKeepalive.D()
	drift := false
	t.order, t.down, t.degraded = t.order[:0], t.down[:0], t.degraded[:0]
	for i := range r.peers {
		ps := &r.peers[i]
		p := t.peers[ps.PublicKey]
		if p == nil {
			p = &peerTrack{key: ps.PublicKey, selected: t.selected(ps.PublicKey)}
			p.id = t.cfg.Interface + "/" + ps.PublicKey.String()[:8]
			t.peers[ps.PublicKey] = p
		}
		p.round = t.round
		if !p.selected {
			continue
		}
		t.order = append(t.order, p)
		if p.sig.update(ps, now) && p.st.Phase != "" && p.st.Phase != PeerOK {
			t.log.Debug("peer re-added: counters re-baselined", "peer", p.id)
		}
		if wantKA > 0 && ps.Keepalive != wantKA {
			drift = true
		}
		var probe *TunnelProbeResult
		p.probe = ""
		sus := ""
		mine := haveProbeKey && ps.PublicKey == probeKey
		if r.probe != nil && mine {
			probe = r.probe
			p.probe = tunnelProbeText(r.probe)
		}
		if suspicion != "" && (mine || !haveProbeKey) {
			sus = suspicion
		}
		obs := peerObserve(p.st, &p.sig, now, staleAfter, rxSilence, probe, sus)
		if nudge != "" && probe != nil && obs.Bad && obs.Err == nil && !sessionValid(ps, now) {
			obs.Confirmed = true
			obs.Reason += " (no session, right after " + nudge + ")"
		}
		m.apply(t, p, obs)
		switch p.st.Phase {
		case PeerDown:
			t.down = append(t.down, p)
		case PeerDegraded:
			t.degraded = append(t.degraded, p)
		}
	}
	if len(t.peers) > len(r.peers) {
		for k, p := range t.peers {
			if p.round != t.round {
				delete(t.peers, k)
				if p.selected && !p.st.Opened.IsZero() {
					m.event(Event{Time: now, Kind: "recovered", Target: p.id, Result: "peer-removed",
						Duration: now.Sub(p.st.Opened).Seconds(),
						Summary:  fmt.Sprintf("%s removed from %s while %s: incident closed", p.id, t.cfg.Interface, p.st.Phase)})
				}
			}
		}
	}
	if drift {
		m.enforceKeepalive(ctx, t)
	} else {
		t.kaRetryAt, t.kaBackoff = time.Time{}, 0
	}
	if len(t.down) > 0 {
		m.runLadder(ctx, t)
	}
	for _, p := range t.degraded {
		if !now.Before(p.alertAt) {
			p.alertEvery = ladderAlertBackoff(p.alertEvery, m.cooldown, m.window)
			p.alertAt = now.Add(p.alertEvery)
			m.event(Event{Time: now, Kind: "degraded", Target: p.id, Result: "alert",
				Duration: now.Sub(p.st.Opened).Seconds(),
				Summary: fmt.Sprintf("%s still dark since %s (%s); gave up: %s", p.id, p.st.Opened.UTC().Format(time.RFC3339),
					p.st.Reason, p.st.GaveUp),
				Evidence: map[string]any{"next_alert_seconds": p.alertEvery.Seconds()}})
		}
	}
}

// probePeer finds the peer the tunnel's probe (and a workload's suspicion)
// belongs to: the selected peer whose allowed IPs contain the probe target,
// or, failing that, the only selected peer.
func (t *tunnelRun) probePeer(peers []PeerStats) (wgtypes.Key, bool) {
	var only wgtypes.Key
	n := 0
	for i := range peers {
		ps := &peers[i]
		if !t.selected(ps.PublicKey) {
			continue
		}
		if t.probeIP != nil && tunnelCarries(ps.AllowedIPs, t.probeIP) {
			return ps.PublicKey, true
		}
		only = ps.PublicKey
		n++
	}
	return only, n == 1
}

// tunnelCarries reports whether ip is inside one of the allowed IPs.
func tunnelCarries(nets []net.IPNet, ip net.IP) bool {
	for i := range nets {
		if nets[i].Contains(ip) {
			return true
		}
	}
	return false
}

func tunnelProbeText(p *TunnelProbeResult) string {
	switch {
	case p.Err != nil:
		return "error: " + p.Err.Error()
	case p.OK:
		return "ok"
	}
	return "miss: " + probeClass(p)
}

// apply runs the state machine on one observation and reports what changed:
// incidents opened and closed, rungs that were not verified, giving up.
func (m *TunnelMonitor) apply(t *tunnelRun, p *peerTrack, obs PeerObservation) {
	prev := p.st
	p.st = nextPeer(prev, obs, t.pol)
	now := obs.Now
	open := func(ph PeerPhase) bool { return ph == PeerDown || ph == PeerHealing || ph == PeerDegraded }
	switch {
	case !open(prev.Phase) && p.st.Phase == PeerDown:
		t.log.Warn("peer dark: incident opened", "peer", p.id, "reason", p.st.Reason)
		p.reported = nil
		m.event(Event{Time: now, Kind: "incident", Target: p.id, Result: "opened",
			Summary:  fmt.Sprintf("%s dark: %s", p.id, p.st.Reason),
			Evidence: m.peerEvidence(p, now)})
	case open(prev.Phase) && p.st.Phase == PeerOK:
		healed := "recovered by itself"
		if prev.Phase == PeerHealing && prev.Rung > 0 && prev.Rung <= len(t.cfg.Heal) {
			healed = "healed by " + t.cfg.Heal[prev.Rung-1]
		}
		took := now.Sub(prev.Opened)
		t.log.Info("peer healthy again: incident closed", "peer", p.id, "how", healed, "duration_seconds", took.Seconds())
		m.event(Event{Time: now, Kind: "recovered", Target: p.id, Result: "ok", Duration: took.Seconds(),
			Summary:  fmt.Sprintf("%s healthy again after %s: %s", p.id, took.Round(time.Millisecond), healed),
			Evidence: map[string]any{"was": string(prev.Phase), "how": healed}})
		p.holdKind, p.hold, p.reported, p.alertAt, p.alertEvery = "", "", nil, time.Time{}, 0
	case prev.Phase == PeerHealing && p.st.Phase == PeerDown:
		rung := ""
		if prev.Rung > 0 && prev.Rung <= len(t.cfg.Heal) {
			rung = t.cfg.Heal[prev.Rung-1]
		}
		t.log.Info("rung not verified in time", "peer", p.id, "rung", rung, "verify_timeout_seconds", t.pol.VerifyTimeout.Seconds(), "reason", p.st.Reason)
	case prev.Phase != PeerDegraded && p.st.Phase == PeerDegraded:
		t.log.Error("gave up on peer: alerting only until it is healthy", "peer", p.id, "why", p.st.GaveUp, "reason", p.st.Reason)
		p.holdKind, p.hold = "", ""
		p.alertEvery = ladderAlertBackoff(0, m.cooldown, m.window)
		p.alertAt = now.Add(p.alertEvery)
		m.event(Event{Time: now, Kind: "gave-up", Target: p.id, Result: "degraded",
			Duration: now.Sub(p.st.Opened).Seconds(),
			Summary:  fmt.Sprintf("%s: gave up, alert only until healthy: %s (%s)", p.id, p.st.GaveUp, p.st.Reason),
			Evidence: m.peerEvidence(p, now)})
	}
}

// peerEvidence is what an incident event carries about the peer.
func (m *TunnelMonitor) peerEvidence(p *peerTrack, now time.Time) map[string]any {
	ev := map[string]any{
		"handshake_age_seconds": p.sig.handshakeAge(now).Seconds(),
		"rx_bytes":              p.sig.rx,
		"tx_bytes":              p.sig.tx,
		"keepalive_seconds":     p.sig.keepalive.Seconds(),
		"state":                 string(p.st.Phase),
	}
	if p.probe != "" {
		ev["probe"] = p.probe
	}
	if p.sig.endpoint != nil {
		ev["endpoint"] = p.sig.endpoint.String()
	}
	return ev
}

// enforceKeepalive re-asserts the configured keepalive when a peer drifted
// (Flannel rewrites peers on resync; a re-created interface starts at 0).
// It is configuration, not a repair: no budget. It runs every round while
// it changes something; when it did not (it failed, or a dry run), it waits
// the cooldown, then twice that, and so on up to the window, so that a dry
// run or a broken device does not repeat the same event every 30 s.
func (m *TunnelMonitor) enforceKeepalive(ctx context.Context, t *tunnelRun) {
	start := time.Now()
	if start.Before(t.kaRetryAt) {
		return
	}
	actx, cancel := context.WithTimeout(ctx, tunnelActionTimeout)
	res, err := m.os.Keepalive(actx, t.cfg.Interface, t.selected, t.cfg.PersistentKeepalive.D(), m.dryRun)
	cancel()
	end := time.Now()
	if err == nil && res.Changed {
		t.kaRetryAt, t.kaBackoff = time.Time{}, 0
	} else {
		first := max(m.cooldown, t.interval)
		t.kaBackoff = min(max(2*t.kaBackoff, first), max(m.window, first))
		t.kaRetryAt = end.Add(t.kaBackoff)
	}
	m.actionEvent(t, t.cfg.Interface, "keepalive", "keepalive drifted from "+t.cfg.PersistentKeepalive.String(), start, end, res, err)
}

// runLadder decides and acts for every down peer of the tunnel. A rung that
// changed nothing cannot have fixed anything: the ladder moves past it in
// the same round (bounded by the length of the heal list). A tunnel-wide
// rung runs at most once per round, shared by every peer that needs it.
func (m *TunnelMonitor) runLadder(ctx context.Context, t *tunnelRun) {
	type outcome struct {
		res        netfix.Result
		err        error
		start, end time.Time
	}
	shared := map[string]outcome{}
	for _, p := range t.down {
		for range len(t.cfg.Heal) + 1 {
			now := time.Now()
			var g ladderGuards
			if _, ok := ladderNextRung(t.cfg, p.st.Rung); ok {
				g = m.guards(ctx, p)
			}
			st := ladderDecide(t.cfg, p.st.Rung, p.holdKind, g, t.budget, now)
			if st.GiveUp != "" {
				m.apply(t, p, PeerObservation{Now: now, GaveUp: true, Reason: st.GiveUp})
				break
			}
			if st.HoldKind != "" {
				m.holdLadder(t, p, st, now)
				break
			}
			p.holdKind, p.hold = "", ""
			o, done := shared[st.Rung]
			if !done {
				o.start = now
				o.res, o.err = m.runRung(ctx, t, p, st.Rung)
				o.end = time.Now()
				if ladderDisruptive(st.Rung) && !tunnelNoop(o.res, o.err) {
					t.budget.spend(o.start)
				}
				target := p.id
				if ladderTunnelWide(st.Rung) {
					target = t.cfg.Interface
					shared[st.Rung] = o
				}
				m.actionEvent(t, target, st.Rung, fmt.Sprintf("%s: %s", p.id, p.st.Reason), o.start, o.end, o.res, o.err)
			}
			p.lastAction = fmt.Sprintf("%s: %s at %s", st.Rung, tunnelResultWord(o.res, o.err), o.start.UTC().Format(time.RFC3339))
			if tunnelNoop(o.res, o.err) {
				m.apply(t, p, PeerObservation{Now: o.end, Skipped: st.Rung})
				continue
			}
			m.apply(t, p, PeerObservation{Now: o.end, StartedAt: o.start, Started: st.Rung})
			break
		}
	}
}

// guards observes the uplink (for the peer's endpoint) and the clock, once
// per round each.
func (m *TunnelMonitor) guards(ctx context.Context, p *peerTrack) ladderGuards {
	var g ladderGuards
	ep := ""
	if p.sig.endpoint != nil {
		ep = p.sig.endpoint.String()
	}
	if m.uplinkCache == nil {
		m.uplinkCache, m.uplinkErr = map[string]UplinkStatus{}, map[string]error{}
	}
	us, ok := m.uplinkCache[ep]
	err := m.uplinkErr[ep]
	if !ok {
		us, err = m.os.UplinkUp(ctx, p.sig.endpoint)
		m.uplinkCache[ep], m.uplinkErr[ep] = us, err
	}
	switch {
	case err != nil:
		g.UplinkCause = fmt.Sprintf("uplink status unknown: %v", err)
	case !us.Up:
		g.UplinkCause = us.Detail
	default:
		g.UplinkOK = true
	}
	if m.clockRound != m.roundNo {
		cs, err := m.os.Clock(ctx)
		m.clockRound = m.roundNo
		m.clockOK, m.clockSoft, m.clockCause = clockVerdict(cs, err)
		m.mu.Lock()
		m.clockView, m.clockErr = &cs, err
		m.mu.Unlock()
	}
	g.ClockOK, g.ClockSoft, g.ClockCause = m.clockOK, m.clockSoft, m.clockCause
	return g
}

// holdLadder records why the ladder waits, and reports an uplink outage or a
// bad clock once per incident: they are the diagnosis, not noise.
func (m *TunnelMonitor) holdLadder(t *tunnelRun, p *peerTrack, st ladderStep, now time.Time) {
	p.holdKind, p.hold = st.HoldKind, st.Hold
	if st.HoldKind == holdCooldown || st.HoldKind == holdSettle || p.reported[st.HoldKind] {
		return
	}
	if p.reported == nil {
		p.reported = map[string]bool{}
	}
	p.reported[st.HoldKind] = true
	kind := "uplink-outage"
	if st.HoldKind == holdClock {
		kind = "clock"
	}
	t.log.Warn("not acting on tunnel", "peer", p.id, "why", st.Hold, "next_rung", st.Rung)
	m.event(Event{Time: now, Kind: kind, Target: p.id, Result: "held",
		Summary:  fmt.Sprintf("%s dark, not acting (%s): %s", p.id, st.Rung, st.Hold),
		Evidence: m.peerEvidence(p, now)})
}

// runRung calls the actuator for one rung.
func (m *TunnelMonitor) runRung(ctx context.Context, t *tunnelRun, p *peerTrack, rung string) (netfix.Result, error) {
	timeout := tunnelActionTimeout
	if rung == configs.HealRestartUnit {
		timeout = tunnelUnitTimeout
	}
	actx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	ka := t.cfg.PersistentKeepalive.D()
	switch rung {
	case configs.HealReassert:
		return m.os.Reassert(actx, t.cfg.Interface, t.selected, ka, m.dryRun)
	case configs.HealHandshake:
		if ka <= 0 {
			ka = p.sig.keepalive // keepalive 0 in config: keep the peer's own
		}
		return m.os.Handshake(actx, t.cfg.Interface, p.key, ka, m.dryRun)
	case configs.HealReresolve:
		return m.os.Reresolve(actx, t.cfg.Interface, p.key, t.cfg.EndpointHost, p.sig.endpoint, m.dryRun)
	case configs.HealBounce:
		return m.os.Bounce(actx, t.cfg.Interface, m.dryRun)
	case configs.HealRestartUnit:
		return m.os.RestartUnit(actx, t.cfg.Unit, m.dryRun)
	}
	return netfix.Result{}, fmt.Errorf("unknown heal rung %q", rung)
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
	return errors.Is(err, netfix.ErrNoEndpoint) || errors.Is(err, ErrTunnelResolve)
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
func (m *TunnelMonitor) actionEvent(t *tunnelRun, target, action, why string, start, end time.Time, res netfix.Result, err error) {
	word := tunnelResultWord(res, err)
	ev := Event{Time: start, Kind: "action", Target: target, Action: action, Result: word,
		Duration: end.Sub(start).Seconds(), Evidence: map[string]any{"reason": why}}
	if len(res.Changes) > 0 {
		ev.Evidence["changes"] = res.Changes
	}
	if len(res.Fixed) > 0 {
		ev.Evidence["fixed"] = res.Fixed
	}
	if ladderDisruptive(action) && action != "keepalive" {
		ev.Evidence["budget_left"] = t.budget.left(end)
	}
	switch word {
	case "skipped":
		ev.Evidence["error"] = err.Error()
		ev.Summary = fmt.Sprintf("%s on %s skipped: %v", action, target, err)
		t.log.Info("tunnel action skipped", "action", action, "target", target, "err", err)
	case "failed":
		ev.Evidence["error"] = err.Error()
		ev.Summary = fmt.Sprintf("%s on %s failed: %v", action, target, err)
		t.log.Error("tunnel action failed", "action", action, "target", target, "err", err)
	case "dry-run":
		ev.Summary = fmt.Sprintf("dry run: would %s on %s (%s)", action, target, strings.Join(res.Changes, "; "))
		t.log.Info("dry run: would act", "action", action, "target", target, "changes", res.Changes)
	default:
		ev.Summary = fmt.Sprintf("%s on %s: %s", action, target, word)
		t.log.Info("tunnel action", "action", action, "target", target, "result", word, "changes", res.Changes,
			"duration_seconds", end.Sub(start).Seconds())
	}
	m.event(ev)
}

func (m *TunnelMonitor) event(ev Event) {
	if ev.ID == "" {
		ev.ID = NewEventID()
	}
	m.emit(ev)
}

// publish copies what Checks shows, reusing the buffer.
func (m *TunnelMonitor) publish() {
	now := time.Now()
	m.mu.Lock()
	defer m.mu.Unlock()
	v := m.views[:0]
	for _, t := range m.tunnels {
		if t.readErr != nil && len(t.order) == 0 {
			v = append(v, peerView{id: t.cfg.Interface, readErr: t.readErr})
			continue
		}
		for _, p := range t.order {
			v = append(v, peerView{
				id: p.id, iface: t.cfg.Interface, key: p.key, rx: p.sig.rx, tx: p.sig.tx, phase: p.st.Phase, since: p.st.Since, reason: p.st.Reason, gaveUp: p.st.GaveUp,
				hold: p.hold, lastAction: p.lastAction,
				handshake: p.sig.handshake, handshakeAge: p.sig.handshakeAge(now),
				rxDelta: p.sig.rxDelta, txDelta: p.sig.txDelta, probe: p.probe,
				keepalive: p.sig.keepalive, endpoint: p.sig.endpoint, readErr: t.readErr,
			})
		}
	}
	m.views = v
}

// Checks returns one check (kind "peer") per selected peer of every tunnel
// as of the last round, in device order, plus a "clock" check once the clock
// has been read. A tunnel whose peers cannot be read shows as one unhealthy
// check named after the interface.
func (m *TunnelMonitor) Checks() []Check {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]Check, 0, len(m.views)+1)
	for i := range m.views {
		v := &m.views[i]
		if v.phase == "" && v.readErr != nil {
			out = append(out, Check{Kind: KindPeer, Target: v.id, State: "unknown",
				Detail: "reading peers: " + v.readErr.Error()})
			continue
		}
		phase := v.phase
		if phase == "" {
			phase = PeerOK
		}
		c := Check{Kind: KindPeer, Target: v.id, State: string(phase), Healthy: phase == PeerOK,
			LastAction: v.lastAction, Since: v.since}
		switch {
		case v.gaveUp != "":
			c.Detail = "gave up: " + v.gaveUp + "; " + v.reason
		case v.hold != "":
			c.Detail = v.reason + "; waiting: " + v.hold
		default:
			c.Detail = v.reason
		}
		if v.readErr != nil {
			c.Detail = strings.TrimPrefix(c.Detail+"; reading peers: "+v.readErr.Error(), "; ")
		}
		c.Peer = &PeerInfo{
			Interface: v.iface, PublicKey: v.key.String(), LastHandshake: v.handshake,
			HandshakeAgeSeconds: v.handshakeAge.Seconds(),
			RxBytes:             v.rx, TxBytes: v.tx, RxDeltaBytes: v.rxDelta, TxDeltaBytes: v.txDelta,
			KeepaliveSeconds: v.keepalive.Seconds(), Probe: v.probe,
		}
		if v.endpoint != nil {
			c.Peer.Endpoint = v.endpoint.String()
		}
		out = append(out, c)
	}
	if m.clockView != nil || m.clockErr != nil {
		out = append(out, clockCheck(tunnelClockValue(m.clockView), m.clockErr))
	}
	return out
}

// Check observes every tunnel once (one device read and one probe each)
// and returns a check per selected peer, plus the clock, for `edgeheal
// check`. It changes nothing, emits no events and does not touch the state
// Run owns, so it is safe on a monitor that runs or never ran. One
// observation has no history: no rx/tx deltas, and a single probe miss is
// "suspect", not "down"; a handshake older than stale_after (keepalive on)
// is "down". A never-used peer without a handshake is "ok".
func (m *TunnelMonitor) Check(ctx context.Context) []Check {
	var out []Check
	now := time.Now()
	for _, t := range m.tunnels {
		var probe *TunnelProbeResult
		if t.cfg.Probe.Target != "" {
			p := m.os.Probe(ctx, t.cfg.Probe.Target, t.timeout)
			probe = &p
		}
		peers, err := m.os.ReadPeers(ctx, t.cfg.Interface)
		if err != nil {
			out = append(out, Check{Kind: KindPeer, Target: t.cfg.Interface, State: "unknown",
				Detail: "reading peers: " + err.Error()})
			continue
		}
		probeKey, haveProbeKey := t.probePeer(peers)
		for i := range peers {
			ps := &peers[i]
			if !t.selected(ps.PublicKey) {
				continue
			}
			var g peerSignals
			g.update(ps, now)
			var pr *TunnelProbeResult
			if haveProbeKey && ps.PublicKey == probeKey {
				pr = probe
			}
			obs := peerObserve(PeerState{}, &g, now, t.cfg.StaleAfter.D(), t.cfg.RxSilence.D(), pr, "")
			c := Check{Kind: KindPeer, Target: t.cfg.Interface + "/" + ps.PublicKey.String()[:8], State: string(PeerOK),
				Healthy: true, Detail: obs.Reason}
			switch {
			case obs.Err != nil:
				c.State, c.Healthy, c.Detail = "unknown", false, "probe could not be made: "+obs.Err.Error()
			case obs.Bad && obs.Confirmed:
				c.State, c.Healthy = string(PeerDown), false
			case obs.Bad:
				c.State, c.Healthy = string(PeerSuspect), false
			}
			if want := t.cfg.PersistentKeepalive.D(); want > 0 && ps.Keepalive != want {
				c.Detail = strings.TrimPrefix(c.Detail+fmt.Sprintf("; keepalive %s, configured %s", ps.Keepalive, want), "; ")
			}
			c.Peer = &PeerInfo{
				Interface: t.cfg.Interface, PublicKey: ps.PublicKey.String(), LastHandshake: ps.LastHandshake,
				HandshakeAgeSeconds: g.handshakeAge(now).Seconds(),
				RxBytes:             ps.RxBytes, TxBytes: ps.TxBytes, KeepaliveSeconds: ps.Keepalive.Seconds(),
			}
			if pr != nil {
				c.Peer.Probe = tunnelProbeText(pr)
			}
			if ps.Endpoint != nil {
				c.Peer.Endpoint = ps.Endpoint.String()
			}
			out = append(out, c)
		}
	}
	if len(m.tunnels) > 0 {
		cs, err := m.os.Clock(ctx)
		out = append(out, clockCheck(cs, err))
	}
	return out
}

func tunnelClockValue(c *ClockStatus) ClockStatus {
	if c == nil {
		return ClockStatus{}
	}
	return *c
}
