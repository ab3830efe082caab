package netfix_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/edgeheal/edgeheal/netfix"
)

// fakeLinks is one link as the kernel treats it on link down: IPv6
// addresses and every route through it disappear, IPv4 addresses stay; the
// kernel's own connected route comes back on up. It logs calls.
type fakeLinks struct {
	name   string
	addrs  []netlink.Addr
	routes []netlink.Route
	calls  []string
	upErr  error
	// upFailures: with upErr, only this many LinkSetUp calls fail (0: all).
	upFailures int
	down       bool
}

var _ netfix.Links = (*fakeLinks)(nil)

func (f *fakeLinks) link() netlink.Link {
	flags := net.FlagUp
	if f.down {
		flags = 0
	}
	return &netlink.Tuntap{LinkAttrs: netlink.LinkAttrs{Name: f.name, Index: 7, Flags: flags}}
}

func (f *fakeLinks) LinkByName(name string) (netlink.Link, error) {
	f.calls = append(f.calls, "LinkByName("+name+")")
	if name != f.name {
		return nil, netlink.LinkNotFoundError{}
	}
	return f.link(), nil
}

func (f *fakeLinks) LinkSetDown(netlink.Link) error {
	f.calls = append(f.calls, "LinkSetDown")
	f.down = true
	var kept []netlink.Addr
	for _, a := range f.addrs {
		if a.IP.To4() != nil {
			kept = append(kept, a)
		}
	}
	f.addrs, f.routes = kept, nil
	return nil
}

func (f *fakeLinks) LinkSetUp(netlink.Link) error {
	f.calls = append(f.calls, "LinkSetUp")
	if f.upErr != nil {
		if f.upFailures == 0 {
			return f.upErr
		}
		f.upFailures--
		if f.upFailures == 0 {
			f.upErr = nil
		}
		return unix.EBUSY
	}
	f.down = false
	for _, a := range f.addrs {
		if a.IP.To4() != nil {
			n := &net.IPNet{IP: a.IP.Mask(a.Mask), Mask: a.Mask}
			f.routes = append(f.routes, netlink.Route{LinkIndex: 7, Dst: n, Table: unix.RT_TABLE_MAIN, Protocol: unix.RTPROT_KERNEL, Type: unix.RTN_UNICAST})
		}
	}
	return nil
}

func (f *fakeLinks) AddrList(netlink.Link, int) ([]netlink.Addr, error) {
	f.calls = append(f.calls, "AddrList")
	return append([]netlink.Addr(nil), f.addrs...), nil
}

func (f *fakeLinks) AddrAdd(_ netlink.Link, a *netlink.Addr) error {
	f.calls = append(f.calls, "AddrAdd("+a.IPNet.String()+")")
	f.addrs = append(f.addrs, *a)
	return nil
}

func (f *fakeLinks) RouteListFiltered(int, *netlink.Route, uint64) ([]netlink.Route, error) {
	f.calls = append(f.calls, "RouteListFiltered")
	return append([]netlink.Route(nil), f.routes...), nil
}

func (f *fakeLinks) RouteAdd(r *netlink.Route) error {
	f.calls = append(f.calls, fmt.Sprintf("RouteAdd(%s table %d)", r.Dst, r.Table))
	f.routes = append(f.routes, *r)
	return nil
}

func addr(cidr string) netlink.Addr {
	a, err := netlink.ParseAddr(cidr)
	if err != nil {
		panic(err)
	}
	return *a
}

func wgLink() *fakeLinks {
	f := &fakeLinks{name: "wg0", addrs: []netlink.Addr{addr("10.0.0.1/24"), addr("fd00::1/64"), addr("fe80::1/64")}}
	_, conn, _ := net.ParseCIDR("10.0.0.0/24")
	_, extra, _ := net.ParseCIDR("10.42.0.0/16")
	f.routes = []netlink.Route{
		{LinkIndex: 7, Dst: conn, Table: unix.RT_TABLE_MAIN, Protocol: unix.RTPROT_KERNEL, Type: unix.RTN_UNICAST},
		{LinkIndex: 7, Dst: extra, Table: unix.RT_TABLE_MAIN, Protocol: unix.RTPROT_STATIC, Type: unix.RTN_UNICAST},
	}
	return f
}

