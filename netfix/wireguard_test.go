package netfix_test

import (
	"context"
	"errors"
	"net"
	"os"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"golang.zx2c4.com/wireguard/wgctrl/wgtypes"

	"github.com/edgeheal/edgeheal/netfix"
	"github.com/edgeheal/edgeheal/netfix/netfixtest"
)

var (
	_ netfix.WireGuard = (*netfixtest.WireGuard)(nil)

	keyA = fixedKey(1) // "AQEBAQEB..."
	keyB = fixedKey(2) // "AgICAgIC..."
	psk  = fixedKey(9)
	t0   = time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
)

func fixedKey(b byte) wgtypes.Key {
	var k wgtypes.Key
	for i := range k {
		k[i] = b
	}
	return k
}

func cidr(s string) net.IPNet {
	_, n, err := net.ParseCIDR(s)
	if err != nil {
		panic(err)
	}
	return *n
}

// hub is a device with two peers as a hub would have them: A with a PSK,
// traffic and a recent handshake, B without keepalive.
func hub() *netfixtest.WireGuard {
	wg := netfixtest.NewWireGuard()
	wg.AddDevice("wg0",
		wgtypes.Peer{
			PublicKey:                   keyA,
			PresharedKey:                psk,
			Endpoint:                    &net.UDPAddr{IP: net.IPv4(192, 0, 2, 1), Port: 51820},
			PersistentKeepaliveInterval: 25 * time.Second,
			LastHandshakeTime:           t0,
			ReceiveBytes:                1000,
			TransmitBytes:               2000,
			AllowedIPs:                  []net.IPNet{cidr("10.0.0.1/32"), cidr("10.42.0.0/24")},
			ProtocolVersion:             1,
		},
		wgtypes.Peer{
			PublicKey:       keyB,
			Endpoint:        &net.UDPAddr{IP: net.IPv4(192, 0, 2, 2), Port: 51820},
			AllowedIPs:      []net.IPNet{cidr("10.0.0.2/32")},
			ProtocolVersion: 1,
		},
	)
	return wg
}

