package agent

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"sync"
	"time"

	"golang.zx2c4.com/wireguard/wgctrl/wgtypes"

	"github.com/edgeheal/edgeheal/netfix"
	"github.com/edgeheal/edgeheal/probes"
)

// TunnelSystem is the TunnelOS made of package probes and package netfix:
// the adapter between the tunnel policy and the real system. It decides
// nothing; every field is a handle the daemon (or a lab test) opens in the
// namespace it means. A nil optional field turns that part off, as its
// comment says.
type TunnelSystem struct {
	// WG reads and configures WireGuard devices (*wgctrl.Client).
	WG netfix.WireGuard
	// Links bounces links (*netlink.Handle). Nil: the bounce rung fails.
	Links netfix.Links
	// Systemd restarts units (*dbus.Conn). Nil: the restart-unit rung fails.
	Systemd netfix.Systemd
	// Uplinks tells whether a default route exists and its link is up
	// (*probes.Netlink). Nil: not checked.
	Uplinks probes.LinkLister
	// ClockProbe reads the kernel's clock status. Nil: a zero probes.Clock,
	// kept for the next read (a step back is seen between two reads).
	ClockProbe *probes.Clock
	// Offload is the offload guard whose Enforce is the first half of the
	// reassert rung (*OffloadGuard; it carries its own dry_run, the same
	// config value). Nil: reassert only re-applies the keepalive.
	Offload interface {
		Enforce(ctx context.Context) ([]netfix.Result, error)
	}
	// HostPath checks the host's own path to a peer's endpoint, outside the
	// tunnel. Nil: not checked (the uplink counts as up with a default route
	// on an up link). ICMPHostPath is one; it needs the endpoint to answer
	// ICMP echo, which not every gateway does, hence opt-in.
	HostPath func(ctx context.Context, ep *net.UDPAddr) (ok bool, detail string, err error)
	// Lookup resolves endpoint_host's name. Nil: net.DefaultResolver.
	Lookup func(ctx context.Context, name string) ([]netip.Addr, error)
}

// ErrTunnelResolve marks a reresolve that could not resolve endpoint_host:
// no address was observed, so the rung is skipped (no budget, no wait)
// rather than counted as a failed repair.
var ErrTunnelResolve = errors.New("endpoint_host did not resolve")

var _ TunnelOS = (*TunnelSystem)(nil)

// ReadPeers implements TunnelObserver with probes.ReadPeers.
func (s *TunnelSystem) ReadPeers(_ context.Context, iface string) ([]PeerStats, error) {
	ps, err := probes.ReadPeers(s.WG, iface)
	if err != nil {
		return nil, err
	}
	out := make([]PeerStats, len(ps))
	for i := range ps {
		p := &ps[i]
		out[i] = PeerStats{
			PublicKey: p.PublicKey, Endpoint: p.Endpoint, LastHandshake: p.LastHandshake,
			RxBytes: p.RxBytes, TxBytes: p.TxBytes, Keepalive: p.Keepalive, AllowedIPs: p.AllowedIPs,
		}
	}
	return out, nil
}

// Probe implements TunnelObserver with probes.ProbeTunnel. A far end that
// answered with a refusal (TCP RST) proves the tunnel carries packets both
// ways: for tunnel health that is a success, whatever listens behind it.
func (s *TunnelSystem) Probe(ctx context.Context, target string, timeout time.Duration) TunnelProbeResult {
	r := probes.ProbeTunnel(ctx, target, timeout)
	return TunnelProbeResult{OK: r.OK || (r.Err == nil && r.Answered), Err: r.Err, Class: r.Class, Latency: r.Latency}
}

// Clock implements TunnelObserver with probes.Clock.
func (s *TunnelSystem) Clock(context.Context) (ClockStatus, error) {
	c := s.ClockProbe
	if c == nil {
		c = &probes.Clock{}
		s.ClockProbe = c
	}
	cs, err := c.Check()
	return ClockStatus{Synchronized: cs.Synchronized, SteppedBack: cs.SteppedBack, Offset: cs.Offset, Detail: cs.Detail}, err
}

