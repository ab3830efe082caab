package lab

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/safchain/ethtool"
	"github.com/vishvananda/netlink"
	"golang.zx2c4.com/wireguard/wgctrl"
	"golang.zx2c4.com/wireguard/wgctrl/wgtypes"

	"github.com/edgeheal/edgeheal/lab/ktrace"
)

func linkUp(h *netlink.Handle, name string) error {
	lk, err := h.LinkByName(name)
	if err != nil {
		return fmt.Errorf("finding %s: %w", name, err)
	}
	if err := h.LinkSetUp(lk); err != nil {
		return fmt.Errorf("setting %s up: %w", name, err)
	}
	return nil
}

func addAddr(h *netlink.Handle, name string, p netip.Prefix) error {
	lk, err := h.LinkByName(name)
	if err != nil {
		return fmt.Errorf("finding %s: %w", name, err)
	}
	a := &netlink.Addr{IPNet: &net.IPNet{IP: p.Addr().AsSlice(), Mask: net.CIDRMask(p.Bits(), p.Addr().BitLen())}}
	if err := h.AddrAdd(lk, a); err != nil {
		return fmt.Errorf("adding %s to %s: %w", p, name, err)
	}
	return nil
}

func ipNet(p netip.Prefix) *net.IPNet {
	p = p.Masked()
	return &net.IPNet{IP: p.Addr().AsSlice(), Mask: net.CIDRMask(p.Bits(), p.Addr().BitLen())}
}

// veth creates a veth pair from inside node a (link an) to node b (link bn).
func (l *Lab) veth(a Node, an string, b Node, bn string) error {
	return l.handle(a, func(h *netlink.Handle) error {
		v := &netlink.Veth{
			LinkAttrs:     netlink.LinkAttrs{Name: an},
			PeerName:      bn,
			PeerNamespace: netlink.NsFd(int(l.ns[b])),
		}
		if err := h.LinkAdd(v); err != nil {
			return fmt.Errorf("creating veth %s/%s: %w", an, bn, err)
		}
		return nil
	})
}

// buildLinks wires pod — edge — modem — cloud and gives every node its
// addresses and routes.
func (l *Lab) buildLinks() error {
	steps := []func() error{
		func() error { return l.veth(Pod, l.link("p0"), Edge, l.link("pe")) },
		l.wireCloudSide,
		l.plugUplink,
		func() error {
			return l.handle(Pod, func(h *netlink.Handle) error {
				if err := addAddr(h, l.link("p0"), podAddr); err != nil {
					return err
				}
				if err := linkUp(h, l.link("p0")); err != nil {
					return err
				}
				// Only the tunnel subnet: the pod has no way around the tunnel.
				gw := edgePodSideAddr.Addr().AsSlice()
				return h.RouteAdd(&netlink.Route{Dst: ipNet(cloudTunnelAddr), Gw: gw})
			})
		},
		func() error {
			return l.handle(Edge, func(h *netlink.Handle) error {
				if err := addAddr(h, l.EdgePodLink(), edgePodSideAddr); err != nil {
					return err
				}
				return linkUp(h, l.EdgePodLink())
			})
		},
		func() error { return writeSysctl(l.ns[Edge], "net/ipv4/ip_forward", "1") },
		// MoveCloudEndpoint removes the cloud's first address after adding
		// the next one: without this the kernel removes both.
		func() error { return writeSysctl(l.ns[Cloud], "net/ipv4/conf/all/promote_secondaries", "1") },
		func() error {
			return l.handle(Modem, func(h *netlink.Handle) error {
				return errors.Join(linkUp(h, l.link("m0")), linkUp(h, l.link("m1")))
			})
		},
		func() error {
			return l.handle(Cloud, func(h *netlink.Handle) error {
				if err := addAddr(h, l.link("c0"), cloudPublicAddr); err != nil {
					return err
				}
				return linkUp(h, l.link("c0"))
			})
		},
		// The fault is the edge's alone: the cloud's side sends complete
		// checksums, so only edge → cloud traffic is hurt.
		func() error { return l.setTxChecksum(Cloud, l.link("c0"), false) },
	}
	for _, s := range steps {
		if err := s(); err != nil {
			return err
		}
	}
	return nil
}

