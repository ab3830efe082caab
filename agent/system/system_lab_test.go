package system_test

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/vishvananda/netlink"

	"github.com/edgeheal/edgeheal/agent/core"
	"github.com/edgeheal/edgeheal/agent/system"
	"github.com/edgeheal/edgeheal/internal/testsupport"
	"github.com/edgeheal/edgeheal/internal/testsupport/wgpair"
	"github.com/edgeheal/edgeheal/netfix"
	"github.com/edgeheal/edgeheal/probes"
)

// The real backend, tested in anonymous network namespaces.

func openIn(t *testing.T, ns *wgpair.NS) core.OS {
	t.Helper()
	sys, err := system.OpenAt(ns.NsHandle())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := sys.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return sys.OS()
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
	testsupport.RequireRoot(t, "network namespaces and veth links")
	ns := wgpair.NewNS(t)
	addVeth(t, ns.Links, "up0", "up0p")
	nic := openIn(t, ns).NIC
	ctx := context.Background()

	before, err := nic.FeaturesWithState("up0")
	if err != nil {
		t.Fatal(err)
	}
	// A veth starts with ip-generic on and ipv4 fixed off (docs/lab.md, "ethtool").
	if st := before["tx-checksum-ip-generic"]; !st.Active || !st.Changeable {
		t.Fatalf("a fresh veth's tx-checksum-ip-generic = %+v, want on and changeable", st)
	}
	if st := before["tx-checksum-ipv4"]; st.Active || st.Changeable {
		t.Fatalf("a fresh veth's tx-checksum-ipv4 = %+v, want off and fixed", st)
	}
	want := netfix.OffloadWant{TxChecksumOff: true, Features: map[string]string{"gro": "on"}}
	got, _, err := netfix.EnsureOffload(ctx, nic, "up0", want, false)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(netfix.Result{Action: "offload-off", Target: "up0", Changed: true, Changes: []string{
		"rx-gro: off -> on", "tx-checksum-ip-generic: on -> off", "tx-checksum-sctp: on -> off",
	}}, got); diff != "" {
		t.Errorf("first run (-want +got):\n%s", diff)
	}
	again, _, err := netfix.EnsureOffload(ctx, nic, "up0", want, false)
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

func TestLabMissingThingsMatchErrNotExist(t *testing.T) {
	testsupport.RequireRoot(t, "network namespaces")
	os1 := openIn(t, wgpair.NewNS(t))
	if _, err := os1.NIC.FeaturesWithState("nosuch0"); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("features of a missing link: %v, want os.ErrNotExist", err)
	}
	if _, _, err := netfix.EnsureOffload(context.Background(), os1.NIC, "nosuch0", netfix.OffloadWant{TxChecksumOff: true}, false); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("EnsureOffload of a missing link: %v, want os.ErrNotExist", err)
	}
	if _, err := netfix.ForceBounce(context.Background(), os1.Bounce, "nosuch0", false); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("bouncing a missing link: %v, want os.ErrNotExist", err)
	}
	if _, err := os1.WireGuard.Device("nosuchwg0"); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a missing WireGuard device: %v, want os.ErrNotExist", err)
	}
}

// Every handle is bound to the namespace the backend was opened for,
// whatever thread uses it later.
func TestLabTheBackendSeesOnlyItsNamespace(t *testing.T) {
	testsupport.RequireRoot(t, "network namespaces and veth links")
	a, b := wgpair.NewNS(t), wgpair.NewNS(t)
	addVeth(t, a.Links, "onlya0", "onlya0p")
	inA, inB := openIn(t, a), openIn(t, b)
	if _, err := inA.NIC.FeaturesWithState("onlya0"); err != nil {
		t.Errorf("A's backend cannot read A's link: %v", err)
	}
	if _, err := inB.NIC.FeaturesWithState("onlya0"); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("B's backend sees A's link: %v", err)
	}
	links, err := inB.Links.Links()
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range links {
		if strings.HasPrefix(l.Name, "onlya0") {
			t.Errorf("B's backend lists A's link %s", l.Name)
		}
	}
}

// The prober's sockets are made in the backend's namespace: a probe
// through a WireGuard pair from A's backend reaches B.
func TestLabProbesLeaveFromTheBackendsNamespace(t *testing.T) {
	testsupport.RequireRoot(t, "wireguard-go devices in network namespaces")
	p := wgpair.NewPair(t)
	inA := openIn(t, p.A.NS)
	r := inA.Net.Tunnel(context.Background(), "icmp://"+p.B.Underlay.String(), 2*time.Second)
	if r.Err != nil || !r.OK {
		t.Errorf("ICMP from A to B's underlay: %+v, want an answer", r)
	}
	host := openIn(t, wgpair.NewNS(t))
	r = host.Net.Tunnel(context.Background(), "icmp://"+p.B.Underlay.String(), 500*time.Millisecond)
	if r.OK {
		t.Errorf("a namespace without the pair reached B: %+v", r)
	}
	// The clock reads the kernel's status.
	if _, err := inA.Clock.Status(); err != nil {
		t.Errorf("clock status: %v", err)
	}
	if _, err := probes.ReadPeers(inA.WireGuard, p.A.Dev.Name); err != nil {
		t.Errorf("reading A's device through the backend: %v", err)
	}
}
