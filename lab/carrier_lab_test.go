package lab_test

import (
	"net/netip"
	"testing"
	"time"

	"golang.zx2c4.com/wireguard/wgctrl"
	"golang.zx2c4.com/wireguard/wgctrl/wgtypes"

	"github.com/edgeheal/edgeheal/internal/testsupport"
	"github.com/edgeheal/edgeheal/internal/testsupport/labtest"
	"github.com/edgeheal/edgeheal/lab"
)

// edgePeer reads the edge's peer (the cloud) through wgctrl.
func edgePeer(t *testing.T, wg *wgctrl.Client, l *lab.Lab) (wgtypes.Peer, int) {
	t.Helper()
	d, err := wg.Device(l.EdgeWG())
	if err != nil {
		t.Fatalf("reading %s: %v", l.EdgeWG(), err)
	}
	for _, p := range d.Peers {
		if p.PublicKey == l.CloudPublicKey() {
			return p, d.ListenPort
		}
	}
	t.Fatalf("%s has no peer %s", l.EdgeWG(), l.CloudPublicKey())
	return wgtypes.Peer{}, 0
}

// tunnelMapping finds the carrier's mapping of the edge's WireGuard flow
// from port.
func tunnelMapping(t *testing.T, l *lab.Lab, port int) (lab.NATMapping, bool) {
	t.Helper()
	ms, err := l.NATMappings()
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range ms {
		if m.Inside == netip.AddrPortFrom(l.EdgeUplinkAddr(), uint16(port)) && m.Remote == l.CloudEndpoint() {
			return m, true
		}
	}
	return lab.NATMapping{}, false
}

func newWG(t *testing.T) *wgctrl.Client {
	t.Helper()
	wg, err := wgctrl.New()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { wg.Close() })
	return wg
}

// The fault is realistic only if WireGuard alone cannot get out of it
// while a new flow can: with the tunnel's mapping stuck, WireGuard's own
// retries (same source port) stay dark for a minute while it keeps
// sending; a new listen port gets a fresh mapping and the tunnel is back.
func TestLabNATStuckKeepsWireGuardDarkWhileANewSourcePortPasses(t *testing.T) {
	l := labtest.New(t, lab.Options{NAT: true, OffloadOff: true, Keepalive: 20 * time.Second})
	wg := newWG(t)
	testsupport.WaitFor(t, 15*time.Second, "telemetry through the carrier NAT", func() bool { return l.Stats().Received > 20 })
	_, port := edgePeer(t, wg, l)
	before, ok := tunnelMapping(t, l, port)
	if !ok {
		t.Fatalf("no carrier mapping of the tunnel's flow from port %d", port)
	}
	if a := before.Public.Addr(); a != netip.MustParseAddr("192.0.2.254") || before.Public.Port() < 20000 || before.Public.Port() > 29999 {
		t.Errorf("public side of the mapping = %s; want 192.0.2.254 and a port in 20000-29999", before.Public)
	}
	if ep := cloudPeerEndpoint(t, wg, l); ep != before.Public.String() {
		t.Errorf("cloud sees the edge at %s; want the carrier's mapping %s", ep, before.Public)
	}

	stuck, err := l.NATStuck()
	if err != nil {
		t.Fatalf("nat-stuck: %v", err)
	}
	at := time.Now()
	t.Logf("stuck: %s", stuck)
	p0, _ := edgePeer(t, wg, l)
	for i := 0; i < 60; i++ {
		time.Sleep(time.Second)
		if got := l.StatsSince(at.Add(time.Second)).Received; got > 0 {
			t.Fatalf("telemetry came through a stuck mapping %v after the fault (%d messages): want dark", time.Since(at).Round(time.Second), got)
		}
	}
	p1, port1 := edgePeer(t, wg, l)
	if port1 != port {
		t.Fatalf("the edge's listen port moved by itself: %d -> %d", port, port1)
	}
	if p1.TransmitBytes <= p0.TransmitBytes {
		t.Errorf("edge tx %d -> %d during the fault; want WireGuard to keep sending", p0.TransmitBytes, p1.TransmitBytes)
	}
	if p1.ReceiveBytes != p0.ReceiveBytes {
		t.Errorf("edge rx %d -> %d during the fault; want nothing back", p0.ReceiveBytes, p1.ReceiveBytes)
	}
	st := l.StatsSince(at.Add(time.Second))
	t.Logf("WireGuard alone, 60 s under nat-stuck: telemetry sent %d, received %d; edge tx +%d B, rx +%d B; handshake %v old; mapping still %v",
		st.Sent, st.Received, p1.TransmitBytes-p0.TransmitBytes, p1.ReceiveBytes-p0.ReceiveBytes,
		time.Since(p1.LastHandshakeTime).Round(time.Second), mappingStill(t, l, port))

	// A new source port: the carrier maps it afresh, the cloud roams to it.
	newPort := port + 1
	if newPort > 65535 {
		newPort = port - 1
	}
	moved := time.Now()
	if err := wg.ConfigureDevice(l.EdgeWG(), wgtypes.Config{ListenPort: &newPort}); err != nil {
		t.Fatal(err)
	}
	back := testsupport.WaitFor(t, 15*time.Second, "telemetry from a new source port", func() bool { return l.StatsSince(moved).Received > 0 })
	fresh, ok := tunnelMapping(t, l, newPort)
	if !ok {
		t.Fatalf("no carrier mapping from the new port %d", newPort)
	}
	t.Logf("listen port %d -> %d: telemetry back %v later over %s; cloud sees the edge at %s",
		port, newPort, back.Round(time.Millisecond), fresh, cloudPeerEndpoint(t, wg, l))
}