func TestForceBounce(t *testing.T) {
	f := wgLink()
	r, err := netfix.ForceBounce(context.Background(), f, "wg0", false)
	if err != nil {
		t.Fatalf("ForceBounce: %v", err)
	}
	want := netfix.Result{Action: "bounce", Target: "wg0", Changed: true, Changes: []string{
		"link down", "link up", "restored address fd00::1/64", "restored route 10.42.0.0/16 table 254",
	}}
	if diff := cmp.Diff(want, r); diff != "" {
		t.Errorf("Result (-want +got):\n%s", diff)
	}
	// The kernel's connected route and the link-local address are left to
	// the kernel; only what was lost is added back.
	wantCalls := []string{
		"LinkByName(wg0)", "AddrList", "RouteListFiltered",
		"LinkSetDown", "LinkSetUp", "AddrList", "RouteListFiltered",
		"AddrAdd(fd00::1/64)", "RouteAdd(10.42.0.0/16 table 254)",
	}
	if diff := cmp.Diff(wantCalls, f.calls); diff != "" {
		t.Errorf("calls (-want +got):\n%s", diff)
	}
}

func TestForceBounceDryRunAndErrors(t *testing.T) {
	ctx := context.Background()
	t.Run("dry run reads and reports without touching the link", func(t *testing.T) {
		f := wgLink()
		r, err := netfix.ForceBounce(ctx, f, "wg0", true)
		if err != nil || !r.DryRun || r.Changed {
			t.Fatalf("ForceBounce = %+v, %v; want a dry run", r, err)
		}
		if diff := cmp.Diff([]string{"LinkByName(wg0)", "AddrList", "RouteListFiltered"}, f.calls); diff != "" {
			t.Errorf("calls (-want +got):\n%s", diff)
		}
	})
	t.Run("a missing link matches os.ErrNotExist", func(t *testing.T) {
		if _, err := netfix.ForceBounce(ctx, wgLink(), "wg9", false); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("err = %v, want os.ErrNotExist", err)
		}
	})
	t.Run("a link that will not come up is retried until the deadline, then left down: an error and a change", func(t *testing.T) {
		f := wgLink()
		f.upErr = unix.EPERM
		dctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
		defer cancel()
		r, err := netfix.ForceBounce(dctx, f, "wg0", false)
		if !errors.Is(err, unix.EPERM) || !errors.Is(err, netfix.ErrLeftDown) || !r.Changed {
			t.Fatalf("ForceBounce = %+v, %v; want EPERM and ErrLeftDown after a change", r, err)
		}
		if n := countCalls(f.calls, "LinkSetUp"); n < 3 {
			t.Errorf("link up tried %d times in 500 ms, want it retried", n)
		}
	})
	t.Run("a link that comes up at a later try is a bounce that worked", func(t *testing.T) {
		f := wgLink()
		f.upErr, f.upFailures = unix.EBUSY, 2
		r, err := netfix.ForceBounce(ctx, f, "wg0", false)
		if err != nil || !r.Changed || r.Changes[1] != "link up (at try 3)" {
			t.Fatalf("ForceBounce = %+v, %v; want the link up at the third try", r, err)
		}
	})
}

func countCalls(calls []string, name string) int {
	n := 0
	for _, c := range calls {
		if c == name {
			n++
		}
	}
	return n
}

func TestEnsureLinkUp(t *testing.T) {
	ctx := context.Background()
	f := wgLink()
	if r, err := netfix.EnsureLinkUp(ctx, f, "wg0"); err != nil || r.Changed {
		t.Errorf("on an up link: %+v, %v; want nothing to do", r, err)
	}
	f.down = true
	f.upErr, f.upFailures = unix.EBUSY, 1
	if _, err := netfix.EnsureLinkUp(ctx, f, "wg0"); !errors.Is(err, netfix.ErrLeftDown) {
		t.Errorf("a failed link up: %v, want ErrLeftDown", err)
	}
	if r, err := netfix.EnsureLinkUp(ctx, f, "wg0"); err != nil || !r.Changed {
		t.Errorf("the next try: %+v, %v; want the link up", r, err)
	}
}
