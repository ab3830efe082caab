package lab

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// The carrier NAT hop (Options.NAT): a namespace between the modem and the
// cloud that masquerades the edge's uplink traffic with nftables and real
// conntrack, as a 4G carrier's NAT or an LTE router does.
//
//	[edge] 100.64.0.2 ── [modem] ── 100.64.0.1 [carrier] 192.0.2.254 ── 192.0.2.1 [cloud]
//
// The edge's uplink sits in RFC 6598's shared address space (the range
// carriers number subscribers from), its default route points at the
// carrier, and the cloud sees the edge only as the carrier's public address
// and a port from its range. Its faults: NATStuck blackholes the existing
// mapping of the tunnel's flow while new flows pass; NATRemap flushes every
// mapping and moves to another public address and port range.

var (
	edgeNATUplinkAddr = netip.MustParsePrefix("100.64.0.2/24")
	carrierInsideAddr = netip.MustParsePrefix("100.64.0.1/24")
)

// natProfile is the carrier's public side: the address and the port range
// it maps UDP and TCP flows to.
type natProfile struct {
	Public netip.Addr
	Lo, Hi uint16
}

// natProfiles are the public sides NATRemap moves between: another address
// and a disjoint port range, as after a PDP context or WAN address change.
var natProfiles = [2]natProfile{
	{Public: netip.MustParseAddr("192.0.2.254"), Lo: 20000, Hi: 29999},
	{Public: netip.MustParseAddr("192.0.2.253"), Lo: 40000, Hi: 49999},
}

// natTable is the carrier's nftables table; natStuckComment marks the rules
// NATStuck adds.
const (
	natTable        = "edgeheal_carrier"
	natStuckComment = "nat-stuck"
)

// NATMapping is one UDP flow of the edge through the carrier's NAT, from
// its conntrack entry.
type NATMapping struct {
	Inside netip.AddrPort `json:"inside"` // the edge's address and port, as the carrier sees them
	Public netip.AddrPort `json:"public"` // what the cloud sees: the carrier's address and port
	Remote netip.AddrPort `json:"remote"` // the far end (the cloud's WireGuard)
}

func (m NATMapping) String() string {
	return fmt.Sprintf("udp %s → %s → %s", m.Inside, m.Public, m.Remote)
}

// NATStatus is the carrier's state for Status.
type NATStatus struct {
	Public   string       `json:"public"` // address:lo-hi
	Stuck    []NATMapping `json:"stuck,omitempty"`
	Mappings []NATMapping `json:"mappings"`
}

// NAT reports whether the lab has the carrier NAT hop.
func (l *Lab) NAT() bool { return l.opts.NAT }

// edgeUplinkPrefix is the edge uplink's address: the shared address space
// behind the carrier, or the cloud's subnet without it.
func (l *Lab) edgeUplinkPrefix() netip.Prefix {
	if l.opts.NAT {
		return edgeNATUplinkAddr
	}
	return edgeUplinkAddr
}

// nodes lists the lab's namespaces in path order: the carrier only with NAT.
func (l *Lab) nodes() []Node {
	if l.opts.NAT {
		return []Node{Pod, Edge, Modem, Carrier, Cloud}
	}
	return Nodes
}