// plugUplink creates the edge uplink veth (edge <prefix>-up, modem
// <prefix>-m0) with its address and a default route, as a freshly
// enumerated modem: kernel default offload settings, unless
// Options.OffloadOff asks for them off at start.
func (l *Lab) plugUplink() error {
	l.plugAsked = ktrace.Now() // callers hold l.mu, or run before anyone else can
	if err := l.veth(Edge, l.EdgeUplink(), Modem, l.link("m0")); err != nil {
		return err
	}
	err := l.handle(Edge, func(h *netlink.Handle) error {
		if err := addAddr(h, l.EdgeUplink(), l.edgeUplinkPrefix()); err != nil {
			return err
		}
		if err := linkUp(h, l.EdgeUplink()); err != nil {
			return err
		}
		lk, err := h.LinkByName(l.EdgeUplink())
		if err != nil {
			return err
		}
		// Everything not in the tunnel goes out of the uplink, so the edge
		// reaches the cloud's public address wherever it moves.
		_, def, _ := net.ParseCIDR("0.0.0.0/0")
		r := &netlink.Route{LinkIndex: lk.Attrs().Index, Dst: def, Scope: netlink.SCOPE_LINK}
		if l.opts.NAT { // behind the carrier, as a modem's subscriber
			r.Scope, r.Gw = netlink.SCOPE_UNIVERSE, carrierInsideAddr.Addr().AsSlice()
		}
		if err := h.RouteAdd(r); err != nil {
			return fmt.Errorf("adding default route: %w", err)
		}
		return nil
	})
	if err != nil {
		return err
	}
	l.pluggedAt = time.Now() // callers hold l.mu, or run before anyone else can
	return nil
}

// Replug deletes the edge uplink veth and creates it again with the same
// name and address, as a USB modem re-enumerating: it comes back with
// default offload settings (TX checksum offload on). The relay re-binds.
// The link is absent for about delay between delete and re-create.
func (l *Lab) Replug(ctx context.Context) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return errors.New("lab is closed")
	}
	err := l.handle(Edge, func(h *netlink.Handle) error {
		lk, err := h.LinkByName(l.EdgeUplink())
		if err != nil {
			return fmt.Errorf("finding %s: %w", l.EdgeUplink(), err)
		}
		return h.LinkDel(lk)
	})
	if err != nil {
		return fmt.Errorf("unplugging: %w", err)
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := l.plugUplink(); err != nil {
		return fmt.Errorf("plugging back: %w", err)
	}
	if err := l.handle(Modem, func(h *netlink.Handle) error { return linkUp(h, l.link("m0")) }); err != nil {
		return err
	}
	return l.relay.rebind()
}

// txChecksumFeatures are the kernel's TX checksum feature names.
func isTxChecksum(name string) bool { return strings.HasPrefix(name, "tx-checksum-") }

func (l *Lab) setTxChecksum(n Node, link string, on bool) error {
	return l.Do(n, func() error {
		e, err := ethtool.NewEthtool()
		if err != nil {
			return fmt.Errorf("opening ethtool: %w", err)
		}
		defer e.Close()
		fs, err := e.FeaturesWithState(link)
		if err != nil {
			return fmt.Errorf("reading features of %s: %w", link, err)
		}
		want := map[string]bool{}
		for name, s := range fs {
			if isTxChecksum(name) && s.Available && s.Active != on {
				want[name] = on
			}
		}
		if len(want) == 0 {
			return nil
		}
		if err := e.Change(link, want); err != nil {
			return fmt.Errorf("changing features of %s: %w", link, err)
		}
		return nil
	})
}

// SetUplinkTxChecksum turns every changeable TX checksum feature of the
// edge uplink on (the fault) or off (the fix), as `ethtool -K up tx on|off`.
func (l *Lab) SetUplinkTxChecksum(on bool) error {
	return l.setTxChecksum(Edge, l.EdgeUplink(), on)
}

// UplinkTxChecksum reads the edge uplink's active TX checksum features.
func (l *Lab) UplinkTxChecksum() (map[string]bool, error) {
	out := map[string]bool{}
	err := l.Do(Edge, func() error {
		e, err := ethtool.NewEthtool()
		if err != nil {
			return fmt.Errorf("opening ethtool: %w", err)
		}
		defer e.Close()
		fs, err := e.FeaturesWithState(l.EdgeUplink())
		if err != nil {
			return fmt.Errorf("reading features of %s: %w", l.EdgeUplink(), err)
		}
		for name, s := range fs {
			if isTxChecksum(name) && s.Available {
				out[name] = s.Active
			}
		}
		return nil
	})
	return out, err
}

