package agent

import (
	"context"
	"fmt"
	"net"
	"sync"
	"time"

	"golang.zx2c4.com/wireguard/wgctrl/wgtypes"

	"github.com/edgeheal/edgeheal/configs"
	"github.com/edgeheal/edgeheal/netfix"
)

// tunnelFakeOS is a hand-written fake of the system under a tunnel monitor:
// WireGuard peers with traffic counters, a probe through the tunnel, the
// uplink, the clock, and actions that change that state the way the real
// ones do (a forced handshake re-adds the peer with zero counters). It logs
// every action call. Safe for concurrent use.
type tunnelFakeOS struct {
	mu    sync.Mutex
	calls []string // actions only, "handshake wg0/AAAAAAAA dry-run"
	reads int      // ReadPeers calls

	peers      map[string][]PeerStats // by interface
	dark       map[string]bool        // probe misses, rx stops, no handshakes
	fixedBy    string                 // the rung that ends darkness ("" none)
	offloadOn  bool                   // reassert turns it off
	probeErr   error
	readErr    error
	uplink     UplinkStatus
	uplinkErr  error
	clock      ClockStatus
	resolvesTo *net.UDPAddr // what reresolve finds
	noTraffic  bool         // leave counters alone (the benchmark)
}

func tunnelFakeKey(i int) wgtypes.Key {
	var k wgtypes.Key
	k[0], k[1], k[31] = byte(i>>8), byte(i), 0x5a
	return k
}

// newTunnelFakeOS returns a healthy fake with n peers on iface, keepalive
// ka, peer i carrying 10.100.i/24-ish addresses (10.100.<i>.0/24 for i < 256).
func newTunnelFakeOS(iface string, n int, ka time.Duration) *tunnelFakeOS {
	f := &tunnelFakeOS{
		peers:  map[string][]PeerStats{},
		dark:   map[string]bool{},
		uplink: UplinkStatus{Up: true},
		clock:  ClockStatus{Synchronized: true},
	}
	now := time.Now()
	for i := range n {
		f.peers[iface] = append(f.peers[iface], PeerStats{
			PublicKey:     tunnelFakeKey(i),
			Endpoint:      &net.UDPAddr{IP: net.IPv4(203, 0, 113, byte(i%250+1)), Port: 51820},
			LastHandshake: now.Add(-5 * time.Second),
			RxBytes:       1000, TxBytes: 1000,
			Keepalive:  ka,
			AllowedIPs: []net.IPNet{{IP: net.IPv4(10, byte(100+i>>8), byte(i), 0).To4(), Mask: net.CIDRMask(24, 32)}},
		})
	}
	f.resolvesTo = f.peers[iface][0].Endpoint
	return f
}

func (f *tunnelFakeOS) set(fn func(f *tunnelFakeOS)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	fn(f)
}

func (f *tunnelFakeOS) Calls() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.calls...)
}

func (f *tunnelFakeOS) logCall(dryRun bool, format string, args ...any) {
	s := fmt.Sprintf(format, args...)
	if dryRun {
		s += " dry-run"
	}
	f.calls = append(f.calls, s)
}

func tunnelFakeID(iface string, k wgtypes.Key) string { return iface + "/" + k.String()[:8] }

// ReadPeers returns copies, advancing traffic: tx always grows (the edge
// keeps sending); rx and the handshake only while the tunnel is not dark.
func (f *tunnelFakeOS) ReadPeers(_ context.Context, iface string) ([]PeerStats, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.reads++
	if f.readErr != nil {
		return nil, f.readErr
	}
	ps := f.peers[iface]
	if ps == nil {
		return nil, fmt.Errorf("device %s: %w", iface, errTunnelFakeNoDevice)
	}
	if !f.noTraffic {
		now := time.Now()
		for i := range ps {
			ps[i].TxBytes += 100
			if !f.dark[iface] {
				ps[i].RxBytes += 100
				if now.Sub(ps[i].LastHandshake) > 100*time.Second {
					ps[i].LastHandshake = now
				}
			}
		}
		return append([]PeerStats(nil), ps...), nil
	}
	return ps, nil
}

var errTunnelFakeNoDevice = fmt.Errorf("no such device")

func (f *tunnelFakeOS) Probe(context.Context, string, time.Duration) TunnelProbeResult {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.probeErr != nil {
		return TunnelProbeResult{Err: f.probeErr}
	}
	for _, d := range f.dark { // one tunnel per test: any dark tunnel fails the probe
		if d {
			return TunnelProbeResult{Class: "timeout", Latency: time.Second}
		}
	}
	return TunnelProbeResult{OK: true, Class: "ok", Latency: 2 * time.Millisecond}
}

func (f *tunnelFakeOS) Clock(context.Context) (ClockStatus, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.clock, nil
}

func (f *tunnelFakeOS) UplinkUp(context.Context, *net.UDPAddr) (UplinkStatus, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.uplink, f.uplinkErr
}

// heal ends darkness when rung is the one that fixes this fault.
func (f *tunnelFakeOS) heal(iface, rung string) {
	if f.fixedBy == rung {
		f.dark[iface] = false
	}
}

