package ethnl

import (
	"errors"
	"os"
	"slices"
	"testing"

	"github.com/vishvananda/netlink"

	"github.com/edgeheal/edgeheal/internal/testsupport"
	"github.com/edgeheal/edgeheal/internal/testsupport/wgpair"
	"github.com/edgeheal/edgeheal/probes"
)

// The client against the kernel, on veths in anonymous network namespaces.

// labConn returns a Conn made inside a new anonymous namespace, and the
// namespace. Both go when the test ends.
func labConn(tb testing.TB) (*Conn, *wgpair.NS) {
	tb.Helper()
	testsupport.RequireRoot(tb, "network namespaces and veth links")
	ns := wgpair.NewNS(tb)
	var c *Conn
	if err := probes.DoIn(ns.NsHandle(), func() (err error) { c, err = Dial(); return err }); err != nil {
		tb.Fatalf("dialing in the namespace: %v", err)
	}
	tb.Cleanup(func() { c.Close() })
	return c, ns
}

func addVeth(tb testing.TB, ns *wgpair.NS, name string) int {
	tb.Helper()
	la := netlink.NewLinkAttrs()
	la.Name = name
	if err := ns.Links.LinkAdd(&netlink.Veth{LinkAttrs: la, PeerName: name + "p"}); err != nil {
		tb.Fatalf("adding veth %s: %v", name, err)
	}
	l, err := ns.Links.LinkByName(name)
	if err != nil {
		tb.Fatal(err)
	}
	return l.Attrs().Index
}

func delLink(tb testing.TB, ns *wgpair.NS, name string) {
	tb.Helper()
	l, err := ns.Links.LinkByName(name)
	if err == nil {
		err = ns.Links.LinkDel(l)
	}
	if err != nil {
		tb.Fatalf("deleting %s: %v", name, err)
	}
}

func TestLabFeaturesOfAFreshVeth(t *testing.T) {
	c, ns := labConn(t)
	addVeth(t, ns, "nl0")
	fs, err := c.Features("nl0")
	if err != nil {
		t.Fatal(err)
	}
	// docs/lab.md, "ethtool": ip-generic on and changeable, ipv4 off and fixed.
	if got, want := fs["tx-checksum-ip-generic"], (State{Available: true, Requested: true, Active: true}); got != want {
		t.Errorf("tx-checksum-ip-generic = %+v, want %+v", got, want)
	}
	if got, want := fs["tx-checksum-ipv4"], (State{}); got != want {
		t.Errorf("tx-checksum-ipv4 = %+v, want %+v", got, want)
	}
	if !fs["vlan-challenged"].NeverChange {
		t.Errorf("vlan-challenged is not NETIF_F_NEVER_CHANGE: %+v", fs["vlan-challenged"])
	}
	if _, ok := fs[""]; ok {
		t.Errorf("an unnamed bit made it into the map")
	}
	if len(fs) < 50 {
		t.Errorf("only %d features; the kernel names about 60", len(fs))
	}
}

func TestLabChangeSetsOnlyTheNamedFeatures(t *testing.T) {
	c, ns := labConn(t)
	addVeth(t, ns, "nl0")
	before, err := c.Features("nl0")
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Change("nl0", map[string]bool{"tx-checksum-ip-generic": false, "rx-gro": true}); err != nil {
		t.Fatal(err)
	}
	after, err := c.Features("nl0")
	if err != nil {
		t.Fatal(err)
	}
	if st := after["tx-checksum-ip-generic"]; st.Active || st.Requested {
		t.Errorf("tx-checksum-ip-generic after turning it off: %+v", st)
	}
	if st := after["rx-gro"]; !st.Active || !st.Requested {
		t.Errorf("rx-gro after turning it on: %+v", st)
	}
	// Nothing else was asked for: every other request stands. (Without a
	// mask, a verbose bitset would have cleared every other wanted bit.)
	for n, st := range before {
		if n == "tx-checksum-ip-generic" || n == "rx-gro" {
			continue
		}
		if after[n].Requested != st.Requested {
			t.Errorf("%s: requested %v -> %v, not asked to change", n, st.Requested, after[n].Requested)
		}
	}
	// The peer is untouched.
	peer, err := c.Features("nl0p")
	if err != nil {
		t.Fatal(err)
	}
	if !peer["tx-checksum-ip-generic"].Active {
		t.Errorf("the peer's tx-checksum-ip-generic went off too")
	}
}

