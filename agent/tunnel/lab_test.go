package tunnel_test

import (
	"context"
	"net"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"golang.zx2c4.com/wireguard/wgctrl/wgtypes"

	"github.com/edgeheal/edgeheal/agent/clock"
	"github.com/edgeheal/edgeheal/agent/core"
	"github.com/edgeheal/edgeheal/agent/tunnel"
	"github.com/edgeheal/edgeheal/configs"
	"github.com/edgeheal/edgeheal/internal/testsupport"
	"github.com/edgeheal/edgeheal/internal/testsupport/agentlab"
	"github.com/edgeheal/edgeheal/internal/testsupport/wgpair"
	"github.com/edgeheal/edgeheal/wire"
)

// lookupNet is the real prober with a DNS of the test's own.
type lookupNet struct {
	core.Prober
	lookup func(ctx context.Context, name string) ([]netip.Addr, error)
}

func (n lookupNet) Lookup(ctx context.Context, name string) ([]netip.Addr, error) {
	return n.lookup(ctx, name)
}

type tunnelLabEvents struct {
	mu  sync.Mutex
	evs []core.Event
}

func (l *tunnelLabEvents) add(ev core.Event) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.evs = append(l.evs, ev)
}

func (l *tunnelLabEvents) All() []core.Event {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]core.Event(nil), l.evs...)
}

// wait polls until an event matches, for at most limit.
func (l *tunnelLabEvents) wait(t *testing.T, limit time.Duration, what string, match func(core.Event) bool) core.Event {
	t.Helper()
	deadline := time.Now().Add(limit)
	for time.Now().Before(deadline) {
		l.mu.Lock()
		for _, ev := range l.evs {
			if match(ev) {
				l.mu.Unlock()
				return ev
			}
		}
		l.mu.Unlock()
		time.Sleep(20 * time.Millisecond)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	t.Fatalf("no %s event within %s; events: %+v", what, limit, l.evs)
	return core.Event{}
}

// TestLabTunnelMonitorOnRealWireGuard runs the monitor against two
// wireguard-go devices in anonymous namespaces: the keepalive Flannel left
// at 0 is set within one round; then the hub forgets the session (its
// WireGuard restarted with the same key: peer removed and re-added without
// an endpoint), the edge keeps sending on a session the hub no longer has,
// and the monitor detects it within probe interval × misses and heals it
// with a forced handshake. WireGuard alone waits for its "data sent, no
// reply" timer (12-13 s measured, docs/lab.md).
func TestLabTunnelMonitorOnRealWireGuard(t *testing.T) {
	testsupport.RequireRoot(t, "wireguard-go devices in network namespaces")
	p := wgpair.NewPair(t)
	p.DefaultRoute(t)
	const interval = 200 * time.Millisecond
	tun := configs.Tunnel{
		Interface:           p.A.Dev.Name,
		Peers:               configs.PeerSelector{All: true},
		PersistentKeepalive: configs.Duration(20 * time.Second),
		StaleAfter:          configs.Duration(210 * time.Second),
		RxSilence:           configs.Duration(75 * time.Second),
		Probe: configs.Probe{Target: "icmp://" + p.B.Tunnel.String(), Interval: configs.Duration(interval),
			Timeout: configs.Duration(interval), Misses: 3},
		Heal: configs.HealRungs,
	}
	pol := configs.Policy{Cooldown: configs.Duration(time.Second), MaxDisruptive: 3,
		Window: configs.Duration(time.Hour), VerifyTimeout: configs.Duration(3 * time.Second)}
	start := time.Now()
	m, evs := startTunnelLab(t, tun, pol, agentlab.OpenSystem(t, p.A.NS))

	// 1. The pair starts with keepalive 0, as Flannel leaves it.
	ka := evs.wait(t, 2*time.Second, "keepalive", func(ev core.Event) bool { return ev.Action == "keepalive" && ev.Result == "changed" })
	if got := p.Peer(t, p.A).PersistentKeepaliveInterval; got != 20*time.Second {
		t.Fatalf("keepalive %s after the keepalive action, want 20s", got)
	}
	t.Logf("keepalive 0 -> 20s %s after start (one round is %s)", ka.Time.Sub(start).Round(time.Millisecond), interval)

	// 2. Healthy: the keepalive started a session and the probe answers.
	p.WaitHandshake(t, p.A, start, 5*time.Second)
	waitTunnelLabOK(t, m)

	// 3. The hub forgets the session.
	darkAt := time.Now()
	edge := wgtypes.PeerConfig{PublicKey: p.A.PublicKey(), Remove: true}
	if err := p.Client.ConfigureDevice(p.B.Dev.Name, wgtypes.Config{Peers: []wgtypes.PeerConfig{edge}}); err != nil {
		t.Fatalf("removing the edge at the hub: %v", err)
	}
	readd := wgtypes.PeerConfig{PublicKey: p.A.PublicKey(), PresharedKey: &p.PSK, ReplaceAllowedIPs: true,
		AllowedIPs: []net.IPNet{{IP: p.A.Tunnel.AsSlice(), Mask: net.CIDRMask(32, 32)}}}
	if err := p.Client.ConfigureDevice(p.B.Dev.Name, wgtypes.Config{Peers: []wgtypes.PeerConfig{readd}}); err != nil {
		t.Fatalf("re-adding the edge at the hub without a session: %v", err)
	}

	inc := evs.wait(t, 5*time.Second, "incident", func(ev core.Event) bool { return ev.Kind == "incident" })
	rec := evs.wait(t, 12*time.Second, "recovered", func(ev core.Event) bool { return ev.Kind == "recovered" })
	if !strings.Contains(rec.Summary, "healed by handshake") {
		t.Errorf("recovered %q, want healed by the forced handshake", rec.Summary)
	}
	t.Logf("hub forgot the session: detected after %s (bound: interval × misses + 1 s = %s), healthy again after %s; "+
		"WireGuard alone: 12-13 s (docs/lab.md)",
		inc.Time.Sub(darkAt).Round(time.Millisecond), 3*interval+time.Second, rec.Time.Sub(darkAt).Round(time.Millisecond))
	if d := inc.Time.Sub(darkAt); d > 3*interval+time.Second {
		t.Errorf("detected after %s, want within interval × misses + 1 s", d)
	}
}

// startTunnelLab runs a monitor with os (the real backend of the edge's
// namespace, its clock synced) until the test ends.
func startTunnelLab(t *testing.T, tun configs.Tunnel, pol configs.Policy, os core.OS) (*tunnel.Monitor, *tunnelLabEvents) {
	t.Helper()
	evs := &tunnelLabEvents{}
	os.Clock = agentlab.SyncedClock{Clock: os.Clock}
	m := tunnel.New(tunnel.Config{Tunnel: tun, Policy: pol, OS: os, Clock: clock.New(os.Clock), Emit: evs.add})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- m.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	return m, evs
}

func waitTunnelLabOK(t *testing.T, m *tunnel.Monitor) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) && !tunnelLabPeerOK(m) {
		time.Sleep(20 * time.Millisecond)
	}
	if !tunnelLabPeerOK(m) {
		t.Fatalf("peer not ok with a working tunnel: %+v", m.Checks())
	}
}

