package tunnel

import (
	"context"
	"net"
	"time"

	"golang.zx2c4.com/wireguard/wgctrl/wgtypes"

	"github.com/edgeheal/edgeheal/probes"
	"github.com/edgeheal/edgeheal/wire"
)

// What a tunnel shows: the peers' checks as of the last round, and the
// one-shot check of `edgeheal check`.

// peerView is what Checks shows of a peer, copied at the end of every round.
type peerView struct {
	id           string
	key          wgtypes.Key
	phase        peerPhase
	since        time.Time
	reason       string
	gaveUp       string
	hold         string
	lastAction   string
	handshake    time.Time
	handshakeAge time.Duration
	rx, tx       int64
	rxDelta      int64
	txDelta      int64
	probe        string
	keepalive    time.Duration
	endpoint     *net.UDPAddr
}

// publish copies what Checks shows, reusing the buffer, and marks the
// round's progress.
func (m *Monitor) publish(now time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	v := m.views[:0]
	for _, p := range m.order {
		v = append(v, peerView{
			id: p.id, key: p.key, phase: p.st.Phase, since: p.st.Since, reason: p.st.Reason, gaveUp: p.st.GaveUp,
			hold: p.hold, lastAction: p.lastAction,
			handshake: p.sig.handshake, handshakeAge: p.sig.handshakeAge(now),
			rx: p.sig.rx, tx: p.sig.tx, rxDelta: p.sig.rxDelta, txDelta: p.sig.txDelta, probe: p.probe,
			keepalive: p.sig.keepalive, endpoint: p.sig.endpoint,
		})
	}
	m.views, m.viewErr, m.progress = v, m.readErr, now
	m.blind = m.readMisses >= m.spec.pol.Misses
	m.publishMTU()
}

// Checks returns one check (kind "peer") per selected peer as of the last
// round, in device order. A tunnel whose peers cannot be read and were
// never read shows as one unhealthy check named after the interface.
func (m *Monitor) Checks() []wire.Check {
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.views) == 0 && m.viewErr != nil {
		return []wire.Check{m.unreadable(m.viewErr)}
	}
	out := make([]wire.Check, 0, len(m.views)+1)
	for i := range m.views {
		v := &m.views[i]
		phase := v.phase
		if phase == "" {
			phase = peerOK
		}
		c := wire.Check{Kind: wire.KindPeer, Target: v.id, State: string(phase), Healthy: phase == peerOK,
			LastAction: v.lastAction, Since: v.since}
		switch {
		case v.gaveUp != "":
			c.Detail = "gave up: " + v.gaveUp + "; " + v.reason
		case v.hold != "":
			c.Detail = v.reason + "; waiting: " + v.hold
		default:
			c.Detail = v.reason
		}
		if m.viewErr != nil {
			c.Detail = joinDetail(c.Detail, "reading peers: "+m.viewErr.Error())
		}
		if m.blind {
			// What it was is not what it is: a device that gives no
			// answer hides the tunnel. No repair runs on it (an
			// observation that could not be made never triggers one).
			c.State, c.Healthy = "unknown", false
		}
		c.Peer = &wire.PeerInfo{
			Interface: m.spec.cfg.Interface, PublicKey: v.key.String(), LastHandshake: v.handshake,
			HandshakeAgeSeconds: v.handshakeAge.Seconds(),
			RxBytes:             v.rx, TxBytes: v.tx, RxDeltaBytes: v.rxDelta, TxDeltaBytes: v.txDelta,
			KeepaliveSeconds: v.keepalive.Seconds(), Probe: v.probe,
		}
		if v.endpoint != nil {
			c.Peer.Endpoint = v.endpoint.String()
		}
		out = append(out, c)
	}
	if c, ok := m.mtuView.check(m.spec.cfg.Interface); ok {
		out = append(out, c)
	}
	return out
}

func (m *Monitor) unreadable(err error) wire.Check {
	return wire.Check{Kind: wire.KindPeer, Target: m.spec.cfg.Interface, State: "unknown", Detail: "reading peers: " + err.Error()}
}

// Check observes the tunnel once (one device read and one probe) and
// returns a check per selected peer, for `edgeheal check`. It runs the
// same reading and the same per-peer observation as a round, from a fresh
// detection memory; it changes nothing, emits no events and does not touch
// the state Run owns. One observation has no history: no rx/tx deltas, and
// a single probe miss is "suspect", not "down"; a handshake older than
// stale_after (keepalive on) is "down". A never-used peer without a
// handshake is "ok".
func (m *Monitor) Check(ctx context.Context) []wire.Check {
	r := m.spec.read(ctx, m.os)
	if r.err != nil {
		return []wire.Check{m.unreadable(r.err)}
	}
	now := m.os.Clock.Now()
	probeKey, haveProbeKey := m.spec.probePeer(r.peers)
	var out []wire.Check
	var phases []peerPhase
	for i := range r.peers {
		ps := &r.peers[i]
		if !m.spec.selected(ps.PublicKey) {
			continue
		}
		var sig peerSignals
		in := m.spec.inputFor(&r, ps, probeKey, haveProbeKey, "", "")
		obs, _ := m.spec.observePeer(peerState{}, &sig, ps, in, now)
		c := m.spec.oneShotCheck(ps, &sig, in.probe, obs, now)
		phases = append(phases, peerPhase(c.State))
		out = append(out, c)
	}
	if c, ok := m.checkMTUOnce(ctx, &r, mtuDark(phases, probeText(r.probe), true), now); ok {
		out = append(out, c)
	}
	return out
}

// oneShotCheck is the check of one observation of a peer.
func (s *tunnelSpec) oneShotCheck(ps *probes.PeerStats, sig *peerSignals, probe *probes.ProbeResult, obs peerObservation, now time.Time) wire.Check {
	c := wire.Check{Kind: wire.KindPeer, Target: s.peerID(ps.PublicKey), State: string(peerOK), Healthy: true, Detail: obs.Reason}
	switch {
	case obs.Err != nil:
		c.State, c.Healthy, c.Detail = "unknown", false, "probe could not be made: "+obs.Err.Error()
	case obs.Bad && obs.Confirmed:
		c.State, c.Healthy = string(peerDown), false
	case obs.Bad:
		c.State, c.Healthy = string(peerSuspect), false
	}
	c.Detail = joinDetail(c.Detail, s.keepaliveNote(ps))
	c.Peer = &wire.PeerInfo{
		Interface: s.cfg.Interface, PublicKey: ps.PublicKey.String(), LastHandshake: ps.LastHandshake,
		HandshakeAgeSeconds: sig.handshakeAge(now).Seconds(),
		RxBytes:             ps.RxBytes, TxBytes: ps.TxBytes, KeepaliveSeconds: ps.Keepalive.Seconds(),
		Probe: probeText(probe),
	}
	if ps.Endpoint != nil {
		c.Peer.Endpoint = ps.Endpoint.String()
	}
	return c
}
