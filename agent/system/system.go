// Package system is the agent's one OS backend, for Linux: every handle
// the agent uses, opened once per network namespace by one constructor
// (Open for the process's own namespace, OpenAt for another), behind the
// small interfaces of core.OS.
//
// A handle that cannot be opened does not stop the agent: it is opened
// again at its next use, and until then every call through it returns the
// error, which the component using it reports (an uplink check in state
// error, a tunnel whose peers cannot be read). system maps OS errors at
// the boundary: a missing link, device or unit matches os.ErrNotExist.
// It decides nothing.
package system

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/edgeheal/edgeheal/agent/core"
	"github.com/edgeheal/edgeheal/probes"
)

// System is the backend for one network namespace. It is safe for
// concurrent use; Close releases every handle.
type System struct {
	ns     netns.NsHandle // owned duplicate; -1 for the process's own namespace
	nsPath string         // "" for the process's own namespace, else /proc/self/fd/<ns>

	eth   lazy[*ethtoolSocket]
	links lazy[*probes.Netlink]
	nl    lazy[*netlink.Handle]
	wg    lazy[wgClient]
	// wgCalls are the WireGuard calls that overran their deadline and
	// still wait (wireguard.go).
	wgCalls deviceCalls
	sd      *lazySystemd
	pods    *probes.Locator
	clock   *probes.Clock
}

// Open returns the backend for the calling thread's network namespace (for
// a daemon that never leaves it: the process's). Handles are opened on
// first use.
func Open() *System {
	return newSystem(-1)
}

// OpenAt returns the backend for the namespace ns. It keeps a duplicate of
// ns, so the caller may close its own.
func OpenAt(ns netns.NsHandle) (*System, error) {
	fd, err := unix.FcntlInt(uintptr(ns), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("duplicating the namespace handle: %w", err)
	}
	return newSystem(netns.NsHandle(fd)), nil
}

func newSystem(ns netns.NsHandle) *System {
	s := &System{ns: ns, sd: &lazySystemd{}, pods: &probes.Locator{}, clock: &probes.Clock{}}
	if ns >= 0 {
		s.nsPath = fmt.Sprintf("/proc/self/fd/%d", int(ns))
	}
	s.eth.open = func() (*ethtoolSocket, error) {
		var e *ethtoolSocket
		err := s.do(func() (err error) { e, err = openEthtool(); return err })
		return e, err
	}
	s.links.open = func() (*probes.Netlink, error) {
		if s.ns < 0 {
			return probes.NewNetlink()
		}
		return probes.NewNetlinkAt(s.ns)
	}
	s.nl.open = func() (*netlink.Handle, error) {
		if s.ns < 0 {
			return netlink.NewHandle()
		}
		return netlink.NewHandleAt(s.ns)
	}
	s.wg.open = func() (wgClient, error) {
		var c wgClient
		// wgctrl's generic netlink socket belongs to the namespace it is made
		// in; the userspace (UAPI) sockets are found by name machine-wide.
		err := s.do(func() (err error) { c, err = openWireGuard(); return err })
		return c, err
	}
	return s
}

// OS returns the agent's view of the backend.
func (s *System) OS() core.OS {
	return core.OS{
		NIC:       ethtoolNIC{s},
		Links:     linksView{s},
		WireGuard: wireGuard{s},
		Bounce:    bouncer{s},
		Systemd:   s.sd,
		Net:       prober{s},
		Pods:      s.pods,
		Clock:     clock{s.clock},
		PathMTU:   pathMTU{s},
		Nftables:  nftablesConns{s},
		MTU:       linkMTU{s},
		SNMPPath:  "/proc/net/snmp", // the namespace's own, read by the agent's process in it
	}
}

// Close releases every handle that was opened.
func (s *System) Close() error {
	var errs []error
	if e, ok := s.eth.get(); ok {
		errs = append(errs, e.Close())
	}
	if l, ok := s.links.get(); ok {
		errs = append(errs, l.Close())
	}
	if h, ok := s.nl.get(); ok {
		h.Close()
	}
	if c, ok := s.wg.get(); ok {
		errs = append(errs, c.Close())
	}
	errs = append(errs, s.pods.Close(), s.sd.close())
	if s.ns >= 0 {
		errs = append(errs, s.ns.Close())
	}
	return errors.Join(errs...)
}

// do runs fn inside the namespace, for the one thing that needs it
// (creating a socket: a socket keeps the namespace it was made in); see
// probes.Netns.Do.
func (s *System) do(fn func() error) error {
	if s.ns < 0 {
		return fn()
	}
	return probes.DoIn(s.ns, fn)
}

