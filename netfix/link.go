package netfix

import (
	"context"
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// Links is the part of *netlink.Handle that ForceBounce uses. A handle made
// with netlink.NewHandleAt(ns) bounces links inside that namespace.
type Links interface {
	LinkByName(name string) (netlink.Link, error)
	LinkSetDown(link netlink.Link) error
	LinkSetUp(link netlink.Link) error
	AddrList(link netlink.Link, family int) ([]netlink.Addr, error)
	AddrAdd(link netlink.Link, addr *netlink.Addr) error
	RouteListFiltered(family int, filter *netlink.Route, filterMask uint64) ([]netlink.Route, error)
	RouteAdd(route *netlink.Route) error
}

var _ Links = (*netlink.Handle)(nil)

// ForceBounce sets iface administratively down and up again, then adds
// back the addresses and routes (any table) it had before that are gone
// afterwards. The kernel drops IPv6 addresses and every route through a
// link that goes down; routes the kernel makes itself (proto kernel, the
// local table) and IPv6 link-local addresses come back on their own and
// are not touched. The link is left up, even if it was down before.
//
// What a bounce achieves depends on the implementation behind iface: on
// the WireGuard kernel module a link down clears every session, so the
// next packet starts a handshake; on wireguard-go it changes nothing
// (2026-05: no new socket, no handshake). The agent must count it as a fix
// only when verification says so.
//
// ForceBounce is disruptive and not idempotent by nature: Changed is true
// whenever it acted. Changes lists the bounce and every restored address
// and route; an address or route that could not be restored is an error.
// A missing link matches os.ErrNotExist.
//
// A bounce must never leave the tunnel worse than it found it: if setting
// the link up fails, it tries again (50 ms, doubling to 2 s) until ctx
// ends; an error then matches ErrLeftDown, and the caller keeps trying
// with EnsureLinkUp.
func ForceBounce(ctx context.Context, links Links, iface string, dryRun bool) (Result, error) {
	r := Result{Action: "bounce", Target: iface}
	if err := ctx.Err(); err != nil {
		return r, err
	}
	link, err := links.LinkByName(iface)
	if err != nil {
		return r, fmt.Errorf("finding link %s: %w", iface, linkErr(iface, err))
	}
	addrs, routes, err := linkState(links, link)
	if err != nil {
		return r, fmt.Errorf("reading addresses and routes of %s: %w", iface, err)
	}
	r.Changes = []string{"link down", "link up"}
	if dryRun {
		r.DryRun = true
		return r, nil
	}
	if err := links.LinkSetDown(link); err != nil {
		return r, fmt.Errorf("setting %s down: %w", iface, linkErr(iface, err))
	}
	r.Changed = true
	if tries, err := setUpRetrying(ctx, links, link); err != nil {
		return r, fmt.Errorf("setting %s up (%d tries): %w: %w", iface, tries, ErrLeftDown, linkErr(iface, err))
	} else if tries > 1 {
		r.Changes[1] = fmt.Sprintf("link up (at try %d)", tries)
	}
	// The kernel needs no time to drop them: by the time LinkSetDown
	// returns, the routes are gone, so one read tells what to restore.
	nowAddrs, nowRoutes, err := linkState(links, link)
	if err != nil {
		return r, fmt.Errorf("reading addresses and routes of %s after bouncing it: %w", iface, err)
	}
	var errs []error
	have := make(map[string]bool, len(nowAddrs))
	for _, a := range nowAddrs {
		have[a.IPNet.String()] = true
	}
	for _, a := range addrs {
		if have[a.IPNet.String()] {
			continue
		}
		add := restorableAddr(a)
		if err := links.AddrAdd(link, add); err != nil && !errors.Is(err, unix.EEXIST) {
			errs = append(errs, fmt.Errorf("restoring address %s: %w", a.IPNet, err))
			continue
		}
		r.Changes = append(r.Changes, "restored address "+a.IPNet.String())
	}
	haveRoute := make(map[string]bool, len(nowRoutes))
	for _, rt := range nowRoutes {
		haveRoute[routeKey(rt)] = true
	}
	for _, rt := range routes {
		if haveRoute[routeKey(rt)] {
			continue
		}
		add := rt
		add.LinkIndex = link.Attrs().Index
		if err := links.RouteAdd(&add); err != nil && !errors.Is(err, unix.EEXIST) {
			errs = append(errs, fmt.Errorf("restoring route %s: %w", routeKey(rt), err))
			continue
		}
		r.Changes = append(r.Changes, "restored route "+routeKey(rt))
	}
	if len(errs) > 0 {
		return r, fmt.Errorf("bouncing %s: %w", iface, errors.Join(errs...))
	}
	return r, nil
}

// ErrLeftDown matches the error of a bounce whose link could not be set up
// again: the link is down, and the caller must keep trying (EnsureLinkUp).
var ErrLeftDown = errors.New("link left down")

// setUpRetrying sets link up, trying again until ctx ends; it returns the
// number of tries and the last error.
func setUpRetrying(ctx context.Context, links Links, link netlink.Link) (int, error) {
	wait := 50 * time.Millisecond
	for tries := 1; ; tries++ {
		err := links.LinkSetUp(link)
		if err == nil {
			return tries, nil
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return tries, err
		case <-t.C:
		}
		wait = min(2*wait, 2*time.Second)
	}
}

// EnsureLinkUp sets iface up if it is down: what follows a bounce that
// left it down (ErrLeftDown). Changed is true when it was down and is up
// now; a missing link matches os.ErrNotExist.
func EnsureLinkUp(ctx context.Context, links Links, iface string) (Result, error) {
	r := Result{Action: "link-up", Target: iface}
	if err := ctx.Err(); err != nil {
		return r, err
	}
	link, err := links.LinkByName(iface)
	if err != nil {
		return r, fmt.Errorf("finding link %s: %w", iface, linkErr(iface, err))
	}
	if link.Attrs().Flags&net.FlagUp != 0 {
		return r, nil
	}
	if err := links.LinkSetUp(link); err != nil {
		return r, fmt.Errorf("setting %s up: %w: %w", iface, ErrLeftDown, linkErr(iface, err))
	}
	r.Changed, r.Changes = true, []string{"link up"}
	return r, nil
}

// linkState reads the addresses and routes of link that ForceBounce must
// keep: not IPv6 link-local addresses and not the routes the kernel makes
// and removes by itself.
func linkState(links Links, link netlink.Link) ([]netlink.Addr, []netlink.Route, error) {
	all, err := links.AddrList(link, netlink.FAMILY_ALL)
	if err != nil {
		return nil, nil, fmt.Errorf("listing addresses: %w", err)
	}
	var addrs []netlink.Addr
	for _, a := range all {
		if a.IPNet == nil || a.IP.IsLinkLocalUnicast() {
			continue
		}
		addrs = append(addrs, a)
	}
	rts, err := links.RouteListFiltered(netlink.FAMILY_ALL,
		&netlink.Route{LinkIndex: link.Attrs().Index, Table: unix.RT_TABLE_UNSPEC},
		netlink.RT_FILTER_OIF|netlink.RT_FILTER_TABLE)
	if err != nil {
		return nil, nil, fmt.Errorf("listing routes: %w", err)
	}
	var routes []netlink.Route
	for _, rt := range rts {
		if rt.Protocol == unix.RTPROT_KERNEL || rt.Table == unix.RT_TABLE_LOCAL ||
			(rt.Type != 0 && rt.Type != unix.RTN_UNICAST) ||
			(rt.Dst != nil && rt.Dst.IP.IsLinkLocalUnicast()) || (rt.Dst != nil && rt.Dst.IP.IsMulticast()) {
			continue
		}
		routes = append(routes, rt)
	}
	return addrs, routes, nil
}

// restorableAddr is a without the fields the kernel fills in and refuses
// back (broadcast and lifetimes are recomputed).
func restorableAddr(a netlink.Addr) *netlink.Addr {
	ipnet := &net.IPNet{IP: a.IP, Mask: a.Mask}
	return &netlink.Addr{IPNet: ipnet, Peer: a.Peer, Label: a.Label, Flags: a.Flags &^ (unix.IFA_F_TENTATIVE | unix.IFA_F_DADFAILED | unix.IFA_F_DEPRECATED), Scope: a.Scope}
}

// routeKey identifies a route for the before/after comparison.
func routeKey(rt netlink.Route) string {
	dst := "default"
	if ones, _ := rt.Dst.Mask.Size(); rt.Dst != nil && ones > 0 {
		dst = rt.Dst.String()
	}
	s := fmt.Sprintf("%s table %d", dst, rt.Table)
	if rt.Gw != nil {
		s += " via " + rt.Gw.String()
	}
	if rt.Src != nil {
		s += " src " + rt.Src.String()
	}
	if rt.Priority != 0 {
		s += fmt.Sprintf(" metric %d", rt.Priority)
	}
	return s
}

// linkErr maps netlink's "no such link" to an error matching
// os.ErrNotExist; other errors pass through.
func linkErr(iface string, err error) error {
	var lnf netlink.LinkNotFoundError
	if errors.As(err, &lnf) || errors.Is(err, unix.ENODEV) {
		return &notFound{what: "link " + iface, err: err}
	}
	return err
}
