package agent

import (
	"context"
	"fmt"
	"time"

	"github.com/edgeheal/edgeheal/configs"
)

// CheckTunnels is the one-shot tunnel diagnosis behind `edgeheal check`: it
// reads every configured tunnel's peers once, probes each tunnel's target
// once, reads the clock, and judges without history, so it changes nothing
// and takes about one probe timeout per tunnel. A peer is unhealthy when the
// probe through its tunnel failed (dark), when keepalive is on and it has
// had no handshake within stale_after (stale), or when it never had one.
func CheckTunnels(ctx context.Context, tunnels []configs.Tunnel, obs TunnelObserver, now time.Time) []Check {
	var out []Check
	if len(tunnels) == 0 {
		return nil
	}
	for _, t := range tunnels {
		peers, err := obs.ReadPeers(ctx, t.Interface)
		if err != nil {
			out = append(out, Check{Kind: "peer", Target: t.Interface, State: "unknown", Detail: "could not read peers: " + err.Error()})
			continue
		}
		var probe *TunnelProbeResult
		if t.Probe.Target != "" {
			p := obs.Probe(ctx, t.Probe.Target, t.Probe.Timeout.D())
			probe = &p
		}
		n := 0
		for _, p := range peers {
			if !t.Peers.Selects(p.PublicKey.String()) {
				continue
			}
			n++
			out = append(out, checkPeer(t, p, probe, now))
		}
		if n == 0 {
			out = append(out, Check{Kind: "peer", Target: t.Interface, State: "no-peers", Detail: "no configured peer on this interface"})
		}
	}
	if c, err := obs.Clock(ctx); err == nil {
		ck := Check{Kind: "clock", Target: "system", State: "ok", Healthy: true}
		switch {
		case c.SteppedBack:
			ck.State, ck.Healthy, ck.Detail = "stepped-back", false, "the clock stepped backwards: peers reject our handshakes until it passes their last seen time"
		case !c.Synchronized:
			ck.State, ck.Healthy, ck.Detail = "unsynchronised", false, "the kernel reports the clock unsynchronised: WireGuard peers may drop our handshakes"
		}
		out = append(out, ck)
	}
	return out
}

func checkPeer(t configs.Tunnel, p PeerStats, probe *TunnelProbeResult, now time.Time) Check {
	key := p.PublicKey.String()
	c := Check{Kind: "peer", Target: t.Interface + "/" + key[:8], State: "ok", Healthy: true, Fields: map[string]any{
		"rx_bytes": p.RxBytes, "tx_bytes": p.TxBytes, "keepalive_seconds": p.Keepalive.Seconds(),
	}}
	if p.Endpoint != nil {
		c.Fields["endpoint"] = p.Endpoint.String()
	}
	age := time.Duration(-1)
	if !p.LastHandshake.IsZero() {
		age = now.Sub(p.LastHandshake)
		c.Fields["handshake_age_seconds"] = age.Seconds()
	}
	if probe != nil {
		c.Fields["probe"] = probeClass(probe)
		if probe.Err == nil {
			c.Fields["probe_latency_seconds"] = probe.Latency.Seconds()
		}
	}
	stale := t.StaleAfter.D()
	switch {
	case probe != nil && probe.Err == nil && !probe.OK:
		c.State, c.Healthy, c.Detail = "dark", false, fmt.Sprintf("probe %s through the tunnel: %s", t.Probe.Target, probe.Class)
	case age < 0:
		c.State, c.Healthy, c.Detail = "no-handshake", false, "no handshake since the peer was added"
	case stale > 0 && p.Keepalive > 0 && age > stale:
		c.State, c.Healthy, c.Detail = "stale", false, fmt.Sprintf("last handshake %s ago (stale_after %s)", age.Round(time.Second), t.StaleAfter)
	default:
		c.Detail = fmt.Sprintf("handshake %s ago", age.Round(time.Second))
		if probe != nil && probe.Err != nil {
			c.Detail += "; probe could not be made: " + probe.Err.Error()
		}
	}
	if t.PersistentKeepalive > 0 && p.Keepalive != t.PersistentKeepalive.D() {
		c.Fields["keepalive_wanted_seconds"] = t.PersistentKeepalive.D().Seconds()
		if c.Healthy {
			c.State, c.Healthy = "keepalive-drift", false
			c.Detail += fmt.Sprintf("; keepalive %s, want %s", p.Keepalive, t.PersistentKeepalive)
		}
	}
	return c
}