func TestEnsureKeepalive(t *testing.T) {
	tests := []struct {
		name      string
		selected  func(wgtypes.Key) bool
		keepalive time.Duration
		dryRun    bool
		want      netfix.Result
		wantCalls []string
		wantKA    map[wgtypes.Key]time.Duration
	}{
		{
			name:      "sets keepalive on every peer that differs when all are selected",
			keepalive: 20 * time.Second,
			want: netfix.Result{Action: "keepalive", Target: "wg0", Changed: true, Changes: []string{
				"wg0/AQEBAQEB: keepalive 25s -> 20s",
				"wg0/AgICAgIC: keepalive 0s -> 20s",
			}},
			wantCalls: []string{
				"Device(wg0)",
				"ConfigureDevice(wg0, update AQEBAQEB keepalive=20s, update AgICAgIC keepalive=20s)",
				"Device(wg0)",
			},
			wantKA: map[wgtypes.Key]time.Duration{keyA: 20 * time.Second, keyB: 20 * time.Second},
		},
		{
			name:      "touches only the peers that differ",
			keepalive: 25 * time.Second,
			want: netfix.Result{Action: "keepalive", Target: "wg0", Changed: true, Changes: []string{
				"wg0/AgICAgIC: keepalive 0s -> 25s",
			}},
			wantCalls: []string{
				"Device(wg0)",
				"ConfigureDevice(wg0, update AgICAgIC keepalive=25s)",
				"Device(wg0)",
			},
			wantKA: map[wgtypes.Key]time.Duration{keyA: 25 * time.Second, keyB: 25 * time.Second},
		},
		{
			name:      "leaves peers that are not selected alone",
			selected:  func(k wgtypes.Key) bool { return k == keyA },
			keepalive: 20 * time.Second,
			want: netfix.Result{Action: "keepalive", Target: "wg0", Changed: true, Changes: []string{
				"wg0/AQEBAQEB: keepalive 25s -> 20s",
			}},
			wantCalls: []string{
				"Device(wg0)",
				"ConfigureDevice(wg0, update AQEBAQEB keepalive=20s)",
				"Device(wg0)",
			},
			wantKA: map[wgtypes.Key]time.Duration{keyA: 20 * time.Second, keyB: 0},
		},
		{
			name:      "does nothing when the selected peers already have it",
			selected:  func(k wgtypes.Key) bool { return k == keyA },
			keepalive: 25 * time.Second,
			want:      netfix.Result{Action: "keepalive", Target: "wg0"},
			wantCalls: []string{"Device(wg0)"},
			wantKA:    map[wgtypes.Key]time.Duration{keyA: 25 * time.Second, keyB: 0},
		},
		{
			name:      "reports but does not configure in dry run",
			keepalive: 25 * time.Second,
			dryRun:    true,
			want: netfix.Result{Action: "keepalive", Target: "wg0", DryRun: true, Changes: []string{
				"wg0/AgICAgIC: keepalive 0s -> 25s",
			}},
			wantCalls: []string{"Device(wg0)"},
			wantKA:    map[wgtypes.Key]time.Duration{keyA: 25 * time.Second, keyB: 0},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			wg := hub()
			before, _ := wg.Peer("wg0", keyA)
			got, err := netfix.EnsureKeepalive(context.Background(), wg, "wg0", tt.selected, tt.keepalive, tt.dryRun)
			if err != nil {
				t.Fatalf("EnsureKeepalive: %v", err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("Result (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tt.wantCalls, wg.Calls()); diff != "" {
				t.Errorf("calls (-want +got):\n%s", diff)
			}
			gotKA := map[wgtypes.Key]time.Duration{}
			for _, k := range []wgtypes.Key{keyA, keyB} {
				p, _ := wg.Peer("wg0", k)
				gotKA[k] = p.PersistentKeepaliveInterval
			}
			if diff := cmp.Diff(tt.wantKA, gotKA); diff != "" {
				t.Errorf("keepalives (-want +got):\n%s", diff)
			}
			// Nothing but the keepalive may change: no re-add, counters kept.
			after, _ := wg.Peer("wg0", keyA)
			after.PersistentKeepaliveInterval = before.PersistentKeepaliveInterval
			if diff := cmp.Diff(before, after); diff != "" {
				t.Errorf("peer A changed beyond its keepalive (-want +got):\n%s", diff)
			}
		})
	}
}

func TestEnsureKeepaliveIsIdempotent(t *testing.T) {
	wg := hub()
	ctx := context.Background()
	if r, err := netfix.EnsureKeepalive(ctx, wg, "wg0", nil, 20*time.Second, false); err != nil || !r.Changed {
		t.Fatalf("first EnsureKeepalive = %+v, %v; want a change", r, err)
	}
	r, err := netfix.EnsureKeepalive(ctx, wg, "wg0", nil, 20*time.Second, false)
	if err != nil || r.Changed || len(r.Changes) != 0 {
		t.Fatalf("second EnsureKeepalive = %+v, %v; want no change", r, err)
	}
}

func TestEnsureKeepaliveErrors(t *testing.T) {
	ctx := context.Background()
	t.Run("a missing interface matches os.ErrNotExist", func(t *testing.T) {
		_, err := netfix.EnsureKeepalive(ctx, hub(), "wg9", nil, 25*time.Second, false)
		if !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("err = %v, want os.ErrNotExist", err)
		}
	})
	t.Run("a keepalive that does not stick is an error", func(t *testing.T) {
		wg := hub()
		wg.ConfigureErr = nil
		// A configure that "succeeds" but changes nothing, as a driver might.
		stuck := &stuckWireGuard{WireGuard: wg}
		_, err := netfix.EnsureKeepalive(ctx, stuck, "wg0", nil, 20*time.Second, false)
		if err == nil {
			t.Fatal("EnsureKeepalive returned nil for a change that did not apply")
		}
	})
	t.Run("a configure error is returned", func(t *testing.T) {
		wg := hub()
		wg.ConfigureErr = errors.New("permission denied")
		if _, err := netfix.EnsureKeepalive(ctx, wg, "wg0", nil, 20*time.Second, false); err == nil {
			t.Fatal("EnsureKeepalive returned nil on a configure error")
		}
	})
	t.Run("a cancelled context does nothing", func(t *testing.T) {
		wg := hub()
		cctx, cancel := context.WithCancel(ctx)
		cancel()
		if _, err := netfix.EnsureKeepalive(cctx, wg, "wg0", nil, 20*time.Second, false); !errors.Is(err, context.Canceled) {
			t.Fatalf("err = %v, want context.Canceled", err)
		}
		if len(wg.Calls()) != 0 {
			t.Errorf("calls = %q, want none", wg.Calls())
		}
	})
}