func (f *tunnelFakeOS) setKeepalive(iface string, selected func(wgtypes.Key) bool, ka time.Duration, dryRun bool, r *netfix.Result) {
	ps := f.peers[iface]
	for i := range ps {
		if selected(ps[i].PublicKey) && ps[i].Keepalive != ka {
			r.Changes = append(r.Changes, fmt.Sprintf("%s keepalive: %s -> %s", tunnelFakeID(iface, ps[i].PublicKey), ps[i].Keepalive, ka))
			if !dryRun {
				ps[i].Keepalive = ka
			}
		}
	}
}

func tunnelFakeFinish(r netfix.Result, dryRun bool) netfix.Result {
	if len(r.Changes) > 0 {
		r.Changed, r.DryRun = !dryRun, dryRun
	}
	return r
}

func (f *tunnelFakeOS) Keepalive(_ context.Context, iface string, selected func(wgtypes.Key) bool, ka time.Duration, dryRun bool) (netfix.Result, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.logCall(dryRun, "keepalive %s %s", iface, ka)
	r := netfix.Result{Action: "keepalive", Target: iface}
	f.setKeepalive(iface, selected, ka, dryRun, &r)
	return tunnelFakeFinish(r, dryRun), nil
}

func (f *tunnelFakeOS) Reassert(_ context.Context, iface string, selected func(wgtypes.Key) bool, ka time.Duration, dryRun bool) (netfix.Result, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.logCall(dryRun, "reassert %s", iface)
	r := netfix.Result{Action: "reassert", Target: iface}
	if f.offloadOn {
		r.Changes = append(r.Changes, "wwan0 tx-checksum-ip-generic: on -> off")
		if !dryRun {
			f.offloadOn = false
		}
	}
	if ka > 0 {
		f.setKeepalive(iface, selected, ka, dryRun, &r)
	}
	r = tunnelFakeFinish(r, dryRun)
	if r.Changed {
		f.heal(iface, configs.HealReassert)
	}
	return r, nil
}

func (f *tunnelFakeOS) Handshake(_ context.Context, iface string, peer wgtypes.Key, ka time.Duration, dryRun bool) (netfix.Result, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.logCall(dryRun, "handshake %s keepalive %s", tunnelFakeID(iface, peer), ka)
	r := netfix.Result{Action: "handshake", Target: tunnelFakeID(iface, peer), Changes: []string{"peer removed and added back"}}
	for _, p := range f.peers[iface] {
		if p.PublicKey == peer && p.Endpoint == nil {
			return netfix.Result{Action: "handshake", Target: r.Target}, fmt.Errorf("forcing handshake with %s: %w", r.Target, netfix.ErrNoEndpoint)
		}
	}
	if !dryRun {
		f.heal(iface, configs.HealHandshake)
		ps := f.peers[iface]
		for i := range ps {
			if ps[i].PublicKey == peer {
				// Re-added: zero counters, no handshake; one completes at once
				// when the path works.
				ps[i].RxBytes, ps[i].TxBytes, ps[i].LastHandshake, ps[i].Keepalive = 0, 0, time.Time{}, ka
				if !f.dark[iface] {
					ps[i].LastHandshake = time.Now()
				}
			}
		}
	}
	return tunnelFakeFinish(r, dryRun), nil
}

func (f *tunnelFakeOS) Reresolve(_ context.Context, iface string, peer wgtypes.Key, host string, current *net.UDPAddr, dryRun bool) (netfix.Result, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.logCall(dryRun, "reresolve %s %s", tunnelFakeID(iface, peer), host)
	r := netfix.Result{Action: "endpoint", Target: tunnelFakeID(iface, peer)}
	if current == nil || current.String() != f.resolvesTo.String() {
		r.Changes = append(r.Changes, fmt.Sprintf("endpoint: %v -> %v", current, f.resolvesTo))
		if !dryRun {
			ps := f.peers[iface]
			for i := range ps {
				if ps[i].PublicKey == peer {
					ps[i].Endpoint = f.resolvesTo
				}
			}
		}
	}
	r = tunnelFakeFinish(r, dryRun)
	if r.Changed {
		f.heal(iface, configs.HealReresolve)
	}
	return r, nil
}

func (f *tunnelFakeOS) Bounce(_ context.Context, iface string, dryRun bool) (netfix.Result, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.logCall(dryRun, "bounce %s", iface)
	if !dryRun {
		f.heal(iface, configs.HealBounce)
	}
	return tunnelFakeFinish(netfix.Result{Action: "bounce", Target: iface, Changes: []string{"link down", "link up"}}, dryRun), nil
}

func (f *tunnelFakeOS) RestartUnit(_ context.Context, unit string, dryRun bool) (netfix.Result, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.logCall(dryRun, "restart-unit %s", unit)
	if !dryRun {
		for iface := range f.dark {
			f.heal(iface, configs.HealRestartUnit)
		}
	}
	return tunnelFakeFinish(netfix.Result{Action: "restart-unit", Target: unit, Changes: []string{"restarted"}}, dryRun), nil
}

var _ TunnelOS = (*tunnelFakeOS)(nil)
