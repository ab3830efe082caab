package tunnel

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"sync"
	"time"

	"github.com/coreos/go-systemd/v22/dbus"
	"github.com/vishvananda/netlink"
	"golang.zx2c4.com/wireguard/wgctrl/wgtypes"

	"github.com/edgeheal/edgeheal/agent/core"
	"github.com/edgeheal/edgeheal/agent/core/coretest"
	"github.com/edgeheal/edgeheal/configs"
	"github.com/edgeheal/edgeheal/netfix"
	"github.com/edgeheal/edgeheal/netfix/netfixtest"
	"github.com/edgeheal/edgeheal/probes"
)

// tunnelWorld is a fake of the system under a tunnel monitor, at the OS
// seam: a WireGuard device (netfixtest.WireGuard) whose peers carry
// traffic, a probe through the tunnel, the uplink and the host path, the
// clock, DNS, the link the bounce rung sets down and up, systemd, and an
// offload guard. A fault darkens the tunnel until the rung named fixedBy
// runs for real. It logs every change the monitor makes (see changes).
type tunnelWorld struct {
	wg    *netfixtest.WireGuard
	sd    *netfixtest.Systemd
	links *coretest.Links
	clock *coretest.Clock
	net   *coretest.Net
	// The path MTU's side of the world: link MTUs (wg0 1420 and the
	// uplink wwan0 1500), the paths sized echoes take, nftables.
	mtus *netfixtest.MTUs
	pmtu *coretest.PathMTU
	nft  *netfixtest.NFT

	mu         sync.Mutex
	changes    []string
	dark       bool
	fixedBy    string // the rung that ends darkness ("" none)
	offloadOn  bool   // reassert turns it off
	probeErr   error
	readErr    error
	uplinkDown bool // no default route
	hostDark   bool // the endpoint stops answering the host's own probe
	icmpSilent bool // the endpoint never answers ICMP
	resolvesTo netip.AddrPort
	restarting time.Duration // how long a unit restart takes
	upFails    int           // this many link-up calls fail (the driver refuses)
	noTraffic  bool          // leave counters alone (the benchmark)
	// ownHandshake: at the next answered host-path probe, WireGuard's own
	// handshake retry completes (the tunnel works again, peer 0 has a new
	// handshake): the race between a round's reading and its rung.
	ownHandshake bool
	reads        int
}

func tunnelFakeKey(i int) wgtypes.Key {
	var k wgtypes.Key
	k[0], k[1], k[31] = byte(i>>8), byte(i), 0x5a
	return k
}

func tunnelFakeID(iface string, k wgtypes.Key) string { return iface + "/" + k.String()[:8] }

// newTunnelWorld returns a healthy world with n peers on wg0, keepalive
// ka, peer i carrying 10.100.<i>.0/24 (i < 256) behind 203.0.113.<i+1>.
func newTunnelWorld(n int, ka time.Duration) *tunnelWorld {
	w := &tunnelWorld{wg: netfixtest.NewWireGuard(), sd: netfixtest.NewSystemd(), links: coretest.NewLinks(),
		clock: coretest.NewClock(), net: &coretest.Net{},
		mtus: netfixtest.NewMTUs(map[string]int{"wg0": 1420, "wwan0": 1500}), nft: netfixtest.NewNFT()}
	w.pmtu = coretest.NewPathMTU(w.mtus)
	now := time.Now()
	var peers []wgtypes.Peer
	for i := range n {
		peers = append(peers, wgtypes.Peer{
			PublicKey:                   tunnelFakeKey(i),
			Endpoint:                    &net.UDPAddr{IP: net.IPv4(203, 0, 113, byte(i%250+1)), Port: 51820},
			LastHandshakeTime:           now.Add(-5 * time.Second),
			ReceiveBytes:                1000,
			TransmitBytes:               1000,
			PersistentKeepaliveInterval: ka,
			AllowedIPs:                  []net.IPNet{{IP: net.IPv4(10, byte(100+i>>8), byte(i), 0).To4(), Mask: net.CIDRMask(24, 32)}},
		})
	}
	w.wg.AddDevice("wg0", peers...)
	w.resolvesTo = netip.MustParseAddrPort("203.0.113.1:51820")
	// A re-added peer (a forced handshake) completes a handshake at once
	// when the path works.
	w.wg.OnAdd = func(_ string, p *wgtypes.Peer) {
		w.mu.Lock()
		defer w.mu.Unlock()
		w.healLocked(configs.HealHandshake)
		if !w.dark {
			p.LastHandshakeTime = time.Now()
		}
	}
	w.sd.SetUnit("wg-quick@wg0.service", netfixtest.Unit{ActiveState: "active", SubState: "running"})
	w.links.Add("uplink0")
	w.links.SetDefaultRoute("uplink0")
	w.net.SetTunnel(w.probe)
	w.net.SetLookup(func(string) ([]netip.Addr, error) {
		w.mu.Lock()
		defer w.mu.Unlock()
		return []netip.Addr{w.resolvesTo.Addr()}, nil
	})
	return w
}