// stuckWireGuard accepts every configuration and applies none.
type stuckWireGuard struct{ *netfixtest.WireGuard }

func (s *stuckWireGuard) ConfigureDevice(string, wgtypes.Config) error { return nil }

func TestForceHandshake(t *testing.T) {
	tests := []struct {
		name      string
		peer      wgtypes.Key
		keepalive time.Duration
		dryRun    bool
		want      netfix.Result
		wantCalls []string
		wantKA    time.Duration
	}{
		{
			name: "re-adds the peer with its own keepalive when none is given",
			peer: keyA,
			want: netfix.Result{Action: "handshake", Target: "wg0/AQEBAQEB", Changed: true, Changes: []string{
				"wg0/AQEBAQEB: removed and re-added (endpoint 192.0.2.1:51820, 2 allowed IPs, keepalive 25s)",
			}},
			wantCalls: []string{
				"Device(wg0)",
				"ConfigureDevice(wg0, remove AQEBAQEB, add AQEBAQEB psk endpoint=192.0.2.1:51820 keepalive=25s allowed=10.0.0.1/32,10.42.0.0/24)",
				"Device(wg0)",
			},
			wantKA: 25 * time.Second,
		},
		{
			name:      "uses the given keepalive",
			peer:      keyA,
			keepalive: 10 * time.Second,
			want: netfix.Result{Action: "handshake", Target: "wg0/AQEBAQEB", Changed: true, Changes: []string{
				"wg0/AQEBAQEB: removed and re-added (endpoint 192.0.2.1:51820, 2 allowed IPs, keepalive 10s)",
			}},
			wantCalls: []string{
				"Device(wg0)",
				"ConfigureDevice(wg0, remove AQEBAQEB, add AQEBAQEB psk endpoint=192.0.2.1:51820 keepalive=10s allowed=10.0.0.1/32,10.42.0.0/24)",
				"Device(wg0)",
			},
			wantKA: 10 * time.Second,
		},
		{
			name: "falls back to the default keepalive for a peer without one",
			peer: keyB,
			want: netfix.Result{Action: "handshake", Target: "wg0/AgICAgIC", Changed: true, Changes: []string{
				"wg0/AgICAgIC: removed and re-added (endpoint 192.0.2.2:51820, 1 allowed IPs, keepalive 25s)",
			}},
			wantCalls: []string{
				"Device(wg0)",
				"ConfigureDevice(wg0, remove AgICAgIC, add AgICAgIC endpoint=192.0.2.2:51820 keepalive=25s allowed=10.0.0.2/32)",
				"Device(wg0)",
			},
			wantKA: netfix.DefaultHandshakeKeepalive,
		},
		{
			name:   "reports but does not configure in dry run",
			peer:   keyA,
			dryRun: true,
			want: netfix.Result{Action: "handshake", Target: "wg0/AQEBAQEB", DryRun: true, Changes: []string{
				"wg0/AQEBAQEB: removed and re-added (endpoint 192.0.2.1:51820, 2 allowed IPs, keepalive 25s)",
			}},
			wantCalls: []string{"Device(wg0)"},
			wantKA:    25 * time.Second,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			wg := hub()
			before, _ := wg.Peer("wg0", tt.peer)
			got, err := netfix.ForceHandshake(context.Background(), wg, "wg0", tt.peer, tt.keepalive, tt.dryRun)
			if err != nil {
				t.Fatalf("ForceHandshake: %v", err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("Result (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tt.wantCalls, wg.Calls()); diff != "" {
				t.Errorf("calls (-want +got):\n%s", diff)
			}
			after, _ := wg.Peer("wg0", tt.peer)
			want := before
			want.PersistentKeepaliveInterval = tt.wantKA
			if !tt.dryRun {
				// The re-added peer is new to WireGuard: no counters, no handshake.
				want.ReceiveBytes, want.TransmitBytes, want.LastHandshakeTime = 0, 0, time.Time{}
			}
			if diff := cmp.Diff(want, after); diff != "" {
				t.Errorf("peer after (-want +got):\n%s", diff)
			}
		})
	}
}

func TestForceHandshakeErrors(t *testing.T) {
	ctx := context.Background()
	t.Run("a missing peer matches os.ErrNotExist and configures nothing", func(t *testing.T) {
		wg := hub()
		_, err := netfix.ForceHandshake(ctx, wg, "wg0", fixedKey(7), 0, false)
		if !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("err = %v, want os.ErrNotExist", err)
		}
		if diff := cmp.Diff([]string{"Device(wg0)"}, wg.Calls()); diff != "" {
			t.Errorf("calls (-want +got):\n%s", diff)
		}
	})
	t.Run("a missing interface matches os.ErrNotExist", func(t *testing.T) {
		if _, err := netfix.ForceHandshake(ctx, hub(), "wg9", keyA, 0, false); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("err = %v, want os.ErrNotExist", err)
		}
	})
	t.Run("a peer without endpoint is left alone", func(t *testing.T) {
		wg := hub()
		wg.UpdatePeer("wg0", keyB, func(p *wgtypes.Peer) { p.Endpoint = nil })
		_, err := netfix.ForceHandshake(ctx, wg, "wg0", keyB, 0, false)
		if !errors.Is(err, netfix.ErrNoEndpoint) {
			t.Fatalf("err = %v, want ErrNoEndpoint", err)
		}
		if _, ok := wg.Peer("wg0", keyB); !ok {
			t.Error("peer was removed")
		}
	})
	t.Run("a failed configure tries to put the peer back", func(t *testing.T) {
		wg := hub()
		wg.ConfigureErr = errors.New("broken pipe")
		if _, err := netfix.ForceHandshake(ctx, wg, "wg0", keyA, 0, false); err == nil {
			t.Fatal("ForceHandshake returned nil on a configure error")
		}
		want := []string{
			"Device(wg0)",
			"ConfigureDevice(wg0, remove AQEBAQEB, add AQEBAQEB psk endpoint=192.0.2.1:51820 keepalive=25s allowed=10.0.0.1/32,10.42.0.0/24)",
			"ConfigureDevice(wg0, add AQEBAQEB psk endpoint=192.0.2.1:51820 keepalive=25s allowed=10.0.0.1/32,10.42.0.0/24)",
		}
		if diff := cmp.Diff(want, wg.Calls()); diff != "" {
			t.Errorf("calls (-want +got):\n%s", diff)
		}
	})
}

