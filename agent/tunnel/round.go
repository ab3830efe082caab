package tunnel

import (
	"context"
	"fmt"
	"time"

	"github.com/edgeheal/edgeheal/agent/core"
	"github.com/edgeheal/edgeheal/probes"
)

// One round of a tunnel, in four steps: observe (the reading, then what
// gates the ladder for the peers that are dark), decide (every peer's next
// state, each rung, pure functions of what was observed), act (through
// netfix), report (the events the round's changes are, at its end).

// peerRound is one peer's part of a round: its track and what this
// round's reading says of it.
type peerRound struct {
	p   *peerTrack
	obs peerObservation
}

// update runs one round on a reading.
func (m *Monitor) update(ctx context.Context, r *tunnelReading, suspicion, nudge string, now time.Time) {
	m.round++
	defer m.flushEvents()
	if r.err != nil {
		// No observation: every peer keeps its state.
		if m.readErr == nil {
			m.log.Warn("cannot read tunnel peers", "err", r.err)
		}
		m.readErr = r.err
		m.readMisses++
		return
	}
	if m.readErr != nil {
		m.log.Info("tunnel peers readable again")
		m.readErr = nil
	}
	m.readMisses = 0
	m.listenPort = r.listenPort
	m.watchPort(r.listenPort, now)

	// Observe: what the reading says of each selected peer, then the
	// uplink, the host paths and the clock for the peers the ladder may
	// act on in this round (none in a healthy round).
	peers, drift := m.readPeers(r, suspicion, nudge, now)
	m.observeGuards(ctx, peers)

	// Decide every peer's next state.
	var down, degraded []*peerTrack
	for _, pr := range peers {
		if m.handshakeFailed(pr.p, pr.obs) {
			pr.obs.Unverified = true
		}
		m.apply(pr.p, pr.obs)
		switch pr.p.st.Phase {
		case peerDown:
			down = append(down, pr.p)
		case peerDegraded:
			degraded = append(degraded, pr.p)
		}
	}
	m.forgetRemoved(len(r.peers), now)
	m.setPathTargets(m.order)
	m.flushEvents() // what the round found is reported before a rung can take its time

	// Act: a link a bounce left down first, the keepalive, the ladder.
	m.bringUp(ctx)
	if drift {
		m.enforceKeepalive(ctx)
	} else {
		m.kaRetryAt, m.kaBackoff = time.Time{}, 0
	}
	if len(down) > 0 {
		m.runLadder(ctx, down)
	}
	m.alertDegraded(degraded, now)
	// Not a rung: the path MTU is checked while the tunnel carries traffic.
	m.checkPathMTU(ctx, r, now)
}

// readPeers turns the reading into each selected peer's observation (in
// device order, m.order) and says whether a keepalive drifted. Pure but
// for the peers' detection memory, which it updates.
func (m *Monitor) readPeers(r *tunnelReading, suspicion, nudge string, now time.Time) ([]peerRound, bool) {
	probeKey, haveProbeKey := m.spec.probePeer(r.peers)
	drift := false
	m.order = m.order[:0]
	out := make([]peerRound, 0, len(r.peers))
	for i := range r.peers {
		ps := &r.peers[i]
		p := m.track(ps)
		if !p.selected {
			continue
		}
		m.order = append(m.order, p)
		in := m.spec.inputFor(r, ps, probeKey, haveProbeKey, suspicion, nudge)
		p.probe = probeText(in.probe)
		obs, rebaselined := m.spec.observePeer(p.st, &p.sig, ps, in, now)
		p.trackForced()
		if rebaselined && p.st.Phase != "" && p.st.Phase != peerOK {
			m.log.Debug("peer re-added: counters re-baselined", "peer", p.id)
		}
		drift = drift || m.spec.keepaliveNote(ps) != ""
		out = append(out, peerRound{p: p, obs: obs})
	}
	return out, drift
}

// track returns the monitor's state for a peer, new if it is new.
func (m *Monitor) track(ps *probes.PeerStats) *peerTrack {
	p := m.peers[ps.PublicKey]
	if p == nil {
		p = &peerTrack{key: ps.PublicKey, selected: m.spec.selected(ps.PublicKey), id: m.spec.peerID(ps.PublicKey)}
		if st, ok := m.seeds[ps.PublicKey.String()]; ok && p.selected {
			// An incident open before a reload or a restart: it goes on
			// where its ladder stood, without a second "opened".
			p.st = st
			delete(m.seeds, ps.PublicKey.String())
		}
		m.peers[ps.PublicKey] = p
	}
	p.round = m.round
	return p
}

// forgetRemoved drops the peers this round did not see, closing their
// incidents.
func (m *Monitor) forgetRemoved(seen int, now time.Time) {
	if len(m.peers) <= seen {
		return
	}
	for k, p := range m.peers {
		if p.round == m.round {
			continue
		}
		delete(m.peers, k)
		m.book.dropPeer(k.String(), now)
		if p.selected && !p.st.Opened.IsZero() {
			m.event(core.Event{Time: now, Kind: "recovered", Target: p.id, Result: "peer-removed",
				Duration: now.Sub(p.st.began()).Seconds(),
				Summary:  fmt.Sprintf("%s removed from %s while %s: incident closed", p.id, m.spec.cfg.Interface, p.st.Phase)})
		}
	}
}

