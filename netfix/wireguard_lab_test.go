package netfix_test

import (
	"context"
	"errors"
	"net"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/edgeheal/edgeheal/internal/testsupport"

	"github.com/google/go-cmp/cmp"
	"github.com/vishvananda/netlink"
	"golang.zx2c4.com/wireguard/wgctrl/wgtypes"

	"github.com/edgeheal/edgeheal/internal/testsupport/wgpair"
	"github.com/edgeheal/edgeheal/netfix"
)

// sameConfig is what must survive every action: everything but keepalive,
// counters and handshake time.
func sameConfig(t *testing.T, before, after wgtypes.Peer) {
	t.Helper()
	if after.PublicKey != before.PublicKey || after.PresharedKey != before.PresharedKey {
		t.Error("public or preshared key changed")
	}
	if after.Endpoint.String() != before.Endpoint.String() {
		t.Errorf("endpoint = %s, want %s", after.Endpoint, before.Endpoint)
	}
	if diff := cmp.Diff(before.AllowedIPs, after.AllowedIPs); diff != "" {
		t.Errorf("allowed IPs (-want +got):\n%s", diff)
	}
}

func TestLabEnsureKeepaliveChangesOnlyKeepalive(t *testing.T) {
	testsupport.RequireRoot(t, "wireguard-go devices in network namespaces")
	p := wgpair.NewPair(t)
	p.Ping(t, p.A, p.B, 10*time.Second) // a session, counters and a handshake to keep
	before := p.Peer(t, p.A)
	if before.PresharedKey == (wgtypes.Key{}) || before.LastHandshakeTime.IsZero() {
		t.Fatalf("setup: peer %+v has no PSK or handshake", before)
	}
	ctx := context.Background()

	r, err := netfix.EnsureKeepalive(ctx, p.Client, p.A.Dev.Name, nil, 20*time.Second, false)
	if err != nil {
		t.Fatalf("EnsureKeepalive: %v", err)
	}
	if !r.Changed || len(r.Changes) != 1 {
		t.Errorf("first call = %+v, want one change", r)
	}
	after := p.Peer(t, p.A)
	if after.PersistentKeepaliveInterval != 20*time.Second {
		t.Errorf("keepalive = %s, want 20s", after.PersistentKeepaliveInterval)
	}
	sameConfig(t, before, after)
	// UpdateOnly: the peer was not re-created, so its session history stays.
	if !after.LastHandshakeTime.Equal(before.LastHandshakeTime) || after.ReceiveBytes < before.ReceiveBytes {
		t.Errorf("handshake %s rx %d after, %s rx %d before: the peer was re-created",
			after.LastHandshakeTime, after.ReceiveBytes, before.LastHandshakeTime, before.ReceiveBytes)
	}

	r, err = netfix.EnsureKeepalive(ctx, p.Client, p.A.Dev.Name, nil, 20*time.Second, false)
	if err != nil || r.Changed || len(r.Changes) != 0 {
		t.Errorf("second call = %+v, %v; want no change", r, err)
	}

	_, err = netfix.EnsureKeepalive(ctx, p.Client, wgpair.Name("wgnone"), nil, 20*time.Second, false)
	if !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing interface: err = %v, want os.ErrNotExist", err)
	}
}

func TestLabForceHandshakeStartsAFreshHandshake(t *testing.T) {
	testsupport.RequireRoot(t, "wireguard-go devices in network namespaces")
	p := wgpair.NewPair(t)
	p.Ping(t, p.A, p.B, 10*time.Second)
	before := p.Peer(t, p.A)
	// Handshake timestamps are TAI64N rounded to ~16.8 ms: an initiation in
	// the same slot as the last one would be dropped as a replay.
	time.Sleep(50 * time.Millisecond)

	start := time.Now()
	r, err := netfix.ForceHandshake(context.Background(), p.Client, p.A.Dev.Name, p.B.PublicKey(), 0, false)
	if err != nil {
		t.Fatalf("ForceHandshake: %v", err)
	}
	if !r.Changed {
		t.Errorf("Result = %+v, want Changed", r)
	}
	// Without traffic: only the re-added peer's keepalive can start it.
	hs := p.WaitHandshake(t, p.A, start, 10*time.Second)
	t.Logf("forced handshake completed %s after the call (handshake at %s)", time.Since(start).Round(time.Millisecond), hs.Format(time.RFC3339Nano))

	after := p.Peer(t, p.A)
	sameConfig(t, before, after)
	if after.PersistentKeepaliveInterval != netfix.DefaultHandshakeKeepalive {
		t.Errorf("keepalive = %s, want the default %s for a peer that had none", after.PersistentKeepaliveInterval, netfix.DefaultHandshakeKeepalive)
	}
	if after.ReceiveBytes >= before.ReceiveBytes && before.ReceiveBytes > 1000 {
		t.Errorf("rx = %d after re-adding, %d before: counters should restart", after.ReceiveBytes, before.ReceiveBytes)
	}
	p.Ping(t, p.A, p.B, 10*time.Second)
}