func TestEnsureEndpoint(t *testing.T) {
	ctx := context.Background()
	t.Run("the same endpoint is a no-op that configures nothing", func(t *testing.T) {
		wg := hub()
		r, err := netfix.EnsureEndpoint(ctx, wg, "wg0", keyA, &net.UDPAddr{IP: net.ParseIP("192.0.2.1"), Port: 51820}, false)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(netfix.Result{Action: "endpoint", Target: "wg0/AQEBAQEB"}, r); diff != "" {
			t.Errorf("Result (-want +got):\n%s", diff)
		}
		if diff := cmp.Diff([]string{"Device(wg0)"}, wg.Calls()); diff != "" {
			t.Errorf("calls (-want +got):\n%s", diff)
		}
	})
	t.Run("a new endpoint is set and nothing else changes", func(t *testing.T) {
		wg := hub()
		before, _ := wg.Peer("wg0", keyA)
		ep := &net.UDPAddr{IP: net.IPv4(198, 51, 100, 7), Port: 51821}
		r, err := netfix.EnsureEndpoint(ctx, wg, "wg0", keyA, ep, false)
		if err != nil {
			t.Fatal(err)
		}
		want := netfix.Result{Action: "endpoint", Target: "wg0/AQEBAQEB", Changed: true,
			Changes: []string{"wg0/AQEBAQEB: endpoint 192.0.2.1:51820 -> 198.51.100.7:51821"}}
		if diff := cmp.Diff(want, r); diff != "" {
			t.Errorf("Result (-want +got):\n%s", diff)
		}
		wantCalls := []string{"Device(wg0)", "ConfigureDevice(wg0, update AQEBAQEB endpoint=198.51.100.7:51821)", "Device(wg0)"}
		if diff := cmp.Diff(wantCalls, wg.Calls()); diff != "" {
			t.Errorf("calls (-want +got):\n%s", diff)
		}
		after, _ := wg.Peer("wg0", keyA)
		before.Endpoint = ep
		if diff := cmp.Diff(before, after); diff != "" {
			t.Errorf("peer after (-want +got):\n%s", diff)
		}
	})
	t.Run("dry run reports the change without making it", func(t *testing.T) {
		wg := hub()
		r, err := netfix.EnsureEndpoint(ctx, wg, "wg0", keyA, &net.UDPAddr{IP: net.IPv4(198, 51, 100, 7), Port: 51820}, true)
		if err != nil || !r.DryRun || r.Changed {
			t.Fatalf("EnsureEndpoint = %+v, %v; want a dry run", r, err)
		}
		if p, _ := wg.Peer("wg0", keyA); p.Endpoint.String() != "192.0.2.1:51820" {
			t.Errorf("endpoint = %s, want unchanged", p.Endpoint)
		}
	})
	t.Run("a missing peer matches os.ErrNotExist", func(t *testing.T) {
		_, err := netfix.EnsureEndpoint(ctx, hub(), "wg0", fixedKey(7), &net.UDPAddr{IP: net.IPv4(198, 51, 100, 7), Port: 1}, false)
		if !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("err = %v, want os.ErrNotExist", err)
		}
	})
	t.Run("an invalid endpoint is refused", func(t *testing.T) {
		if _, err := netfix.EnsureEndpoint(ctx, hub(), "wg0", keyA, &net.UDPAddr{IP: net.IPv4(198, 51, 100, 7)}, false); err == nil {
			t.Fatal("EnsureEndpoint accepted port 0")
		}
	})
}