// UplinkUp implements TunnelObserver: a default route whose link is up, and
// the host path to the endpoint when HostPath is set.
func (s *TunnelSystem) UplinkUp(ctx context.Context, ep *net.UDPAddr) (UplinkStatus, error) {
	if s.Uplinks != nil {
		idx, err := s.Uplinks.DefaultRouteLinks()
		if err != nil {
			return UplinkStatus{}, fmt.Errorf("reading default routes: %w", err)
		}
		if len(idx) == 0 {
			return UplinkStatus{Detail: "no default route"}, nil
		}
		links, err := s.Uplinks.Links()
		if err != nil {
			return UplinkStatus{}, fmt.Errorf("listing links: %w", err)
		}
		up := false
		var names []string
		for _, l := range links {
			if slices.Contains(idx, l.Index) {
				names = append(names, l.Name)
				up = up || l.Up
			}
		}
		if !up {
			return UplinkStatus{Detail: fmt.Sprintf("default route link %v is down", names)}, nil
		}
	}
	if s.HostPath != nil && ep != nil {
		ok, detail, err := s.HostPath(ctx, ep)
		if err != nil {
			return UplinkStatus{}, fmt.Errorf("checking the host path to %s: %w", ep, err)
		}
		if !ok {
			return UplinkStatus{Detail: fmt.Sprintf("host path to %s: %s", ep, detail)}, nil
		}
	}
	return UplinkStatus{Up: true}, nil
}

// ICMPHostPath is a TunnelSystem.HostPath that sends one ICMP echo to the
// endpoint's address from the calling thread's namespace (the host's),
// waiting at most timeout. Any answer counts as a working path.
func ICMPHostPath(timeout time.Duration) func(ctx context.Context, ep *net.UDPAddr) (bool, string, error) {
	return func(ctx context.Context, ep *net.UDPAddr) (bool, string, error) {
		a, ok := netip.AddrFromSlice(ep.IP)
		if !ok {
			return false, "", fmt.Errorf("endpoint %v has no IP address", ep)
		}
		r := probes.ProbeTunnel(ctx, "icmp://"+a.Unmap().String(), timeout)
		if r.Err != nil {
			return false, "", r.Err
		}
		return r.OK || r.Answered, r.Class, nil
	}
}

// LearnedHostPath wraps a host path check (ICMPHostPath) so that it only
// ever holds repairs on evidence: an endpoint that has answered before and
// is silent now means the host's own path is down (a modem blackhole, a cell
// outage), and the ladder waits. An endpoint that has never answered may
// simply not answer ICMP (many gateways drop it), and a check that could not
// be made (no ping socket permission, no CAP_NET_RAW) observed nothing: both
// count as a working path, with the reason in the detail, rather than
// holding every repair forever. Safe for concurrent use.
func LearnedHostPath(check func(ctx context.Context, ep *net.UDPAddr) (bool, string, error)) func(ctx context.Context, ep *net.UDPAddr) (bool, string, error) {
	var mu sync.Mutex
	answered := map[string]bool{}
	return func(ctx context.Context, ep *net.UDPAddr) (bool, string, error) {
		ok, detail, err := check(ctx, ep)
		key := ep.IP.String()
		mu.Lock()
		defer mu.Unlock()
		switch {
		case err != nil:
			return true, "host path not checked: " + err.Error(), nil
		case ok:
			answered[key] = true
			return true, detail, nil
		case !answered[key]:
			return true, "host path not checked: the endpoint has never answered ICMP", nil
		}
		return false, detail, nil
	}
}

// Keepalive implements TunnelActuator with netfix.EnsureKeepalive.
func (s *TunnelSystem) Keepalive(ctx context.Context, iface string, selected func(wgtypes.Key) bool, keepalive time.Duration, dryRun bool) (netfix.Result, error) {
	return netfix.EnsureKeepalive(ctx, s.WG, iface, selected, keepalive, dryRun)
}

// Reassert implements TunnelActuator: the offload guard's Enforce, then
// netfix.EnsureKeepalive (skipped for keepalive 0). One Result, Action
// "reassert", with every change of both.
func (s *TunnelSystem) Reassert(ctx context.Context, iface string, selected func(wgtypes.Key) bool, keepalive time.Duration, dryRun bool) (netfix.Result, error) {
	out := netfix.Result{Action: "reassert", Target: iface}
	var errs []error
	add := func(r netfix.Result) {
		out.Changed = out.Changed || r.Changed
		out.DryRun = out.DryRun || r.DryRun
		out.Changes = append(out.Changes, r.Changes...)
		out.Fixed = append(out.Fixed, r.Fixed...)
	}
	if s.Offload != nil {
		rs, err := s.Offload.Enforce(ctx)
		for _, r := range rs {
			add(r)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("re-asserting offload: %w", err))
		}
	}
	if keepalive > 0 {
		r, err := netfix.EnsureKeepalive(ctx, s.WG, iface, selected, keepalive, dryRun)
		add(r)
		if err != nil {
			errs = append(errs, err)
		}
	}
	return out, errors.Join(errs...)
}