// wireCloudSide links the modem to the cloud: directly, or through the
// carrier with NAT.
func (l *Lab) wireCloudSide() error {
	if !l.opts.NAT {
		return l.veth(Cloud, l.link("c0"), Modem, l.link("m1"))
	}
	steps := []func() error{
		func() error { return l.veth(Carrier, l.link("ci"), Modem, l.link("m1")) },
		func() error { return l.veth(Cloud, l.link("c0"), Carrier, l.link("co")) },
		func() error {
			return l.handle(Carrier, func(h *netlink.Handle) error {
				errs := []error{addAddr(h, l.link("ci"), carrierInsideAddr)}
				for _, p := range natProfiles {
					errs = append(errs, addAddr(h, l.link("co"), netip.PrefixFrom(p.Public, cloudPublicAddr.Bits())))
				}
				errs = append(errs, linkUp(h, l.link("ci")), linkUp(h, l.link("co")))
				return errors.Join(errs...)
			})
		},
		func() error { return writeSysctl(l.ns[Carrier], "net/ipv4/ip_forward", "1") },
		// The carrier's own side sends complete checksums, as the cloud's
		// does: the modem between it and the edge finishes none, and the
		// offload fault stays the edge's.
		func() error { return l.setTxChecksum(Carrier, l.link("ci"), false) },
		func() error { return l.setTxChecksum(Carrier, l.link("co"), false) },
		func() error { return l.nft(natRuleset(l.link("co"), natProfiles[0])) },
	}
	for _, s := range steps {
		if err := s(); err != nil {
			return fmt.Errorf("building the carrier: %w", err)
		}
	}
	return nil
}

// natRuleset is the carrier's whole table: masquerade the subscribers
// (edgeNATUplinkAddr's subnet) to the profile's address and ports, and an
// empty forward chain where NATStuck adds its rules. Replacing it drops
// those rules too.
func natRuleset(out string, p natProfile) string {
	sub := edgeNATUplinkAddr.Masked()
	return fmt.Sprintf(`table ip %[1]s
delete table ip %[1]s
table ip %[1]s {
	chain postrouting {
		type nat hook postrouting priority srcnat;
		oifname %[2]q ip saddr %[3]s meta l4proto { tcp, udp } snat to %[4]s:%[5]d-%[6]d
		oifname %[2]q ip saddr %[3]s snat to %[4]s
	}
	chain forward {
		type filter hook forward priority filter;
	}
}
`, natTable, out, sub, p.Public, p.Lo, p.Hi)
}

// nft runs an nftables script inside the carrier.
func (l *Lab) nft(script string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cmd := l.Command(ctx, Carrier, "nft", "-f", "-")
	cmd.Stdin = strings.NewReader(script)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("nft in %s: %w: %s", l.NetnsName(Carrier), err, out)
	}
	return nil
}

// NATMappings lists the edge's UDP flows in the carrier's conntrack table.
func (l *Lab) NATMappings() ([]NATMapping, error) {
	if !l.opts.NAT {
		return nil, errors.New("the lab has no carrier NAT (start it with NAT)")
	}
	var out []NATMapping
	err := l.handle(Carrier, func(h *netlink.Handle) error {
		flows, err := h.ConntrackTableList(netlink.ConntrackTable, unix.AF_INET)
		if err != nil {
			return fmt.Errorf("listing conntrack: %w", err)
		}
		edge := l.EdgeUplinkAddr()
		for _, f := range flows {
			fw, rv := f.Forward, f.Reverse
			if fw.Protocol != unix.IPPROTO_UDP || !ipIs(fw.SrcIP, edge) {
				continue
			}
			out = append(out, NATMapping{
				Inside: addrPort(fw.SrcIP, fw.SrcPort),
				Public: addrPort(rv.DstIP, rv.DstPort),
				Remote: addrPort(fw.DstIP, fw.DstPort),
			})
		}
		return nil
	})
	return out, err
}

func ipIs(ip net.IP, a netip.Addr) bool {
	b, ok := netip.AddrFromSlice(ip)
	return ok && b.Unmap() == a
}

func addrPort(ip net.IP, port uint16) netip.AddrPort {
	a, _ := netip.AddrFromSlice(ip)
	return netip.AddrPortFrom(a.Unmap(), port)
}