func TestLabAFixedFeatureIsAcceptedAndNotApplied(t *testing.T) {
	c, ns := labConn(t)
	addVeth(t, ns, "nl0")
	if err := c.Change("nl0", map[string]bool{"tx-checksum-ipv4": true}); err != nil {
		t.Fatalf("changing a fixed feature: %v, want nil (the kernel accepts and ignores it)", err)
	}
	fs, err := c.Features("nl0")
	if err != nil {
		t.Fatal(err)
	}
	if fs["tx-checksum-ipv4"].Active {
		t.Errorf("a fixed feature went on")
	}
}

func TestLabErrors(t *testing.T) {
	c, ns := labConn(t)
	addVeth(t, ns, "nl0")
	if _, err := c.Features("nosuch0"); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("features of a missing device: %v, want os.ErrNotExist", err)
	}
	if err := c.Change("nosuch0", map[string]bool{"rx-gro": true}); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("changing a missing device: %v, want os.ErrNotExist", err)
	}
	err := c.Change("nl0", map[string]bool{"tx-checksumming": false, "rx-gro": true, "tx-nosuch": true})
	if !errors.Is(err, ErrUnknownFeature) || errors.Is(err, os.ErrNotExist) {
		t.Errorf("changing unknown features: %v, want ErrUnknownFeature and not os.ErrNotExist", err)
	}
	if want := `ethnl: changing features of nl0: no feature named "tx-checksumming", "tx-nosuch"`; err == nil || err.Error() != want {
		t.Errorf("the error says %q, want %q", err, want)
	}
	fs, ferr := c.Features("nl0")
	if ferr != nil {
		t.Fatal(ferr)
	}
	if fs["rx-gro"].Requested {
		t.Errorf("a refused request changed rx-gro anyway")
	}
}

// A name's table is kept while the name belongs to the same device, and
// read again for a device re-created under the same name.
func TestLabTheNameTableFollowsTheDevice(t *testing.T) {
	c, ns := labConn(t)
	first := addVeth(t, ns, "nl0")
	if _, err := c.Features("nl0"); err != nil {
		t.Fatal(err)
	}
	cached := func() uint32 {
		c.mu.Lock()
		defer c.mu.Unlock()
		return c.names["nl0"].ifindex
	}
	if got := cached(); got != uint32(first) {
		t.Fatalf("cached index %d, want %d", got, first)
	}
	delLink(t, ns, "nl0")
	if _, err := c.Features("nl0"); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("features of a deleted device: %v, want os.ErrNotExist", err)
	}
	if got := cached(); got != 0 {
		t.Errorf("the deleted device's table is still cached (index %d)", got)
	}
	second := addVeth(t, ns, "nl0")
	fs, err := c.Features("nl0")
	if err != nil {
		t.Fatal(err)
	}
	if got := cached(); got != uint32(second) || second == first {
		t.Errorf("cached index %d after re-creating nl0 as %d (was %d)", got, second, first)
	}
	if !fs["tx-checksum-ip-generic"].Active {
		t.Errorf("the re-created veth's tx-checksum-ip-generic is off")
	}
}

// The verbose form of the same reply (names in every reply) says the same
// as the compact one with the table.
func TestLabVerboseAndCompactAgree(t *testing.T) {
	c, ns := labConn(t)
	addVeth(t, ns, "nl0")
	if err := c.Change("nl0", map[string]bool{"tx-checksum-ip-generic": false}); err != nil {
		t.Fatal(err)
	}
	compact, err := c.Features("nl0")
	if err != nil {
		t.Fatal(err)
	}
	verbose, err := c.verboseFeatures("nl0")
	if err != nil {
		t.Fatal(err)
	}
	var differ []string
	for n := range compact {
		if compact[n] != verbose[n] {
			differ = append(differ, n)
		}
	}
	for n := range verbose {
		if _, ok := compact[n]; !ok {
			differ = append(differ, n)
		}
	}
	slices.Sort(differ)
	if len(differ) > 0 {
		t.Errorf("verbose and compact differ on %v", differ)
	}
}