// UplinkTxChecksumOn reports whether any TX checksum feature of the edge
// uplink is active: the fault condition.
func (l *Lab) UplinkTxChecksumOn() (bool, error) {
	fs, err := l.UplinkTxChecksum()
	if err != nil {
		return false, err
	}
	for _, on := range fs {
		if on {
			return true, nil
		}
	}
	return false, nil
}

// startWireGuard brings up both wireguard-go devices and configures them:
// the edge peers with the cloud at its public endpoint (keepalive from
// Options); the cloud knows the edge by key only and learns its endpoint
// from the edge's first handshake, as a hub does.
func (l *Lab) startWireGuard() error {
	var err error
	if l.edgeKey, err = wgtypes.GeneratePrivateKey(); err != nil {
		return err
	}
	if l.cloudKey, err = wgtypes.GeneratePrivateKey(); err != nil {
		return err
	}
	if l.wg, err = wgctrl.New(); err != nil {
		return fmt.Errorf("opening wgctrl: %w", err)
	}
	if l.edgeWG, err = startWG(l.ns[Edge], l.EdgeWG(), l.log); err != nil {
		return err
	}
	ka := l.opts.Keepalive
	var port *int
	if l.opts.EdgeListenPort > 0 {
		port = &l.opts.EdgeListenPort
	}
	err = l.wg.ConfigureDevice(l.EdgeWG(), wgtypes.Config{
		PrivateKey: &l.edgeKey,
		ListenPort: port,
		Peers: []wgtypes.PeerConfig{{
			PublicKey:                   l.CloudPublicKey(),
			Endpoint:                    net.UDPAddrFromAddrPort(l.CloudEndpoint()),
			AllowedIPs:                  []net.IPNet{*ipNet(cloudTunnelAddr)},
			PersistentKeepaliveInterval: &ka,
		}},
	})
	if err != nil {
		return fmt.Errorf("configuring %s: %w", l.EdgeWG(), err)
	}
	err = l.handle(Edge, func(h *netlink.Handle) error {
		if err := addAddr(h, l.EdgeWG(), edgeTunnelAddr); err != nil {
			return err
		}
		return linkUp(h, l.EdgeWG())
	})
	if err != nil {
		return err
	}
	return l.startCloudWG()
}

func (l *Lab) startCloudWG() error {
	d, err := startWG(l.ns[Cloud], l.CloudWG(), l.log)
	if err != nil {
		return err
	}
	l.cloudWG = d
	port := WireGuardPort
	err = l.wg.ConfigureDevice(l.CloudWG(), wgtypes.Config{
		PrivateKey: &l.cloudKey,
		ListenPort: &port,
		Peers: []wgtypes.PeerConfig{{
			PublicKey:  l.EdgePublicKey(),
			AllowedIPs: []net.IPNet{*ipNet(netip.PrefixFrom(edgeTunnelAddr.Addr(), 32)), *ipNet(podAddr)},
		}},
	})
	if err != nil {
		return fmt.Errorf("configuring %s: %w", l.CloudWG(), err)
	}
	return l.handle(Cloud, func(h *netlink.Handle) error {
		if err := addAddr(h, l.CloudWG(), cloudTunnelAddr); err != nil {
			return err
		}
		if err := linkUp(h, l.CloudWG()); err != nil {
			return err
		}
		lk, err := h.LinkByName(l.CloudWG())
		if err != nil {
			return err
		}
		if err := h.RouteAdd(&netlink.Route{LinkIndex: lk.Attrs().Index, Dst: ipNet(podAddr), Scope: netlink.SCOPE_LINK}); err != nil {
			return fmt.Errorf("adding pod route: %w", err)
		}
		return nil
	})
}

// RestartCloudWireGuard stops the cloud's WireGuard device and starts it
// again with the same key, port and peers but no sessions, as a hub reboot
// or a Flannel restart does. The edge keeps sending on a session the cloud
// no longer has until its own timers (or the agent) start a new handshake.
func (l *Lab) RestartCloudWireGuard() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return errors.New("lab is closed")
	}
	err := l.cloudWG.close()
	l.cloudWG = nil
	if err != nil {
		return fmt.Errorf("stopping cloud wireguard: %w", err)
	}
	// The TUN link goes away asynchronously with its last file descriptor.
	deadline := time.Now().Add(2 * time.Second)
	for {
		err := l.handle(Cloud, func(h *netlink.Handle) error {
			_, err := h.LinkByName(l.CloudWG())
			return err
		})
		if err != nil {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("cloud wireguard link %s did not go away", l.CloudWG())
		}
		time.Sleep(10 * time.Millisecond)
	}
	return l.startCloudWG()
}