func mappingStill(t *testing.T, l *lab.Lab, port int) string {
	m, ok := tunnelMapping(t, l, port)
	if !ok {
		return "gone"
	}
	return m.String()
}

func cloudPeerEndpoint(t *testing.T, wg *wgctrl.Client, l *lab.Lab) string {
	t.Helper()
	d, err := wg.Device(l.CloudWG())
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range d.Peers {
		if p.PublicKey == l.EdgePublicKey() && p.Endpoint != nil {
			return p.Endpoint.String()
		}
	}
	return ""
}

// After a remap the cloud sees the edge from the carrier's other address
// and port range; an edge that keeps sending (telemetry) is back as soon
// as its next packet makes the new mapping and the cloud roams to it.
func TestLabNATRemapMovesTheEdgeToANewPublicAddressAndPort(t *testing.T) {
	l := labtest.New(t, lab.Options{NAT: true, OffloadOff: true})
	wg := newWG(t)
	testsupport.WaitFor(t, 15*time.Second, "telemetry through the carrier NAT", func() bool { return l.Stats().Received > 20 })
	was := cloudPeerEndpoint(t, wg, l)
	pub, err := l.NATRemap()
	if err != nil {
		t.Fatalf("nat-remap: %v", err)
	}
	at := time.Now()
	if pub != "192.0.2.253:40000-49999" {
		t.Errorf("public side after remap = %s; want 192.0.2.253:40000-49999", pub)
	}
	var now string
	testsupport.WaitFor(t, 10*time.Second, "the cloud roaming to the new mapping", func() bool {
		now = cloudPeerEndpoint(t, wg, l)
		ap, err := netip.ParseAddrPort(now)
		return err == nil && ap.Addr() == netip.MustParseAddr("192.0.2.253") && ap.Port() >= 40000 && ap.Port() <= 49999
	})
	back := testsupport.WaitFor(t, 10*time.Second, "telemetry after the remap", func() bool { return l.StatsSince(at).Received > 0 })
	t.Logf("remap: the cloud saw the edge at %s, now at %s; telemetry back %v after the remap", was, now, back.Round(time.Millisecond))
}