// tunnelMapping is the carrier's mapping of the edge's WireGuard flow: from
// the edge's listen port to the cloud's endpoint.
func (l *Lab) tunnelMapping() (NATMapping, error) {
	d, err := l.wg.Device(l.EdgeWG())
	if err != nil {
		return NATMapping{}, fmt.Errorf("reading %s: %w", l.EdgeWG(), err)
	}
	ms, err := l.NATMappings()
	if err != nil {
		return NATMapping{}, err
	}
	want := netip.AddrPortFrom(l.EdgeUplinkAddr(), uint16(d.ListenPort))
	for _, m := range ms {
		if m.Inside == want && m.Remote == l.CloudEndpoint() {
			return m, nil
		}
	}
	return NATMapping{}, fmt.Errorf("no mapping of the tunnel's flow %s → %s in the carrier's conntrack (has the edge sent?)", want, l.CloudEndpoint())
}

// NATStuck blackholes the carrier's existing mapping of the tunnel's flow,
// both ways, while new flows pass: an nftables rule in the carrier's
// forward chain on that flow's conntrack tuple (its original direction, the
// edge's address and port to the cloud's endpoint). The edge's retries from
// the same source port keep the entry alive and stay in the hole, as a
// mapping pinned to a dead path behaves; a new source port gets a new
// mapping and passes. It lasts until NATClear or NATRemap, and returns the
// mapping it blackholed.
func (l *Lab) NATStuck() (NATMapping, error) {
	l.natMu.Lock()
	defer l.natMu.Unlock()
	m, err := l.tunnelMapping()
	if err != nil {
		return m, err
	}
	rule := fmt.Sprintf("add rule ip %s forward meta l4proto udp ct original ip saddr %s ct original proto-src %d ct original ip daddr %s ct original proto-dst %d counter drop comment %q\n",
		natTable, m.Inside.Addr(), m.Inside.Port(), m.Remote.Addr(), m.Remote.Port(), natStuckComment)
	if err := l.nft(rule); err != nil {
		return m, fmt.Errorf("blackholing %s: %w", m, err)
	}
	l.natStuck = append(l.natStuck, m)
	return m, nil
}

// NATClear removes every blackhole NATStuck made: the stuck mappings pass
// again.
func (l *Lab) NATClear() error {
	l.natMu.Lock()
	defer l.natMu.Unlock()
	if !l.opts.NAT {
		return errors.New("the lab has no carrier NAT (start it with NAT)")
	}
	if err := l.nft(fmt.Sprintf("flush chain ip %s forward\n", natTable)); err != nil {
		return err
	}
	l.natStuck = nil
	return nil
}

// NATRemap flushes every mapping of the carrier (its conntrack table) and
// moves it to its other public address and port range, as after a WAN
// address change: the cloud sees the edge's next packet from a new address
// and port, and packets to the old mapping are dropped. Blackholes of
// NATStuck go too. It returns the new public address and port range.
func (l *Lab) NATRemap() (string, error) {
	l.natMu.Lock()
	defer l.natMu.Unlock()
	if !l.opts.NAT {
		return "", errors.New("the lab has no carrier NAT (start it with NAT)")
	}
	next := (l.natProfile + 1) % len(natProfiles)
	p := natProfiles[next]
	if err := l.nft(natRuleset(l.link("co"), p)); err != nil {
		return "", err
	}
	err := l.handle(Carrier, func(h *netlink.Handle) error { return h.ConntrackTableFlush(netlink.ConntrackTable) })
	if err != nil {
		return "", fmt.Errorf("flushing the carrier's conntrack: %w", err)
	}
	l.natProfile, l.natStuck = next, nil
	return natPublic(p), nil
}

func natPublic(p natProfile) string { return fmt.Sprintf("%s:%d-%d", p.Public, p.Lo, p.Hi) }

// natStatus is the carrier's part of Status (nil without NAT).
func (l *Lab) natStatus() (*NATStatus, error) {
	if !l.opts.NAT {
		return nil, nil
	}
	l.natMu.Lock()
	s := &NATStatus{Public: natPublic(natProfiles[l.natProfile]), Stuck: append([]NATMapping(nil), l.natStuck...)}
	l.natMu.Unlock()
	ms, err := l.NATMappings()
	s.Mappings = ms
	return s, err
}