// Handshake implements TunnelActuator with netfix.ForceHandshake.
func (s *TunnelSystem) Handshake(ctx context.Context, iface string, peer wgtypes.Key, keepalive time.Duration, dryRun bool) (netfix.Result, error) {
	return netfix.ForceHandshake(ctx, s.WG, iface, peer, keepalive, dryRun)
}

// Reresolve implements TunnelActuator: it resolves host and, unless the
// peer's current address is among the answers (round-robin DNS must not
// make it flap), sets the first answer of the current address's family with
// netfix.EnsureEndpoint. host is "name" or "name:port"; without a port the
// current endpoint's port is kept. A lookup that fails matches
// ErrTunnelResolve.
func (s *TunnelSystem) Reresolve(ctx context.Context, iface string, peer wgtypes.Key, host string, current *net.UDPAddr, dryRun bool) (netfix.Result, error) {
	r := netfix.Result{Action: "endpoint", Target: netfix.PeerTarget(iface, peer)}
	name, port, err := tunnelSplitHost(host, current)
	if err != nil {
		return r, err
	}
	lookup := s.Lookup
	if lookup == nil {
		lookup = func(ctx context.Context, name string) ([]netip.Addr, error) {
			return net.DefaultResolver.LookupNetIP(ctx, "ip", name)
		}
	}
	addrs, err := lookup(ctx, name)
	if err == nil && len(addrs) == 0 {
		err = errors.New("no addresses")
	}
	if err != nil {
		return r, fmt.Errorf("re-resolving %s: %w: %w", host, ErrTunnelResolve, err)
	}
	ep, changed := tunnelPickEndpoint(addrs, port, current)
	if !changed {
		return r, nil // the peer already uses one of the answers
	}
	return netfix.EnsureEndpoint(ctx, s.WG, iface, peer, ep, dryRun)
}

// tunnelSplitHost splits endpoint_host into a name and a port, taking the
// port of the current endpoint when the host has none.
func tunnelSplitHost(host string, current *net.UDPAddr) (string, int, error) {
	name, port := host, 0
	if h, p, err := net.SplitHostPort(host); err == nil {
		n, err := strconv.Atoi(p)
		if err != nil || n <= 0 || n > 65535 {
			return "", 0, fmt.Errorf("re-resolving %s: bad port %q", host, p)
		}
		name, port = h, n
	}
	if port == 0 && current != nil {
		port = current.Port
	}
	if port == 0 {
		return "", 0, fmt.Errorf("re-resolving %s: no port in endpoint_host and the peer has no endpoint", host)
	}
	return name, port, nil
}

// tunnelPickEndpoint chooses the endpoint among resolved addresses: the
// current one if it is among them with the same port (changed false), else
// the first address of the current one's family, else the first.
func tunnelPickEndpoint(addrs []netip.Addr, port int, current *net.UDPAddr) (*net.UDPAddr, bool) {
	pick := addrs[0].Unmap()
	if current != nil {
		cur, _ := netip.AddrFromSlice(current.IP)
		cur = cur.Unmap()
		for _, a := range addrs {
			if a.Unmap() == cur && port == current.Port {
				return current, false
			}
		}
		for _, a := range addrs {
			if a.Unmap().Is4() == cur.Is4() {
				pick = a.Unmap()
				break
			}
		}
	}
	return net.UDPAddrFromAddrPort(netip.AddrPortFrom(pick, uint16(port))), true
}

// Bounce implements TunnelActuator with netfix.ForceBounce.
func (s *TunnelSystem) Bounce(ctx context.Context, iface string, dryRun bool) (netfix.Result, error) {
	if s.Links == nil {
		return netfix.Result{Action: "bounce", Target: iface}, errors.New("bouncing: no netlink handle configured")
	}
	return netfix.ForceBounce(ctx, s.Links, iface, dryRun)
}

// RestartUnit implements TunnelActuator with netfix.RestartUnit.
func (s *TunnelSystem) RestartUnit(ctx context.Context, unit string, dryRun bool) (netfix.Result, error) {
	if s.Systemd == nil {
		return netfix.Result{Action: "restart-unit", Target: unit}, errors.New("restarting a unit: no systemd connection configured")
	}
	return netfix.RestartUnit(ctx, s.Systemd, unit, dryRun)
}
