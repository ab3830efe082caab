package tunnel

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"strings"
	"time"

	"golang.zx2c4.com/wireguard/wgctrl/wgtypes"

	"github.com/edgeheal/edgeheal/agent/core"
	"github.com/edgeheal/edgeheal/configs"
	"github.com/edgeheal/edgeheal/probes"
)

// How a tunnel is observed: one reading (the probe through it and its
// peers) and one per-peer observation function, shared by the daemon's
// round and `edgeheal check`.

// Fallbacks for zero configuration values; configs' embedded defaults
// normally set them (probe 1s × 3 misses, verify_timeout 15s).
const (
	tunnelDefaultInterval = time.Second
	tunnelDefaultMisses   = 3
	tunnelDefaultVerify   = 15 * time.Second
)

// tunnelSpec is what one configured tunnel is: its config and what follows
// from it.
type tunnelSpec struct {
	cfg      configs.Tunnel
	pol      peerPolicy
	interval time.Duration // probe interval: the round's period
	timeout  time.Duration // one probe's bound, not above the interval
	probeIP  net.IP        // the probe target's address, to find the peer that carries it
	keys     map[wgtypes.Key]bool
	mtu      mtuSpec // the path-MTU check (pathmtu_run.go)
}

func newTunnelSpec(t configs.Tunnel, policy configs.Policy) tunnelSpec {
	s := tunnelSpec{
		cfg:      t,
		interval: t.Probe.Interval.D(),
		timeout:  t.Probe.Timeout.D(),
		probeIP:  probeTargetIP(t.Probe.Target),
		pol:      peerPolicy{Misses: t.Probe.Misses, VerifyTimeout: policy.VerifyTimeout.D(), Heal: t.Heal},
	}
	if s.interval <= 0 {
		s.interval = tunnelDefaultInterval
	}
	if s.timeout <= 0 || s.timeout > s.interval {
		s.timeout = s.interval
	}
	if s.pol.Misses <= 0 {
		s.pol.Misses = tunnelDefaultMisses
	}
	if s.pol.VerifyTimeout <= 0 {
		s.pol.VerifyTimeout = tunnelDefaultVerify
	}
	probeAddr, _ := netip.AddrFromSlice(s.probeIP)
	s.mtu = newMTUSpec(t, probeAddr.Unmap(), s.timeout)
	if !t.Peers.All {
		s.keys = map[wgtypes.Key]bool{}
		for _, k := range t.Peers.Keys {
			if key, err := wgtypes.ParseKey(k); err == nil {
				s.keys[key] = true
			}
		}
	}
	return s
}

// probeTargetIP returns the address of a probe target ("tcp://ip:port",
// "icmp://ip"), or nil.
func probeTargetIP(target string) net.IP {
	if target == "" {
		return nil
	}
	u, err := url.Parse(target)
	if err != nil {
		return nil
	}
	return net.ParseIP(u.Hostname())
}

// selected reports whether the tunnel's peers selector takes the peer.
func (s *tunnelSpec) selected(k wgtypes.Key) bool { return s.keys == nil || s.keys[k] }

// peerID names a peer in checks and events: "wg0/AbCdEfGh".
func (s *tunnelSpec) peerID(k wgtypes.Key) string { return s.cfg.Interface + "/" + k.String()[:8] }

// tunnelReading is one observation of a tunnel: its peers, and the probe
// through it when one is configured.
type tunnelReading struct {
	peers      []probes.PeerStats
	listenPort int   // the device's listen port
	err        error // the peers could not be read: nothing was observed
	probe      *probes.ProbeResult
}

// read probes the tunnel (bounded by its own timeout: a context that ended
// first would make the probe an error, no observation) and reads its
// peers, one device read.
func (s *tunnelSpec) read(ctx context.Context, os core.OS) tunnelReading {
	var r tunnelReading
	if s.cfg.Probe.Target != "" {
		p := os.Net.Tunnel(ctx, s.cfg.Probe.Target, s.timeout)
		r.probe = &p
	}
	r.peers, r.listenPort, r.err = probes.ReadDevice(os.WireGuard, s.cfg.Interface)
	return r
}

// readWithout reads the peers without probing: the probe is an error
// (why), which observes nothing.
func (s *tunnelSpec) readWithout(os core.OS, why error) tunnelReading {
	var r tunnelReading
	if s.cfg.Probe.Target != "" {
		r.probe = &probes.ProbeResult{Class: "error", Err: why}
	}
	r.peers, r.listenPort, r.err = probes.ReadDevice(os.WireGuard, s.cfg.Interface)
	return r
}

