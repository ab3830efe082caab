package tunnel

import (
	"context"
	"fmt"
	"time"

	"github.com/edgeheal/edgeheal/agent/core"
	"github.com/edgeheal/edgeheal/configs"
	"github.com/edgeheal/edgeheal/netfix"
)

// Where the rebind rule (rebind.go) meets the monitor: what a forced
// handshake left behind, the early verdict on it, the rung itself, and
// leaving alone a listen port someone else set back.

// forced records a forced handshake (or a rebind, which ends with one)
// that ran for p: from its end, the rebind rule counts what was sent and
// what came back.
func (m *Monitor) forced(p *peerTrack, rung string, o rungOutcome) {
	if rung != configs.HealHandshake && rung != configs.HealRebind {
		return
	}
	if o.err != nil || !o.res.Changed {
		return // nothing was re-added (failed, dry run): no initiation to judge
	}
	p.forcedAt, p.forcedTx, p.forcedRx, p.forcedFresh = o.end, 0, 0, true
	if port, ok := o.evidence["listen_port_after"].(int); ok && rung == configs.HealRebind {
		m.rebound = port
	}
}

// trackForced counts the bytes sent to and received from p since its last
// forced handshake. The re-added peer's counters start at zero, so the
// first reading after it is the count itself.
func (p *peerTrack) trackForced() {
	switch {
	case p.forcedAt.IsZero():
	case p.forcedFresh:
		p.forcedTx, p.forcedRx, p.forcedFresh = p.sig.tx, p.sig.rx, false
	default:
		p.forcedTx += p.sig.txDelta
		p.forcedRx += p.sig.rxDelta
	}
}

// rebindVerdict asks the rebind rule about p, with the guards of this round.
func (m *Monitor) rebindVerdict(p *peerTrack, g ladderGuards, now time.Time) rebindVerdict {
	ep := ""
	if p.sig.endpoint != nil {
		ep = p.sig.endpoint.String()
	}
	return rebindDecide(rebindInput{
		Now: now, UplinkOK: g.UplinkOK, Path: g.Path,
		ForcedAt: p.forcedAt, Handshake: p.sig.handshake,
		TxSince: p.forcedTx, RxSince: p.forcedRx,
		Port: m.listenPort, Endpoint: ep,
	})
}

// handshakeSuspect is the cheap half of the early verdict on a forced
// handshake being verified (handshakeFailed), from what the round read:
// rebind is the next rung, and the counters point at a stuck mapping (the
// handshake's initiations left, nothing came back within rebindPending).
// Only then is the host path worth probing for it.
func (m *Monitor) handshakeSuspect(p *peerTrack, obs peerObservation) bool {
	if p.st.Phase != peerHealing || !obs.Bad || obs.Err != nil || m.rungName(p.st.Rung) != configs.HealHandshake {
		return false
	}
	if i, ok := ladderNextRung(m.spec.cfg, p.st.Rung); !ok || m.spec.cfg.Heal[i] != configs.HealRebind {
		return false
	}
	return !p.forcedAt.IsZero() && obs.Now.Sub(p.forcedAt) >= rebindPending && p.forcedTx > 0 && p.forcedRx == 0 && !p.sig.handshake.After(p.forcedAt)
}

// handshakeFailed is the early verdict on a forced handshake being
// verified: when rebind is the next rung and its rule says run, the
// handshake visibly failed (its initiations left, nothing came back within
// rebindPending), and waiting out verify_timeout would only keep the
// tunnel dark longer. It reads the round's observed guards.
func (m *Monitor) handshakeFailed(p *peerTrack, obs peerObservation) bool {
	return m.handshakeSuspect(p, obs) && m.guards(p).Rebind.Run
}

// rebind is the rung: a port after the current one from rebind_ports, then
// a forced handshake from it. Its evidence names the stuck mapping and the
// new port.
func (m *Monitor) rebind(ctx context.Context, r rungRequest, ka time.Duration) (netfix.Result, map[string]any, error) {
	rng, _ := configs.ParsePortRange(m.spec.cfg.RebindPorts) // validated
	iface := m.spec.cfg.Interface
	ep := ""
	if r.endpoint != nil {
		ep = r.endpoint.String()
	}
	ev := map[string]any{"stuck_mapping": rebindMapping(r.listenPort, ep), "listen_port_before": r.listenPort}
	res, err := netfix.ForceRebind(ctx, m.os.WireGuard, iface, r.key, rebindCandidates(rng, r.listenPort, rebindTries), ka, m.dryRun)
	if res.Changed {
		if d, derr := m.os.WireGuard.Device(iface); derr == nil {
			ev["listen_port_after"] = d.ListenPort
		}
	}
	return res, ev, err
}

// watchPort leaves alone a listen port someone else set back after a
// rebind (Flannel re-asserts its port whenever it adds a peer): it says so
// once, and stops watching. If the tunnel goes dark again the ladder
// rebinds again; nothing here sets the port.
func (m *Monitor) watchPort(port int, now time.Time) {
	if m.rebound == 0 || port == m.rebound || port == 0 {
		return
	}
	summary := fmt.Sprintf("%s: listen port %d, set by rebind, was replaced by %d; left alone (rebind runs again only if the tunnel goes dark)",
		m.spec.cfg.Interface, m.rebound, port)
	m.log.Info("listen port replaced after a rebind: leaving it alone", "set", m.rebound, "now", port)
	m.event(core.Event{Time: now, Kind: "listen-port", Target: m.spec.cfg.Interface, Result: "replaced", Summary: summary,
		Evidence: map[string]any{"set_by_rebind": m.rebound, "listen_port": port}})
	m.rebound = 0
}
