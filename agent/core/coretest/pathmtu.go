package coretest

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/edgeheal/edgeheal/agent/core"
	"github.com/edgeheal/edgeheal/netfix"
	"github.com/edgeheal/edgeheal/netfix/netfixtest"
	"github.com/edgeheal/edgeheal/probes"
)

// PathMTU is a hand-written core.PathMTU over paths a test sets: each
// target has a route out of a link (whose MTU the link fake holds, so that
// a probe larger than it is refused locally, as the kernel does) and a
// largest packet that crosses (0: the target answers nothing). A target
// without a path answers nothing.
type PathMTU struct {
	mu     sync.Mutex
	links  *netfixtest.MTUs
	routes map[netip.Addr]string
	paths  map[netip.Addr]int
	err    error
	calls  []string
}

var _ core.PathMTU = (*PathMTU)(nil)

// NewPathMTU returns paths whose links' MTUs are links'.
func NewPathMTU(links *netfixtest.MTUs) *PathMTU {
	return &PathMTU{links: links, routes: map[netip.Addr]string{}, paths: map[netip.Addr]int{}}
}

// SetRoute makes packets to target leave through link.
func (p *PathMTU) SetRoute(target netip.Addr, link string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.routes[target] = link
}

// SetPath sets the largest IP packet that reaches target and comes back
// (0: nothing does).
func (p *PathMTU) SetPath(target netip.Addr, largest int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.paths[target] = largest
}

// SetErr makes every probe fail to be made (nil: probe again).
func (p *PathMTU) SetErr(err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.err = err
}

// Calls are the probes made, in order: "probe 10.0.0.1 [200 1420]".
func (p *PathMTU) Calls() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.calls)
}

func (p *PathMTU) Sizes(ctx context.Context, target netip.Addr, sp probes.SizeProbe) probes.SizesResult {
	p.mu.Lock()
	sizes := slices.Clone(sp.Sizes)
	slices.Sort(sizes)
	sizes = slices.Compact(sizes)
	p.calls = append(p.calls, fmt.Sprintf("probe %s %v", target, sizes))
	err, largest, link := p.err, p.paths[target], p.routes[target]
	p.mu.Unlock()
	if err != nil {
		return probes.SizesResult{Err: err}
	}
	if err := ctx.Err(); err != nil {
		return probes.SizesResult{Err: err}
	}
	mtu := 65535
	if link != "" {
		if m := p.links.MTU(link); m > 0 {
			mtu = m
		}
	}
	r := probes.SizesResult{Method: "icmp"}
	for _, s := range sizes {
		a := probes.SizeAnswer{Size: s}
		switch {
		case s > mtu:
			a.LocalTooBig = true
		case s <= largest:
			a.Answered, a.Latency = true, 2*time.Millisecond
		}
		r.Answers = append(r.Answers, a)
	}
	return r
}

func (p *PathMTU) RouteTo(ip netip.Addr) (probes.RouteLink, error) {
	p.mu.Lock()
	link, ok := p.routes[ip]
	p.mu.Unlock()
	if !ok {
		return probes.RouteLink{}, fmt.Errorf("finding the route to %s: network is unreachable", ip)
	}
	mtu := p.links.MTU(link)
	if mtu == 0 {
		return probes.RouteLink{}, fmt.Errorf("finding the link of the route to %s: %w", ip, os.ErrNotExist)
	}
	return probes.RouteLink{Link: link, MTU: mtu}, nil
}

func (p *PathMTU) LinkMTU(name string) (int, error) {
	if m := p.links.MTU(name); m > 0 {
		return m, nil
	}
	return 0, fmt.Errorf("reading the MTU of %s: %w", name, os.ErrNotExist)
}

// Nftables is a core.Nftables whose every connection is one fake
// namespace's nftables (netfixtest.NFT); Err fails every Conn.
type Nftables struct {
	NFT *netfixtest.NFT
	Err error
}

var _ core.Nftables = (*Nftables)(nil)

func (n *Nftables) Conn() (netfix.NFT, error) {
	if n.Err != nil {
		return nil, n.Err
	}
	if n.NFT == nil {
		return nil, errors.New("no nftables here")
	}
	return n.NFT, nil
}
