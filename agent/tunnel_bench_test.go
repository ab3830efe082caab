package agent

import (
	"context"
	"testing"
	"time"

	"github.com/edgeheal/edgeheal/configs"
)

// BenchmarkTunnelRound5000Peers measures one detection round of a hub
// interface with 5,000 peers read from a fake WireGuard: read, probe
// attribution, per-peer detection and state machine, keepalive drift check,
// and the snapshot Checks reads. The fake returns the same slice every time,
// so the cost measured is the monitor's own. Goal: under 20 ms.
func BenchmarkTunnelRound5000Peers(b *testing.B) {
	benchmarkTunnelRound(b, false)
}

// BenchmarkTunnelRound5000PeersTraffic is the same round with every
// counter moving and a fresh copy of the peers each round, as a real read
// returns them (the fake's copy is included in the time).
func BenchmarkTunnelRound5000PeersTraffic(b *testing.B) {
	benchmarkTunnelRound(b, true)
}

func benchmarkTunnelRound(b *testing.B, traffic bool) {
	f := newTunnelFakeOS("wg0", 5000, 20*time.Second)
	f.noTraffic = !traffic
	tun := tunnelTestConfig()
	tun.Probe.Target = "icmp://10.119.135.1" // carried by the last peer, found by a scan of all
	m := NewTunnelMonitor([]configs.Tunnel{tun}, tunnelTestPolicy(), false, f, nil, nil)
	ctx := context.Background()
	m.round(ctx) // first sight: every peer is created and baselined
	reads := f.reads
	b.ReportAllocs()
	for b.Loop() {
		m.tunnels[0].due = time.Time{} // due now: rounds run back to back here, not once a second
		m.round(ctx)
	}
	b.StopTimer()
	if got := f.reads - reads; got != b.N {
		b.Fatalf("%d device reads in %d rounds: the rounds did not observe", got, b.N)
	}
	if n := len(m.Checks()); n != 5000 {
		b.Fatalf("%d checks, want 5000", n)
	}
	if calls := f.Calls(); len(calls) != 0 {
		b.Fatalf("a healthy hub got actions: %v", calls)
	}
}

// BenchmarkTunnelChecks5000Peers measures building `edgeheal check`'s view
// of 5,000 peers from the last round's snapshot.
func BenchmarkTunnelChecks5000Peers(b *testing.B) {
	f := newTunnelFakeOS("wg0", 5000, 20*time.Second)
	f.noTraffic = true
	m := NewTunnelMonitor([]configs.Tunnel{tunnelTestConfig()}, tunnelTestPolicy(), false, f, nil, nil)
	m.round(context.Background())
	b.ReportAllocs()
	for b.Loop() {
		_ = m.Checks()
	}
}
