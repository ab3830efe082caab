package tunnel

import (
	"fmt"
	"net"
	"time"

	"github.com/edgeheal/edgeheal/probes"
)

// Detection for tunnel peers: three signals, each with what it can and
// cannot tell (docs/operations/tunnels.md, "Tunnel health"):
//
//   - the active probe through the tunnel: fast (one interval) and
//     unambiguous, confirmed by probe.misses in a row;
//   - handshake age over stale_after: slow, and meaningful only while the
//     peer has a persistent keepalive (otherwise an idle tunnel has no
//     session and that is fine);
//   - rx flat for rx_silence while tx rises: a supporting signal; the peer's
//     own handshake initiations keep rx growing on many dark tunnels.
//
// The slow signals carry their own duration, so they are confirmed at once.

// peerSignals is the detection memory of one peer: the values of the last
// round and the baselines the slow signals are measured from. A peer that
// is removed and added back (a forced handshake, Flannel's resync, an
// interface re-created) starts again from zero counters and no handshake:
// that is a new baseline, not an alarm.
type peerSignals struct {
	seen bool
	// staleFrom is when handshake age starts counting if the peer has no
	// handshake of its own: the baseline of a peer (re-)added without one,
	// or the moment its keepalive was turned on (before that an old
	// handshake only meant an idle tunnel).
	staleFrom  time.Time
	rx, tx     int64 // as read in the last round
	rxDelta    int64 // since the previous round
	txDelta    int64
	rxMovedAt  time.Time // the last round rx grew, or the baseline
	txAtRxMove int64     // tx at that moment
	handshake  time.Time // LastHandshake as read in the last round
	keepalive  time.Duration
	endpoint   *net.UDPAddr
}

// update takes one round's reading of the peer and reports whether the peer
// was re-baselined (first seen, or re-added: a counter went backwards or the
// handshake time did).
func (g *peerSignals) update(ps *probes.PeerStats, now time.Time) bool {
	if !g.seen || ps.RxBytes < g.rx || ps.TxBytes < g.tx || ps.LastHandshake.Before(g.handshake) {
		*g = peerSignals{
			seen: true,
			rx:   ps.RxBytes, tx: ps.TxBytes,
			rxMovedAt: now, txAtRxMove: ps.TxBytes,
			handshake: ps.LastHandshake,
			keepalive: ps.Keepalive, endpoint: ps.Endpoint,
		}
		if ps.LastHandshake.IsZero() {
			g.staleFrom = now
		}
		return true
	}
	if g.keepalive == 0 && ps.Keepalive > 0 {
		g.staleFrom = now
	}
	g.keepalive, g.endpoint = ps.Keepalive, ps.Endpoint
	g.rxDelta, g.txDelta = ps.RxBytes-g.rx, ps.TxBytes-g.tx
	if g.rxDelta > 0 {
		g.rxMovedAt, g.txAtRxMove = now, ps.TxBytes
	}
	g.rx, g.tx, g.handshake = ps.RxBytes, ps.TxBytes, ps.LastHandshake
	return false
}

// handshakeAge is the age of the peer's session as far as this agent can
// tell: since the last handshake, or since staleFrom if that is later (a
// re-added peer has no handshake yet and gets the full stale_after before
// it counts as stale). A peer first seen with a handshake is measured from
// it: an agent restart must not hide a dead session.
func (g *peerSignals) handshakeAge(now time.Time) time.Duration {
	ref := g.handshake
	if ref.Before(g.staleFrom) {
		ref = g.staleFrom
	}
	return now.Sub(ref)
}

// slowBad evaluates the two slow signals. Zero thresholds turn a signal off.
func (g *peerSignals) slowBad(now time.Time, staleAfter, rxSilence time.Duration) (bool, string) {
	if staleAfter > 0 && g.keepalive > 0 {
		if age := g.handshakeAge(now); age > staleAfter {
			return true, fmt.Sprintf("handshake age %s over stale_after %s", age.Round(time.Second), staleAfter)
		}
	}
	if rxSilence > 0 && g.tx > g.txAtRxMove {
		if flat := now.Sub(g.rxMovedAt); flat >= rxSilence {
			return true, fmt.Sprintf("rx flat for %s while tx rose %d bytes", flat.Round(time.Second), g.tx-g.txAtRxMove)
		}
	}
	return false, ""
}

// peerObserve turns one round's signals into the state machine's
// observation. probe is nil when no probe covers this peer; suspicion is a
// workload's confirmed report that the tunnel is dark ("" for none).
//
// The probe through the tunnel, the primary signal, comes first: a probe
// that answers is healthy whatever else says (a workload's failure then is
// its own path's, and never drives the ladder). A workload suspicion comes
// next (it was confirmed by its own streak); then an errored probe is no
// observation at all and a miss is bad. Without a probe, a peer being
// verified after a rung is healthy only once it has completed a handshake
// after the rung; otherwise the slow signals decide.
func peerObserve(s peerState, g *peerSignals, now time.Time, staleAfter, rxSilence time.Duration, probe *probes.ProbeResult, suspicion string) peerObservation {
	obs := peerObservation{Now: now}
	switch {
	case probe != nil && probe.Err == nil && tunnelProbeOK(*probe):
		// healthy
	case suspicion != "":
		obs.Bad, obs.Confirmed, obs.Reason = true, true, "workload: "+suspicion
	case probe != nil && probe.Err != nil:
		obs.Err = probe.Err
	case probe != nil && !tunnelProbeOK(*probe):
		obs.Bad, obs.Reason = true, "probe missed: "+probeClass(probe)
	case probe != nil:
		// healthy
	case s.Phase == peerHealing && !g.handshake.After(s.ActedAt):
		obs.Bad, obs.Reason = true, "no handshake since the last rung"
	default:
		obs.Bad, obs.Reason = g.slowBad(now, staleAfter, rxSilence)
		obs.Confirmed = obs.Bad
	}
	return obs
}

func probeClass(p *probes.ProbeResult) string {
	if p.Class == "" {
		return "failed"
	}
	return p.Class
}