func (w *tunnelWorld) set(fn func(w *tunnelWorld)) {
	w.mu.Lock()
	defer w.mu.Unlock()
	fn(w)
}

func (w *tunnelWorld) healLocked(rung string) {
	if w.fixedBy == rung {
		w.dark = false
	}
}

func (w *tunnelWorld) log(format string, args ...any) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.changes = append(w.changes, fmt.Sprintf(format, args...))
}

// Changes is every change made to the world: the WireGuard configuration
// calls in short ("handshake wg0/AAAAAAAA keepalive 20s", "keepalive
// wg0/AAAAAAAA 20s", "endpoint wg0/AAAAAAAA 198.51.100.4:51820"), the
// bounce's link calls, unit restarts and offload changes, in order.
func (w *tunnelWorld) Changes() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]string(nil), w.changes...)
}

// probe answers the fake's tunnel probes: through the tunnel (10.100.x)
// a miss while dark; to an endpoint (the host path), or to a host_check in
// 198.51.100.0/24, an answer unless the host path is dark.
func (w *tunnelWorld) probe(target string) probes.ProbeResult {
	w.mu.Lock()
	defer w.mu.Unlock()
	if strings.HasPrefix(target, "icmp://203.0.113.") || strings.HasPrefix(target, "tcp://198.51.100.") {
		if w.hostDark || w.icmpSilent && strings.HasPrefix(target, "icmp://") {
			return probes.ProbeResult{Class: "timeout", Latency: time.Second}
		}
		if w.ownHandshake {
			w.ownHandshake, w.dark = false, false
			w.wg.UpdatePeer("wg0", tunnelFakeKey(0), func(p *wgtypes.Peer) { p.LastHandshakeTime = time.Now() })
		}
		return probes.ProbeResult{OK: true, Answered: true, Class: "ok", Latency: time.Millisecond}
	}
	if w.probeErr != nil {
		return probes.ProbeResult{Class: "error", Err: w.probeErr}
	}
	if w.dark {
		return probes.ProbeResult{Class: "timeout", Latency: time.Second}
	}
	return probes.ProbeResult{OK: true, Answered: true, Class: "ok", Latency: 2 * time.Millisecond}
}

// Device advances traffic, then reads: tx always grows (the edge keeps
// sending); rx and the handshake only while the tunnel is not dark.
func (w *tunnelWorld) Device(name string) (*wgtypes.Device, error) {
	w.mu.Lock()
	w.reads++
	err, dark, quiet := w.readErr, w.dark, w.noTraffic
	w.mu.Unlock()
	if err != nil {
		return nil, err
	}
	if !quiet {
		if d, err := w.wg.Device(name); err == nil {
			now := time.Now()
			for _, p := range d.Peers {
				w.wg.UpdatePeer(name, p.PublicKey, func(p *wgtypes.Peer) {
					p.TransmitBytes += 100
					if !dark {
						p.ReceiveBytes += 100
						if now.Sub(p.LastHandshakeTime) > 100*time.Second {
							p.LastHandshakeTime = now
						}
					}
				})
			}
		}
	}
	return w.wg.Device(name)
}

// ConfigureDevice applies cfg to the fake device and logs it in short. An
// endpoint set is what the reresolve rung does; a listen port set is the
// rebind rung's.
func (w *tunnelWorld) ConfigureDevice(name string, cfg wgtypes.Config) error {
	removed := map[wgtypes.Key]bool{}
	for _, pc := range cfg.Peers {
		k := name + "/" + pc.PublicKey.String()[:8]
		switch {
		case pc.Remove:
			removed[pc.PublicKey] = true
		case removed[pc.PublicKey]:
			w.log("handshake %s keepalive %s", k, *pc.PersistentKeepaliveInterval)
		case pc.Endpoint != nil:
			w.log("endpoint %s %s", k, pc.Endpoint)
		case pc.PersistentKeepaliveInterval != nil:
			w.log("keepalive %s %s", k, *pc.PersistentKeepaliveInterval)
		}
	}
	if cfg.ListenPort != nil {
		w.log("listen-port %s %d", name, *cfg.ListenPort)
	}
	if err := w.wg.ConfigureDevice(name, cfg); err != nil {
		return err
	}
	if cfg.ListenPort != nil {
		// A new source port: a NAT stuck on the old one maps it afresh.
		w.set(func(w *tunnelWorld) { w.healLocked(configs.HealRebind) })
	}
	for _, pc := range cfg.Peers {
		if pc.UpdateOnly && pc.Endpoint != nil {
			w.set(func(w *tunnelWorld) { w.healLocked(configs.HealReresolve) })
		}
	}
	return nil
}

