package probes

import (
	"context"
	"net"
	"runtime"
	"slices"
	"testing"
	"time"

	"github.com/edgeheal/edgeheal/internal/testsupport"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
)

// labNamespace creates an anonymous network namespace and a netlink handle
// in it, both closed in t.Cleanup (the namespace goes with its last handle).
func labNamespace(t *testing.T) (netns.NsHandle, *netlink.Handle) {
	t.Helper()
	testsupport.RequireRoot(t, "network namespaces")
	runtime.LockOSThread()
	orig, err := netns.Get()
	if err != nil {
		runtime.UnlockOSThread()
		t.Fatal(err)
	}
	ns, err := netns.New()
	if serr := netns.Set(orig); serr != nil {
		t.Fatalf("returning to the original namespace: %v", serr) // the thread stays locked: discarded
	}
	orig.Close()
	runtime.UnlockOSThread()
	if err != nil {
		t.Fatal(err)
	}
	h, err := netlink.NewHandleAt(ns)
	if err != nil {
		ns.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		h.Close()
		ns.Close()
	})
	return ns, h
}

func addVeth(t *testing.T, h *netlink.Handle, name, peer string) netlink.Link {
	t.Helper()
	la := netlink.NewLinkAttrs()
	la.Name = name
	if err := h.LinkAdd(&netlink.Veth{LinkAttrs: la, PeerName: peer}); err != nil {
		t.Fatalf("adding veth %s: %v", name, err)
	}
	l, err := h.LinkByName(name)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// next waits (bounded) for an event that ok accepts.
func next(t *testing.T, ch <-chan LinkEvent, ok func(LinkEvent) bool) LinkEvent {
	t.Helper()
	timeout := time.After(5 * time.Second)
	for {
		select {
		case ev, open := <-ch:
			if !open {
				t.Fatal("subscription channel closed")
			}
			if ev.Err != nil {
				t.Fatalf("subscription error: %v", ev.Err)
			}
			if ok(ev) {
				return ev
			}
		case <-timeout:
			t.Fatal("no matching event within 5s")
		}
	}
}

func TestLabNetlinkListsLinksAndDefaultRoutesAndSubscribes(t *testing.T) {
	ns, h := labNamespace(t)
	nl, err := NewNetlinkAt(ns)
	if err != nil {
		t.Fatal(err)
	}
	defer nl.Close()

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	events, err := nl.Subscribe(ctx)
	if err != nil {
		t.Fatal(err)
	}

	up := addVeth(t, h, "up0", "up0p")
	ev := next(t, events, func(ev LinkEvent) bool { return ev.Link.Name == "up0" && !ev.Deleted })
	if ev.Link.Index != up.Attrs().Index {
		t.Errorf("event index %d, want %d", ev.Link.Index, up.Attrs().Index)
	}

	if err := h.LinkSetUp(up); err != nil {
		t.Fatal(err)
	}
	next(t, events, func(ev LinkEvent) bool { return ev.Link.Name == "up0" && ev.Link.Up })
	if err := h.AddrAdd(up, &netlink.Addr{IPNet: &net.IPNet{IP: net.IPv4(10, 9, 0, 1), Mask: net.CIDRMask(24, 32)}}); err != nil {
		t.Fatal(err)
	}
	peer, _ := h.LinkByName("up0p")
	if err := h.LinkSetUp(peer); err != nil {
		t.Fatal(err)
	}
	if err := h.RouteAdd(&netlink.Route{LinkIndex: up.Attrs().Index, Gw: net.IPv4(10, 9, 0, 2)}); err != nil {
		t.Fatal(err)
	}
	next(t, events, func(ev LinkEvent) bool { return ev.DefaultRoute })

	links, err := nl.Links()
	if err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(links, func(l Link) bool { return l.Name == "up0" && l.Up }) {
		t.Errorf("Links() = %+v, want up0 up", links)
	}
	dr, err := nl.DefaultRouteLinks()
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(dr, []int{up.Attrs().Index}) {
		t.Errorf("DefaultRouteLinks() = %v, want [%d]", dr, up.Attrs().Index)
	}

	if err := h.LinkDel(up); err != nil {
		t.Fatal(err)
	}
	next(t, events, func(ev LinkEvent) bool { return ev.Link.Name == "up0" && ev.Deleted })

	// Cancelling ends the subscription: the channel is closed.
	cancel()
	deadline := time.After(5 * time.Second)
	for open := true; open; {
		select {
		case _, open = <-events:
		case <-deadline:
			t.Fatal("channel not closed 5s after cancel")
		}
	}
}

// Links carries each link's kind as the kernel says it: the loopback, a
// veth, a bridge are told apart, so that a pattern
// can pass over what is no uplink.
func TestLabNetlinkTellsLinkKinds(t *testing.T) {
	ns, h := labNamespace(t)
	addVeth(t, h, "veth-k0", "veth-k1")
	la := netlink.NewLinkAttrs()
	la.Name = "br-k"
	if err := h.LinkAdd(&netlink.Bridge{LinkAttrs: la}); err != nil {
		t.Fatal(err)
	}
	nl, err := NewNetlinkAt(ns)
	if err != nil {
		t.Fatal(err)
	}
	defer nl.Close()
	links, err := nl.Links()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, l := range links {
		got[l.Name] = l.Kind
	}
	for name, kind := range map[string]string{"lo": "loopback", "veth-k0": "veth", "br-k": "bridge"} {
		if got[name] != kind {
			t.Errorf("%s: kind %q, want %q (all: %v)", name, got[name], kind, got)
		}
	}
}
