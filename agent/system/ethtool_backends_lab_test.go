package system

import (
	"errors"
	"os"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/vishvananda/netlink"

	"github.com/edgeheal/edgeheal/agent/system/ethnl"
	"github.com/edgeheal/edgeheal/internal/testsupport"
	"github.com/edgeheal/edgeheal/internal/testsupport/wgpair"
	"github.com/edgeheal/edgeheal/netfix"
	"github.com/edgeheal/edgeheal/probes"
)

// The two ethtool backends side by side on one veth: ethtool netlink
// (chosen where the kernel has it) and the SIOCETHTOOL ioctl (the
// fallback), each in a backend opened for the same anonymous namespace.

type backend string

const (
	viaNetlink backend = "netlink"
	viaIoctl   backend = "ioctl"
)

// openBackend opens the OS backend for ns with the ethtool socket of b;
// it is closed when the test ends.
func openBackend(tb testing.TB, ns *wgpair.NS, b backend) *System {
	tb.Helper()
	s, err := OpenAt(ns.NsHandle())
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		if err := s.Close(); err != nil {
			tb.Errorf("Close: %v", err)
		}
	})
	if b == viaIoctl {
		s.eth.open = func() (*ethtoolSocket, error) {
			var e *ethtoolSocket
			err := s.do(func() (err error) { e, err = openEthtoolIoctl(); return err })
			return e, err
		}
	}
	sock, err := s.eth.use()
	if err != nil {
		tb.Fatal(err)
	}
	if got := sock.nl != nil; got != (b == viaNetlink) {
		tb.Fatalf("asked for the %s backend, got netlink=%v", b, got)
	}
	return s
}

// requireEthtoolNetlink skips on a kernel without the ethtool family
// (where the ioctl is the only backend, and the one the default choice
// makes).
func requireEthtoolNetlink(tb testing.TB, ns *wgpair.NS) {
	tb.Helper()
	err := probes.DoIn(ns.NsHandle(), func() error {
		c, err := ethnl.Dial()
		if err == nil {
			c.Close()
		}
		return err
	})
	if errors.Is(err, errors.ErrUnsupported) {
		tb.Skipf("this kernel has no ethtool netlink family: %v", err)
	}
	if err != nil {
		tb.Fatal(err)
	}
}

func labVeth(tb testing.TB, ns *wgpair.NS, name string) {
	tb.Helper()
	la := netlink.NewLinkAttrs()
	la.Name = name
	if err := ns.Links.LinkAdd(&netlink.Veth{LinkAttrs: la, PeerName: name + "p"}); err != nil {
		tb.Fatalf("adding veth %s: %v", name, err)
	}
}

func TestLabEthtoolBackendsAgree(t *testing.T) {
	testsupport.RequireRoot(t, "network namespaces and veth links")
	ns := wgpair.NewNS(t)
	requireEthtoolNetlink(t, ns)
	labVeth(t, ns, "up0")
	// The default choice on a kernel with the family is netlink.
	var sock *ethtoolSocket
	if err := probes.DoIn(ns.NsHandle(), func() (err error) { sock, err = openEthtool(); return err }); err != nil {
		t.Fatal(err)
	}
	if sock.nl == nil {
		t.Errorf("the default backend here is the ioctl, want netlink")
	}
	sock.Close()
	nl := openBackend(t, ns, viaNetlink).OS().NIC
	ioctl := openBackend(t, ns, viaIoctl).OS().NIC

	agree := func(when string) map[string]netfix.FeatureState {
		t.Helper()
		a, err := nl.FeaturesWithState("up0")
		if err != nil {
			t.Fatalf("%s: netlink: %v", when, err)
		}
		b, err := ioctl.FeaturesWithState("up0")
		if err != nil {
			t.Fatalf("%s: ioctl: %v", when, err)
		}
		if diff := cmp.Diff(b, a); diff != "" {
			t.Errorf("%s: the backends differ (-ioctl +netlink):\n%s", when, diff)
		}
		if len(a) < 50 {
			t.Errorf("%s: only %d features", when, len(a))
		}
		return a
	}
	before := agree("a fresh veth")
	if st := before["tx-checksum-ip-generic"]; !st.Active || !st.Changeable {
		t.Fatalf("a fresh veth's tx-checksum-ip-generic = %+v, want on and changeable", st)
	}

	if err := nl.Change("up0", map[string]bool{"tx-checksum-ip-generic": false}); err != nil {
		t.Fatal(err)
	}
	if st := agree("turned off through netlink")["tx-checksum-ip-generic"]; st.Active || st.Requested {
		t.Errorf("tx-checksum-ip-generic after turning it off through netlink: %+v", st)
	}
	if err := ioctl.Change("up0", map[string]bool{"tx-checksum-ip-generic": true}); err != nil {
		t.Fatal(err)
	}
	if st := agree("turned on through the ioctl")["tx-checksum-ip-generic"]; !st.Active {
		t.Errorf("tx-checksum-ip-generic after turning it on through the ioctl: %+v", st)
	}

	for b, nic := range map[backend]netfix.NIC{viaNetlink: nl, viaIoctl: ioctl} {
		if _, err := nic.FeaturesWithState("nosuch0"); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s: features of a missing link: %v, want os.ErrNotExist", b, err)
		}
		if err := nic.Change("nosuch0", map[string]bool{"tx-checksum-ip-generic": false}); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s: changing a missing link: %v, want os.ErrNotExist", b, err)
		}
	}
}

// BenchmarkLabEthtoolFix is the offload guard's fix of a re-plugged link
// through each backend: the veth is deleted and created again (offload
// on; not timed), then read, tx-checksum-ip-generic turned off, read back.
// Side by side, root:
//
//	sudo env PATH=$PATH go test -run '^$' -bench LabEthtoolFix -benchmem -benchtime 400x ./agent/system/
func BenchmarkLabEthtoolFix(b *testing.B) {
	testsupport.RequireRoot(b, "network namespaces and veth links")
	ns := wgpair.NewNS(b)
	requireEthtoolNetlink(b, ns)
	for _, via := range []backend{viaIoctl, viaNetlink} {
		b.Run(string(via), func(b *testing.B) {
			nic := openBackend(b, ns, via).OS().NIC
			labVeth(b, ns, "up0")
			b.ReportAllocs()
			for b.Loop() {
				b.StopTimer()
				replug(b, ns, "up0")
				b.StartTimer()
				fs, err := nic.FeaturesWithState("up0")
				if err != nil {
					b.Fatal(err)
				}
				if !fs["tx-checksum-ip-generic"].Active {
					b.Fatal("a re-plugged veth with tx-checksum-ip-generic off")
				}
				if err := nic.Change("up0", map[string]bool{"tx-checksum-ip-generic": false}); err != nil {
					b.Fatal(err)
				}
				after, err := nic.FeaturesWithState("up0")
				if err != nil {
					b.Fatal(err)
				}
				if after["tx-checksum-ip-generic"].Active {
					b.Fatal("tx-checksum-ip-generic still on after the fix")
				}
			}
			b.StopTimer()
			replug(b, ns, "") // remove it for the next backend
		})
	}
}

// replug deletes up0 and, unless name is "", creates it again.
func replug(tb testing.TB, ns *wgpair.NS, name string) {
	tb.Helper()
	l, err := ns.Links.LinkByName("up0")
	if err == nil {
		err = ns.Links.LinkDel(l)
	}
	if err != nil {
		tb.Fatalf("deleting up0: %v", err)
	}
	if name != "" {
		labVeth(tb, ns, name)
	}
}