// TestLabSameEndpointStartsNoHandshake is the reason the handshake rung
// removes and re-adds the peer instead of re-setting its endpoint.
func TestLabSameEndpointStartsNoHandshake(t *testing.T) {
	testsupport.RequireRoot(t, "wireguard-go devices in network namespaces")
	p := wgpair.NewPair(t)
	p.Ping(t, p.A, p.B, 10*time.Second)
	before := p.Peer(t, p.A)
	time.Sleep(50 * time.Millisecond)
	// Set it the hard way, as a naive "rekey" would.
	err := p.Client.ConfigureDevice(p.A.Dev.Name, wgtypes.Config{Peers: []wgtypes.PeerConfig{
		{PublicKey: p.B.PublicKey(), UpdateOnly: true, Endpoint: p.B.Endpoint()},
	}})
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond) // 50× what a forced handshake needs
	if hs := p.Peer(t, p.A).LastHandshakeTime; !hs.Equal(before.LastHandshakeTime) {
		t.Errorf("re-setting the same endpoint started a handshake (%s -> %s); wireguard-go's behaviour changed", before.LastHandshakeTime, hs)
	}
}

func TestLabEnsureEndpoint(t *testing.T) {
	testsupport.RequireRoot(t, "wireguard-go devices in network namespaces")
	p := wgpair.NewPair(t)
	ctx := context.Background()
	// The cloud moves: B's underlay address changes, so A's endpoint is dead.
	// (Deleting a primary address deletes its secondaries: old goes first.)
	moved := p.B.Underlay.Next()
	veth, err := p.B.NS.Links.LinkByName(p.B.Veth)
	if err != nil {
		t.Fatal(err)
	}
	old, _ := netlink.ParseAddr(p.B.Underlay.String() + "/24")
	if err := p.B.NS.Links.AddrDel(veth, old); err != nil {
		t.Fatal(err)
	}
	wgpair.AddAddr(t, p.B.NS, p.B.Veth, moved.String()+"/24")
	ep := &net.UDPAddr{IP: moved.AsSlice(), Port: p.B.Dev.Port}
	before := p.Peer(t, p.A)

	r, err := netfix.EnsureEndpoint(ctx, p.Client, p.A.Dev.Name, p.B.PublicKey(), ep, false)
	if err != nil {
		t.Fatalf("EnsureEndpoint: %v", err)
	}
	if !r.Changed {
		t.Errorf("Result = %+v, want Changed", r)
	}
	after := p.Peer(t, p.A)
	if after.Endpoint.String() != ep.String() {
		t.Errorf("endpoint = %s, want %s", after.Endpoint, ep)
	}
	if after.PresharedKey != before.PresharedKey || !slices.EqualFunc(after.AllowedIPs, before.AllowedIPs, func(a, b net.IPNet) bool { return a.String() == b.String() }) {
		t.Error("EnsureEndpoint changed more than the endpoint")
	}
	p.Ping(t, p.A, p.B, 10*time.Second) // through the new address

	r, err = netfix.EnsureEndpoint(ctx, p.Client, p.A.Dev.Name, p.B.PublicKey(), ep, false)
	if err != nil || r.Changed {
		t.Errorf("second call = %+v, %v; want no change", r, err)
	}
	_, err = netfix.EnsureEndpoint(ctx, p.Client, p.A.Dev.Name, p.A.PublicKey(), ep, false)
	if !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing peer: err = %v, want os.ErrNotExist", err)
	}
}

