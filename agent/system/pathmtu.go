package system

import (
	"context"
	"net/netip"
	"time"

	"github.com/google/nftables"
	"github.com/mdlayher/netlink"
	vnl "github.com/vishvananda/netlink"

	"github.com/edgeheal/edgeheal/netfix"
	"github.com/edgeheal/edgeheal/probes"
)

// pathMTU is core.PathMTU: sized DF probes made from the namespace, and
// routes and link MTUs read over its rtnetlink handle.
type pathMTU struct{ s *System }

func (p pathMTU) Sizes(ctx context.Context, target netip.Addr, sp probes.SizeProbe) probes.SizesResult {
	var r probes.SizesResult
	if err := p.s.do(func() error { r = probes.ProbeSizes(ctx, target, sp); return nil }); err != nil {
		return probes.SizesResult{Err: err}
	}
	return r
}

func (p pathMTU) RouteTo(ip netip.Addr) (probes.RouteLink, error) {
	l, err := p.s.links.use()
	if err != nil {
		return probes.RouteLink{}, err
	}
	return l.RouteTo(ip)
}

func (p pathMTU) LinkMTU(name string) (int, error) {
	l, err := p.s.links.use()
	if err != nil {
		return 0, err
	}
	return l.LinkMTU(name)
}

// nftDeadline bounds one request to nftables and its answer: the kernel
// answers in microseconds, and a socket that stops answering must not
// hold a tunnel's round.
const nftDeadline = 5 * time.Second

// nftablesConns is core.Nftables: a new *nftables.Conn for every use, in
// the namespace, each netlink socket it dials bounded by nftDeadline.
type nftablesConns struct{ s *System }

func (n nftablesConns) Conn() (netfix.NFT, error) {
	opts := []nftables.ConnOption{nftables.WithSockOptions(func(c *netlink.Conn) error {
		return c.SetDeadline(time.Now().Add(nftDeadline))
	})}
	if n.s.ns >= 0 {
		opts = append(opts, nftables.WithNetNSFd(int(n.s.ns)))
	}
	return nftables.New(opts...)
}

// linkMTU is netfix.LinkMTU on the namespace's netlink handle.
type linkMTU struct{ s *System }

func (l linkMTU) LinkByName(name string) (vnl.Link, error) {
	h, err := l.s.nl.use()
	if err != nil {
		return nil, err
	}
	return h.LinkByName(name)
}

func (l linkMTU) LinkSetMTU(link vnl.Link, mtu int) error {
	h, err := l.s.nl.use()
	if err != nil {
		return err
	}
	return h.LinkSetMTU(link, mtu)
}