// lazy is a handle opened on first use and again after a failed open.
type lazy[T any] struct {
	mu   sync.Mutex
	open func() (T, error)
	h    T
	ok   bool
}

func (l *lazy[T]) use() (T, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.ok {
		return l.h, nil
	}
	h, err := l.open()
	if err != nil {
		var zero T
		return zero, err
	}
	l.h, l.ok = h, true
	return h, nil
}

func (l *lazy[T]) get() (T, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.h, l.ok
}

// linksView is core.Links on the namespace's rtnetlink reader.
type linksView struct{ s *System }

func (v linksView) Links() ([]probes.Link, error) {
	l, err := v.s.links.use()
	if err != nil {
		return nil, err
	}
	return l.Links()
}

func (v linksView) DefaultRouteLinks() ([]int, error) {
	l, err := v.s.links.use()
	if err != nil {
		return nil, err
	}
	return l.DefaultRouteLinks()
}

func (v linksView) Subscribe(ctx context.Context) (<-chan probes.LinkEvent, error) {
	l, err := v.s.links.use()
	if err != nil {
		return nil, err
	}
	return l.Subscribe(ctx)
}

func (v linksView) Routes() ([]probes.RouteInfo, error) {
	l, err := v.s.links.use()
	if err != nil {
		return nil, err
	}
	return l.Routes()
}

func (v linksView) LinkStats() ([]probes.LinkStat, error) {
	l, err := v.s.links.use()
	if err != nil {
		return nil, err
	}
	return l.LinkStats()
}

// bouncer is netfix.Links on a netlink handle in the namespace.
type bouncer struct{ s *System }

func (b bouncer) h() (*netlink.Handle, error) { return b.s.nl.use() }

func (b bouncer) LinkByName(name string) (netlink.Link, error) {
	h, err := b.h()
	if err != nil {
		return nil, err
	}
	return h.LinkByName(name)
}

func (b bouncer) LinkSetDown(l netlink.Link) error {
	h, err := b.h()
	if err != nil {
		return err
	}
	return h.LinkSetDown(l)
}

func (b bouncer) LinkSetUp(l netlink.Link) error {
	h, err := b.h()
	if err != nil {
		return err
	}
	return h.LinkSetUp(l)
}

func (b bouncer) AddrList(l netlink.Link, family int) ([]netlink.Addr, error) {
	h, err := b.h()
	if err != nil {
		return nil, err
	}
	return h.AddrList(l, family)
}

func (b bouncer) AddrAdd(l netlink.Link, a *netlink.Addr) error {
	h, err := b.h()
	if err != nil {
		return err
	}
	return h.AddrAdd(l, a)
}

func (b bouncer) RouteListFiltered(family int, filter *netlink.Route, mask uint64) ([]netlink.Route, error) {
	h, err := b.h()
	if err != nil {
		return nil, err
	}
	return h.RouteListFiltered(family, filter, mask)
}

func (b bouncer) RouteAdd(r *netlink.Route) error {
	h, err := b.h()
	if err != nil {
		return err
	}
	return h.RouteAdd(r)
}

// prober is core.Prober: probes made from the namespace.
type prober struct{ s *System }

func (p prober) Tunnel(ctx context.Context, target string, timeout time.Duration) probes.ProbeResult {
	var r probes.ProbeResult
	err := p.s.do(func() error { r = probes.ProbeTunnel(ctx, target, timeout); return nil })
	if err != nil {
		return probes.ProbeResult{Class: "error", Err: err}
	}
	return r
}

func (p prober) MQTT(ctx context.Context, ns probes.Netns, cfg probes.MQTTConfig) (probes.Result, error) {
	if ns.Path == "" {
		ns.Path = p.s.nsPath
	}
	return probes.MQTT(ctx, ns, cfg)
}

func (p prober) Lookup(ctx context.Context, name string) ([]netip.Addr, error) {
	if p.s.nsPath == "" {
		return net.DefaultResolver.LookupNetIP(ctx, "ip", name)
	}
	return probes.Netns{Path: p.s.nsPath}.Resolver().LookupNetIP(ctx, "ip", name)
}

// clock is core.Clock on the kernel's clock.
type clock struct{ c *probes.Clock }

func (c clock) Now() time.Time                      { return time.Now() }
func (c clock) Status() (probes.ClockStatus, error) { return c.c.Check() }