func TestLabForceBounceRestoresAddressesAndRoutes(t *testing.T) {
	testsupport.RequireRoot(t, "wireguard-go devices in network namespaces")
	p := wgpair.NewPair(t)
	ns, name := p.A.NS, p.A.Dev.Name
	link, err := ns.Links.LinkByName(name)
	if err != nil {
		t.Fatal(err)
	}
	// What an operator or wg-quick adds on top of the tunnel address: an
	// IPv6 address (the kernel drops those on link down) and routes in the
	// main and another table (dropped too).
	wgpair.AddAddr(t, ns, name, "fd00:5::1/64")
	_, dst, _ := net.ParseCIDR("10.250.0.0/16")
	_, dst2, _ := net.ParseCIDR("0.0.0.0/0")
	for _, rt := range []*netlink.Route{
		{LinkIndex: link.Attrs().Index, Dst: dst, Protocol: 4 /* static */},
		{LinkIndex: link.Attrs().Index, Dst: dst2, Table: 51820, Protocol: 4},
	} {
		if err := ns.Links.RouteAdd(rt); err != nil {
			t.Fatalf("adding route %s: %v", rt, err)
		}
	}
	p.Ping(t, p.A, p.B, 10*time.Second)

	r, err := netfix.ForceBounce(context.Background(), ns.Links, name, false)
	if err != nil {
		t.Fatalf("ForceBounce: %v", err)
	}
	want := netfix.Result{Action: "bounce", Target: name, Changed: true, Changes: []string{
		"link down", "link up",
		"restored address fd00:5::1/64",
		"restored route 10.250.0.0/16 table 254",
		"restored route default table 51820",
	}}
	slices.Sort(r.Changes[min(3, len(r.Changes)):]) // routes come in the kernel's order
	if diff := cmp.Diff(want, r); diff != "" {
		t.Errorf("Result (-want +got):\n%s", diff)
	}
	routes, err := ns.Links.RouteListFiltered(netlink.FAMILY_V4, &netlink.Route{LinkIndex: link.Attrs().Index, Table: 0},
		netlink.RT_FILTER_OIF|netlink.RT_FILTER_TABLE)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, rt := range routes {
		if rt.Protocol == 4 {
			got = append(got, rt.Dst.String()+" "+itoa(rt.Table))
		}
	}
	slices.Sort(got)
	if diff := cmp.Diff([]string{"0.0.0.0/0 51820", "10.250.0.0/16 254"}, got); diff != "" {
		t.Errorf("static routes after bounce (-want +got):\n%s", diff)
	}
	l, _ := ns.Links.LinkByName(name)
	if l.Attrs().Flags&net.FlagUp == 0 {
		t.Error("link is not up after the bounce")
	}
	// On wireguard-go the bounce changes nothing of WireGuard itself; the
	// tunnel must still carry traffic.
	p.Ping(t, p.A, p.B, 10*time.Second)

	r, err = netfix.ForceBounce(context.Background(), ns.Links, name, true)
	if err != nil || !r.DryRun || r.Changed {
		t.Errorf("dry run = %+v, %v", r, err)
	}
	if _, err := netfix.ForceBounce(context.Background(), ns.Links, "nosuchlink0", false); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing link: err = %v, want os.ErrNotExist", err)
	}
}

func itoa(i int) string {
	return string(appendInt(nil, i))
}

func appendInt(b []byte, i int) []byte {
	if i >= 10 {
		b = appendInt(b, i/10)
	}
	return append(b, byte('0'+i%10))
}

// TestLabForceHandshakeAfterTheHubLostItsSessions is the case the
// handshake rung exists for: the hub's WireGuard restarted with the same
// key and port but no sessions (a gateway reboot, a Flannel restart). The
// edge keeps sending on a session the hub no longer has; on its own it
// recovers only when its "data sent, no reply" timer fires (12–13 s
// measured, wireguard-go 2026-11). A forced handshake recovers at once.
func TestLabForceHandshakeAfterTheHubLostItsSessions(t *testing.T) {
	testsupport.RequireRoot(t, "wireguard-go devices in network namespaces")
	p := wgpair.NewPair(t)
	p.Ping(t, p.A, p.B, 10*time.Second)
	// B forgets its session with A: remove and re-add A without keepalive,
	// so B itself sends nothing.
	peerA := p.Peer(t, p.B)
	err := p.Client.ConfigureDevice(p.B.Dev.Name, wgtypes.Config{Peers: []wgtypes.PeerConfig{
		{PublicKey: peerA.PublicKey, Remove: true},
		{PublicKey: peerA.PublicKey, PresharedKey: &peerA.PresharedKey, Endpoint: peerA.Endpoint, AllowedIPs: peerA.AllowedIPs},
	}})
	if err != nil {
		t.Fatal(err)
	}
	if took, ok := p.Deliver(t, p.A, p.B, time.Second); ok {
		t.Fatalf("A reached B %s after B lost its sessions: the fault did not happen (has WireGuard's behaviour changed?)", took)
	}
	start := time.Now()
	if _, err := netfix.ForceHandshake(context.Background(), p.Client, p.A.Dev.Name, p.B.PublicKey(), 0, false); err != nil {
		t.Fatalf("ForceHandshake: %v", err)
	}
	took, ok := p.Deliver(t, p.A, p.B, 4*time.Second) // under one REKEY_TIMEOUT
	if !ok {
		t.Fatal("A does not reach B after a forced handshake")
	}
	t.Logf("traffic through the tunnel %s after the forced handshake (%s after the call)", took, time.Since(start).Round(time.Millisecond))
}