// probePeer finds the peer the tunnel's probe (and a workload's suspicion)
// belongs to: the selected peer whose allowed IPs contain the probe target,
// or, failing that, the only selected peer.
func (s *tunnelSpec) probePeer(peers []probes.PeerStats) (wgtypes.Key, bool) {
	var only wgtypes.Key
	n := 0
	for i := range peers {
		ps := &peers[i]
		if !s.selected(ps.PublicKey) {
			continue
		}
		if s.probeIP != nil && carries(ps.AllowedIPs, s.probeIP) {
			return ps.PublicKey, true
		}
		only = ps.PublicKey
		n++
	}
	return only, n == 1
}

// carries reports whether ip is inside one of the allowed IPs.
func carries(nets []net.IPNet, ip net.IP) bool {
	for i := range nets {
		if nets[i].Contains(ip) {
			return true
		}
	}
	return false
}

// peerInput is what one reading says about one peer.
type peerInput struct {
	probe     *probes.ProbeResult // nil when no probe covers this peer
	suspicion string              // a workload's confirmed report for this peer, "" for none
	nudge     string              // the cause of darkness was just fixed: why, "" for none
}

// inputFor is what r says about peer ps: the probe and the suspicion go to
// the peer that carries the probe target (or to every selected peer when
// no probe target identifies one).
func (s *tunnelSpec) inputFor(r *tunnelReading, ps *probes.PeerStats, probeKey wgtypes.Key, haveProbeKey bool, suspicion, nudge string) peerInput {
	in := peerInput{nudge: nudge}
	mine := haveProbeKey && ps.PublicKey == probeKey
	if r.probe != nil && mine {
		in.probe = r.probe
	}
	if suspicion != "" && (mine || !haveProbeKey) {
		in.suspicion = suspicion
	}
	return in
}

// observePeer turns one reading of a peer into the state machine's
// observation; sig is the peer's detection memory, updated here (the
// daemon keeps it across rounds, `edgeheal check` starts from zero). It is
// the one per-peer observation of the daemon and the check.
//
// A nudge confirms a probe miss on the spot for a peer without a valid
// session: the cause is known, and a tunnel that could not complete a
// handshake through a corrupting uplink comes back only with a fresh one
// (WireGuard alone retries every 5 s). A session that survived (a re-plug)
// keeps the usual streak, since a probe sent while the new link came up
// may just have been lost.
func (s *tunnelSpec) observePeer(st peerState, sig *peerSignals, ps *probes.PeerStats, in peerInput, now time.Time) (peerObservation, bool) {
	rebaselined := sig.update(ps, now)
	obs := peerObserve(st, sig, now, s.cfg.StaleAfter.D(), s.cfg.RxSilence.D(), in.probe, in.suspicion)
	if in.nudge != "" && in.probe != nil && obs.Bad && obs.Err == nil && !sessionValid(ps, now) {
		obs.Confirmed = true
		obs.Reason += " (no session, right after " + in.nudge + ")"
	}
	return obs, rebaselined
}

// wgRejectAfterTime is WireGuard's REJECT_AFTER_TIME (a protocol constant,
// kernel and wireguard-go alike, docs/operations/tunnels.md, "WireGuard facts"): a
// session older than this carries no data.
const wgRejectAfterTime = 180 * time.Second

// sessionValid reports whether the peer has a session WireGuard can still
// use: a handshake within REJECT_AFTER_TIME.
func sessionValid(ps *probes.PeerStats, now time.Time) bool {
	return !ps.LastHandshake.IsZero() && now.Sub(ps.LastHandshake) < wgRejectAfterTime
}

// probeText is how a check shows a probe: "ok", "miss: timeout", "error: ...".
func probeText(p *probes.ProbeResult) string {
	switch {
	case p == nil:
		return ""
	case p.Err != nil:
		return "error: " + p.Err.Error()
	case tunnelProbeOK(*p):
		return "ok"
	}
	return "miss: " + probeClass(p)
}

// keepaliveNote says when a peer's keepalive is not the configured one.
func (s *tunnelSpec) keepaliveNote(ps *probes.PeerStats) string {
	if want := s.cfg.PersistentKeepalive.D(); want > 0 && ps.Keepalive != want {
		return fmt.Sprintf("keepalive %s, configured %s", ps.Keepalive, want)
	}
	return ""
}

// joinDetail joins the non-empty parts of a check's detail with "; ".
func joinDetail(parts ...string) string {
	var out []string
	for _, p := range parts {
		if p != "" {
			out = append(out, p)
		}
	}
	return strings.Join(out, "; ")
}