// Enforce is the offload guard of the reassert rung.
func (w *tunnelWorld) Enforce(context.Context) ([]netfix.Result, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	r := netfix.Result{Action: "offload-off", Target: "uplink0"}
	if w.offloadOn {
		w.offloadOn = false
		r.Changed, r.Changes = true, []string{"uplink0 tx-checksum-ip-generic: on -> off"}
		w.changes = append(w.changes, "offload uplink0 off")
		w.healLocked(configs.HealReassert)
	}
	return []netfix.Result{r}, nil
}

// RestartUnitContext restarts through the systemd fake and ends a fault
// the restart fixes.
func (w *tunnelWorld) RestartUnitContext(ctx context.Context, name, mode string, ch chan<- string) (int, error) {
	w.log("restart %s", name)
	w.mu.Lock()
	takes := w.restarting
	w.mu.Unlock()
	time.Sleep(takes)
	w.log("restarted %s", name)
	w.set(func(w *tunnelWorld) { w.healLocked(configs.HealRestartUnit) })
	return w.sd.RestartUnitContext(ctx, name, mode, ch)
}

func (w *tunnelWorld) ListUnitsByNamesContext(ctx context.Context, units []string) ([]dbus.UnitStatus, error) {
	return w.sd.ListUnitsByNamesContext(ctx, units)
}

func (w *tunnelWorld) ResetFailedUnitContext(ctx context.Context, name string) error {
	return w.sd.ResetFailedUnitContext(ctx, name)
}

// The bounce rung's link: up again heals a fault a bounce fixes.
func (w *tunnelWorld) LinkByName(name string) (netlink.Link, error) {
	return &netlink.Dummy{LinkAttrs: netlink.LinkAttrs{Name: name, Index: 7}}, nil
}
func (w *tunnelWorld) LinkSetDown(l netlink.Link) error {
	w.log("link %s down", l.Attrs().Name)
	return nil
}
func (w *tunnelWorld) LinkSetUp(l netlink.Link) error {
	w.mu.Lock()
	fail := w.upFails > 0
	if fail {
		w.upFails--
	}
	w.mu.Unlock()
	if fail {
		return errors.New("device or resource busy")
	}
	w.log("link %s up", l.Attrs().Name)
	w.set(func(w *tunnelWorld) { w.healLocked(configs.HealBounce) })
	return nil
}
func (w *tunnelWorld) AddrList(netlink.Link, int) ([]netlink.Addr, error) { return nil, nil }
func (w *tunnelWorld) AddrAdd(netlink.Link, *netlink.Addr) error          { return nil }
func (w *tunnelWorld) RouteListFiltered(int, *netlink.Route, uint64) ([]netlink.Route, error) {
	return nil, nil
}
func (w *tunnelWorld) RouteAdd(*netlink.Route) error { return nil }

// uplinkLinks is the world's Links: the default route goes when the uplink
// is down.
type uplinkLinks struct{ w *tunnelWorld }

func (u uplinkLinks) Links() ([]probes.Link, error) { return u.w.links.Links() }
func (u uplinkLinks) DefaultRouteLinks() ([]int, error) {
	u.w.mu.Lock()
	down := u.w.uplinkDown
	u.w.mu.Unlock()
	if down {
		return nil, nil
	}
	return u.w.links.DefaultRouteLinks()
}
func (u uplinkLinks) Subscribe(ctx context.Context) (<-chan probes.LinkEvent, error) {
	return u.w.links.Subscribe(ctx)
}
func (u uplinkLinks) Routes() ([]probes.RouteInfo, error)   { return u.w.links.Routes() }
func (u uplinkLinks) LinkStats() ([]probes.LinkStat, error) { return u.w.links.LinkStats() }

// os is the agent's OS of the world.
func (w *tunnelWorld) os() core.OS {
	o := coretest.OS()
	o.WireGuard, o.Bounce, o.Systemd, o.Links, o.Net, o.Clock = w, w, w, uplinkLinks{w}, w.net, w.clock
	o.PathMTU, o.MTU, o.Nftables = w.pmtu, w.mtus, &coretest.Nftables{NFT: w.nft}
	return o
}

// peer returns the world's copy of peer i of wg0.
func (w *tunnelWorld) peer(i int) wgtypes.Peer {
	p, _ := w.wg.Peer("wg0", tunnelFakeKey(i))
	return p
}