// alertDegraded repeats the alert for peers the ladder gave up on, backing
// off (ladderAlertBackoff).
func (m *Monitor) alertDegraded(degraded []*peerTrack, now time.Time) {
	for _, p := range degraded {
		if now.Before(p.alertAt) {
			continue
		}
		p.alertEvery = ladderAlertBackoff(p.alertEvery, m.cooldown, m.window)
		p.alertAt = now.Add(p.alertEvery)
		m.event(core.Event{Time: now, Kind: "degraded", Target: p.id, Result: "alert",
			Duration: now.Sub(p.st.began()).Seconds(),
			Summary: fmt.Sprintf("%s still dark since %s (%s); gave up: %s", p.id, p.st.began().UTC().Format(time.RFC3339),
				p.st.Reason, p.st.GaveUp),
			Evidence: map[string]any{"next_alert_seconds": p.alertEvery.Seconds()}})
	}
}

func peerOpen(ph peerPhase) bool { return ph == peerDown || ph == peerHealing || ph == peerDegraded }

// apply runs the state machine on one observation and reports what changed:
// incidents opened and closed, rungs that were not verified, giving up.
func (m *Monitor) apply(p *peerTrack, obs peerObservation) {
	prev := p.st
	p.st = nextPeer(prev, obs, m.spec.pol)
	now := obs.Now
	if m.adopted == nil || p.key.String() != m.adoptPeer {
		// (The peer of an action this monitor waits for is recorded by
		// that action when it returns: what this monitor saw before the
		// end must not overwrite it, adoptEnded reads it.)
		m.book.setPeer(p.key.String(), m.spec.cfg.Heal, p.st, now)
	}
	switch {
	case !peerOpen(prev.Phase) && p.st.Phase == peerDown:
		m.log.Warn("peer dark: incident opened", "peer", p.id, "reason", p.st.Reason)
		p.reported = nil
		m.event(core.Event{Time: now, Kind: "incident", Target: p.id, Result: "opened",
			Summary:  fmt.Sprintf("%s dark: %s", p.id, p.st.Reason),
			Evidence: p.evidence(now)})
	case peerOpen(prev.Phase) && p.st.Phase == peerOK:
		m.closed(p, prev, now)
	case prev.Phase == peerHealing && p.st.Phase == peerDown && obs.Unverified:
		m.log.Info("forced handshake failed: initiations left, nothing came back", "peer", p.id,
			"tx_bytes", p.forcedTx, "after_seconds", now.Sub(p.forcedAt).Seconds())
	case prev.Phase == peerHealing && p.st.Phase == peerDown:
		m.log.Info("rung not verified in time", "peer", p.id, "rung", m.rungName(prev.Rung),
			"verify_timeout_seconds", m.spec.pol.VerifyTimeout.Seconds(), "reason", p.st.Reason)
	case prev.Phase != peerDegraded && p.st.Phase == peerDegraded:
		m.log.Error("gave up on peer: alerting only until it is healthy", "peer", p.id, "why", p.st.GaveUp, "reason", p.st.Reason)
		p.holdKind, p.hold = "", ""
		p.alertEvery = ladderAlertBackoff(0, m.cooldown, m.window)
		p.alertAt = now.Add(p.alertEvery)
		m.event(core.Event{Time: now, Kind: "gave-up", Target: p.id, Result: "degraded",
			Duration: now.Sub(p.st.began()).Seconds(),
			Summary:  fmt.Sprintf("%s: gave up, alert only until healthy: %s (%s)", p.id, p.st.GaveUp, p.st.Reason),
			Evidence: p.evidence(now)})
	}
}

// closed reports an incident that ended, and how.
func (m *Monitor) closed(p *peerTrack, prev peerState, now time.Time) {
	healed := "recovered by itself"
	if prev.Phase == peerHealing && m.rungName(prev.Rung) != "" {
		healed = "healed by " + m.rungName(prev.Rung)
	}
	took := now.Sub(prev.began())
	m.log.Info("peer healthy again: incident closed", "peer", p.id, "how", healed, "duration_seconds", took.Seconds())
	m.event(core.Event{Time: now, Kind: "recovered", Target: p.id, Result: "ok", Duration: took.Seconds(),
		Summary:  fmt.Sprintf("%s healthy again after %s: %s", p.id, took.Round(time.Millisecond), healed),
		Evidence: map[string]any{"was": string(prev.Phase), "how": healed}})
	p.holdKind, p.hold, p.reported, p.alertAt, p.alertEvery = "", "", nil, time.Time{}, 0
	p.forcedAt, p.forcedTx, p.forcedRx, p.forcedFresh = time.Time{}, 0, 0, false
}

// rungName is the rung a PeerState.Rung (the next rung to try) follows.
func (m *Monitor) rungName(next int) string {
	if next > 0 && next <= len(m.spec.cfg.Heal) {
		return m.spec.cfg.Heal[next-1]
	}
	return ""
}

// evidence is what an incident event carries about the peer.
func (p *peerTrack) evidence(now time.Time) map[string]any {
	ev := map[string]any{
		"handshake_age_seconds": p.sig.handshakeAge(now).Seconds(),
		"rx_bytes":              p.sig.rx,
		"tx_bytes":              p.sig.tx,
		"keepalive_seconds":     p.sig.keepalive.Seconds(),
		"state":                 string(p.st.Phase),
	}
	if b := p.st.began(); !b.IsZero() {
		ev["began"] = b.UTC().Format(time.RFC3339Nano) // the incident's start: its last good observation
	}
	if p.probe != "" {
		ev["probe"] = p.probe
	}
	if p.sig.endpoint != nil {
		ev["endpoint"] = p.sig.endpoint.String()
	}
	return ev
}

// event queues ev for the end of the round (flushEvents). Called from
// Run's goroutine only.
func (m *Monitor) event(ev core.Event) {
	if ev.ID == "" {
		ev.ID = core.NewEventID()
	}
	m.pending = append(m.pending, ev)
}

// flushEvents reports the round's events, in the order they happened.
func (m *Monitor) flushEvents() {
	for i, ev := range m.pending {
		m.emit(ev)
		m.pending[i] = core.Event{}
	}
	m.pending = m.pending[:0]
}