func TestFakeWireGuardResetsAReAddedPeer(t *testing.T) {
	wg := hub()
	var added []string
	wg.OnAdd = func(iface string, p *wgtypes.Peer) {
		added = append(added, iface+"/"+p.PublicKey.String()[:8])
		p.LastHandshakeTime = t0.Add(time.Minute)
	}
	if _, err := netfix.ForceHandshake(context.Background(), wg, "wg0", keyA, 0, false); err != nil {
		t.Fatal(err)
	}
	p, _ := wg.Peer("wg0", keyA)
	if p.ReceiveBytes != 0 || p.TransmitBytes != 0 || !p.LastHandshakeTime.Equal(t0.Add(time.Minute)) {
		t.Errorf("re-added peer = rx %d tx %d handshake %s; want counters reset and OnAdd's handshake", p.ReceiveBytes, p.TransmitBytes, p.LastHandshakeTime)
	}
	if diff := cmp.Diff([]string{"wg0/AQEBAQEB"}, added); diff != "" {
		t.Errorf("OnAdd calls (-want +got):\n%s", diff)
	}
}

// BenchmarkEnsureKeepaliveHub5000 is the steady-state re-assert on a hub
// with 5,000 peers that already have their keepalive: one Device read, no
// configuration (the fake's deep copy stands in for wgctrl's parsing).
func BenchmarkEnsureKeepaliveHub5000(b *testing.B) {
	wg := netfixtest.NewWireGuard()
	peers := make([]wgtypes.Peer, 5000)
	for i := range peers {
		var k wgtypes.Key
		k[0], k[1] = byte(i), byte(i>>8)
		peers[i] = wgtypes.Peer{PublicKey: k, PersistentKeepaliveInterval: 25 * time.Second,
			Endpoint: &net.UDPAddr{IP: net.IPv4(192, 0, 2, 1), Port: 51820}, AllowedIPs: []net.IPNet{cidr("10.0.0.1/32")}}
	}
	wg.AddDevice("wg0", peers...)
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		r, err := netfix.EnsureKeepalive(ctx, wg, "wg0", nil, 25*time.Second, false)
		if err != nil || r.Changed {
			b.Fatal(r, err)
		}
		wg.ResetCalls()
	}
}