// AddCloudPeers adds n extra peers (random keys, one /32 each from
// 10.78.0.0/16) to the cloud's device, for hub-scale experiments.
func (l *Lab) AddCloudPeers(n int) error {
	if n < 0 || n > 65000 {
		return fmt.Errorf("adding %d peers: want 0..65000", n)
	}
	peers := make([]wgtypes.PeerConfig, 0, n)
	for i := range n {
		k, err := wgtypes.GeneratePrivateKey()
		if err != nil {
			return err
		}
		ip := net.IPv4(10, 78, byte((i+1)>>8), byte(i+1))
		peers = append(peers, wgtypes.PeerConfig{
			PublicKey:  k.PublicKey(),
			AllowedIPs: []net.IPNet{{IP: ip, Mask: net.CIDRMask(32, 32)}},
		})
	}
	if err := l.wg.ConfigureDevice(l.CloudWG(), wgtypes.Config{Peers: peers}); err != nil {
		return fmt.Errorf("adding %d peers to %s: %w", n, l.CloudWG(), err)
	}
	return nil
}

// MoveCloudEndpoint gives the cloud a new public address, removes the old
// one and points CloudHost at the new one in HostsFile. The edge's
// WireGuard peer keeps the old endpoint: the tunnel is dark until someone
// re-resolves CloudHost. It returns the new address.
func (l *Lab) MoveCloudEndpoint() (netip.Addr, error) {
	l.mu.Lock()
	old := l.cloudPublic
	next := old.Addr().Next()
	if next == edgeUplinkAddr.Addr() {
		next = next.Next()
	}
	if old == cloudPublicAddr {
		next = netip.MustParseAddr("192.0.2.11")
	}
	np := netip.PrefixFrom(next, old.Bits())
	l.mu.Unlock()
	err := l.handle(Cloud, func(h *netlink.Handle) error {
		if err := addAddr(h, l.link("c0"), np); err != nil {
			return err
		}
		lk, err := h.LinkByName(l.link("c0"))
		if err != nil {
			return err
		}
		oa := &netlink.Addr{IPNet: &net.IPNet{IP: old.Addr().AsSlice(), Mask: net.CIDRMask(old.Bits(), 32)}}
		if err := h.AddrDel(lk, oa); err != nil {
			return fmt.Errorf("removing %s: %w", old, err)
		}
		return nil
	})
	if err != nil {
		return netip.Addr{}, fmt.Errorf("moving cloud endpoint: %w", err)
	}
	l.mu.Lock()
	l.cloudPublic = np
	l.mu.Unlock()
	if err := l.writeHosts(); err != nil {
		return netip.Addr{}, err
	}
	return next, nil
}

// CloudUDPInCsumErrors reads UdpInCsumErrors from /proc/net/snmp in the
// cloud namespace: datagrams the cloud dropped for a bad checksum.
func (l *Lab) CloudUDPInCsumErrors() (uint64, error) {
	var v uint64
	err := l.Do(Cloud, func() error {
		// thread-self: /proc/self/net follows the thread group leader's
		// namespace, not this thread's.
		b, err := os.ReadFile("/proc/thread-self/net/snmp")
		if err != nil {
			return err
		}
		v, err = udpInCsumErrors(b)
		return err
	})
	return v, err
}

// udpInCsumErrors parses the Udp InCsumErrors counter out of /proc/net/snmp.
func udpInCsumErrors(snmp []byte) (uint64, error) {
	var header []string
	sc := bufio.NewScanner(bytes.NewReader(snmp))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) == 0 || f[0] != "Udp:" {
			continue
		}
		if header == nil {
			header = f
			continue
		}
		for i, name := range header {
			if name == "InCsumErrors" && i < len(f) {
				return strconv.ParseUint(f[i], 10, 64)
			}
		}
		break
	}
	return 0, errors.New("no Udp InCsumErrors in snmp")
}