// TestLabTunnelReresolveFollowsAMovedHub moves the hub's underlay address
// and updates its (fake) DNS name: the edge's packets go to an address that
// no longer exists, and the reresolve rung sets the new one. The hub still
// has the session, so traffic flows again at once, without a handshake.
func TestLabTunnelReresolveFollowsAMovedHub(t *testing.T) {
	testsupport.RequireRoot(t, "wireguard-go devices in network namespaces")
	p := wgpair.NewPair(t)
	p.DefaultRoute(t)
	const interval = 200 * time.Millisecond
	var mu sync.Mutex
	dns := p.B.Underlay
	lookup := func(_ context.Context, name string) ([]netip.Addr, error) {
		mu.Lock()
		defer mu.Unlock()
		if name != "hub.lab.test" {
			return nil, &net.DNSError{Err: "no such host", Name: name, IsNotFound: true}
		}
		return []netip.Addr{dns}, nil
	}
	tun := configs.Tunnel{
		Interface:           p.A.Dev.Name,
		Peers:               configs.PeerSelector{All: true},
		PersistentKeepalive: configs.Duration(20 * time.Second),
		EndpointHost:        "hub.lab.test",
		Probe: configs.Probe{Target: "icmp://" + p.B.Tunnel.String(), Interval: configs.Duration(interval),
			Timeout: configs.Duration(interval), Misses: 3},
		// reresolve before handshake: when the address did not change it is
		// free and skipped at once; when it did, the session survives.
		Heal: []string{configs.HealReassert, configs.HealReresolve, configs.HealHandshake},
	}
	pol := configs.Policy{Cooldown: configs.Duration(time.Second), MaxDisruptive: 3,
		Window: configs.Duration(time.Hour), VerifyTimeout: configs.Duration(3 * time.Second)}
	p.Ping(t, p.A, p.B, 5*time.Second)
	os := agentlab.OpenSystem(t, p.A.NS)
	os.Net = lookupNet{Prober: os.Net, lookup: lookup}
	m, evs := startTunnelLab(t, tun, pol, os)
	waitTunnelLabOK(t, m)

	// The hub moves, and its DNS name follows.
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
	mu.Lock()
	dns = moved
	mu.Unlock()
	movedAt := time.Now()

	rec := evs.wait(t, 10*time.Second, "recovered", func(ev core.Event) bool { return ev.Kind == "recovered" })
	if !strings.Contains(rec.Summary, "healed by reresolve") {
		t.Errorf("recovered %q, want healed by reresolve", rec.Summary)
	}
	if got := p.Peer(t, p.A).Endpoint.String(); got != (&net.UDPAddr{IP: moved.AsSlice(), Port: p.B.Dev.Port}).String() {
		t.Errorf("endpoint %s, want the moved address %s", got, moved)
	}
	t.Logf("hub moved: healthy again after %s through reresolve", rec.Time.Sub(movedAt).Round(time.Millisecond))
}

func tunnelLabPeerOK(m *tunnel.Monitor) bool {
	for _, c := range m.Checks() {
		if c.Kind == wire.KindPeer {
			return c.State == wire.CheckOK && c.Peer != nil && c.Peer.Probe == "ok"
		}
	}
	return false
}
