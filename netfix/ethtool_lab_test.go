package netfix_test

import (
	"context"
	"errors"
	"os"
	"runtime"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"

	"github.com/edgeheal/edgeheal/netfix"
)

// labNamespace creates an anonymous network namespace (removed when its
// last handle closes, in t.Cleanup) and a netlink handle inside it.
func labNamespace(t *testing.T) (netns.NsHandle, *netlink.Handle) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: sudo env PATH=$PATH go test -count=1 ./netfix -run TestLab")
	}
	runtime.LockOSThread()
	orig, err := netns.Get()
	if err != nil {
		runtime.UnlockOSThread()
		t.Fatal(err)
	}
	ns, err := netns.New() // also moves this thread into it
	if serr := netns.Set(orig); serr != nil {
		t.Fatalf("returning to the original namespace: %v", serr) // thread stays locked: discarded
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

func addVeth(t *testing.T, h *netlink.Handle, name, peer string) {
	t.Helper()
	la := netlink.NewLinkAttrs()
	la.Name = name
	if err := h.LinkAdd(&netlink.Veth{LinkAttrs: la, PeerName: peer}); err != nil {
		t.Fatalf("adding veth %s: %v", name, err)
	}
}

func TestLabEthtoolTurnsTxChecksumOffOnAVeth(t *testing.T) {
	ns, h := labNamespace(t)
	addVeth(t, h, "up0", "up0p")
	nic, err := netfix.NewEthtoolAt(ns)
	if err != nil {
		t.Fatal(err)
	}
	defer nic.Close()
	ctx := context.Background()

	before, err := nic.FeaturesWithState("up0")
	if err != nil {
		t.Fatal(err)
	}
	// A veth starts with ip-generic on and ipv4 fixed off (LAB-NOTES, kernel 6.18).
	if st := before["tx-checksum-ip-generic"]; !st.Active || !st.Changeable {
		t.Fatalf("a fresh veth's tx-checksum-ip-generic = %+v, want on and changeable", st)
	}
	if st := before["tx-checksum-ipv4"]; st.Active || st.Changeable {
		t.Fatalf("a fresh veth's tx-checksum-ipv4 = %+v, want off and fixed", st)
	}

	got, err := netfix.EnsureTxChecksumOff(ctx, nic, "up0", map[string]string{"gro": "on"}, false)
	if err != nil {
		t.Fatal(err)
	}
	want := netfix.Result{Action: "offload-off", Target: "up0", Changed: true, Changes: []string{
		"rx-gro: off -> on",
		"tx-checksum-ip-generic: on -> off",
		"tx-checksum-sctp: on -> off",
	}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("first run (-want +got):\n%s", diff)
	}

	again, err := netfix.EnsureTxChecksumOff(ctx, nic, "up0", map[string]string{"gro": "on"}, false)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(netfix.Result{Action: "offload-off", Target: "up0"}, again); diff != "" {
		t.Errorf("second run (-want +got):\n%s", diff)
	}

	// The peer, in the same namespace, was not touched.
	peer, err := nic.FeaturesWithState("up0p")
	if err != nil {
		t.Fatal(err)
	}
	if !peer["tx-checksum-ip-generic"].Active {
		t.Errorf("the peer's tx-checksum-ip-generic was turned off too")
	}
}

func TestLabEthtoolMissingLinkMatchesErrNotExist(t *testing.T) {
	ns, _ := labNamespace(t)
	nic, err := netfix.NewEthtoolAt(ns)
	if err != nil {
		t.Fatal(err)
	}
	defer nic.Close()
	_, err = nic.FeaturesWithState("nosuch0")
	if !errors.Is(err, os.ErrNotExist) {
		t.Errorf("FeaturesWithState of a missing link: %v, want an error matching os.ErrNotExist", err)
	}
	_, err = netfix.EnsureTxChecksumOff(context.Background(), nic, "nosuch0", nil, false)
	if !errors.Is(err, os.ErrNotExist) {
		t.Errorf("EnsureTxChecksumOff of a missing link: %v, want an error matching os.ErrNotExist", err)
	}
}

func TestLabEthtoolIsBoundToItsNamespace(t *testing.T) {
	ns, h := labNamespace(t)
	addVeth(t, h, "up0", "up0p")
	host, err := netfix.NewEthtool() // the test's own namespace, where up0 does not exist
	if err != nil {
		t.Fatal(err)
	}
	defer host.Close()
	if _, err := host.FeaturesWithState("up0"); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a handle made outside the namespace sees up0: err = %v", err)
	}
	in, err := netfix.NewEthtoolAt(ns)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	if _, err := in.FeaturesWithState("up0"); err != nil {
		t.Errorf("a handle made inside the namespace: %v", err)
	}
}

// BenchmarkLabEthtoolFeaturesWithState measures one feature read of a veth
// (root: sudo go test ./netfix -run XXX -bench LabEthtool).
func BenchmarkLabEthtoolFeaturesWithState(b *testing.B) {
	if os.Geteuid() != 0 {
		b.Skip("needs root")
	}
	runtime.LockOSThread()
	orig, err := netns.Get()
	if err != nil {
		b.Fatal(err)
	}
	ns, err := netns.New()
	if serr := netns.Set(orig); serr != nil {
		b.Fatal(serr) // thread stays locked: discarded
	}
	orig.Close()
	runtime.UnlockOSThread()
	if err != nil {
		b.Fatal(err)
	}
	defer ns.Close()
	h, err := netlink.NewHandleAt(ns)
	if err != nil {
		b.Fatal(err)
	}
	defer h.Close()
	la := netlink.NewLinkAttrs()
	la.Name = "bn0"
	if err := h.LinkAdd(&netlink.Veth{LinkAttrs: la, PeerName: "bn0p"}); err != nil {
		b.Fatal(err)
	}
	nic, err := netfix.NewEthtoolAt(ns)
	if err != nil {
		b.Fatal(err)
	}
	defer nic.Close()
	for b.Loop() {
		if _, err := nic.FeaturesWithState("bn0"); err != nil {
			b.Fatal(err)
		}
	}
}
