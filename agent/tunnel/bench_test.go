package tunnel

import (
	"context"
	"testing"
	"time"

	"github.com/edgeheal/edgeheal/agent/clock"
)

// BenchmarkTunnelRound5000Peers measures one detection round of a hub
// interface with 5,000 peers read from a fake WireGuard: read, probe
// attribution, per-peer detection and state machine, keepalive drift check,
// and the snapshot Checks reads. Goal: under 20 ms.
func BenchmarkTunnelRound5000Peers(b *testing.B) {
	benchmarkTunnelRound(b, false)
}

// BenchmarkTunnelRound5000PeersTraffic is the same round with every
// counter moving, as a real read returns them (the fake's update of the
// counters is included in the time).
func BenchmarkTunnelRound5000PeersTraffic(b *testing.B) {
	benchmarkTunnelRound(b, true)
}

func benchmarkTunnelRound(b *testing.B, traffic bool) {
	w := newTunnelWorld(5000, 20*time.Second)
	w.noTraffic = !traffic
	tun := tunnelTestConfig()
	tun.Probe.Target = "icmp://10.119.135.1" // carried by the last peer, found by a scan of all
	m := New(Config{Tunnel: tun, Policy: tunnelTestPolicy(), OS: w.os(), Clock: clock.New(w.clock)})
	ctx := context.Background()
	m.runRound(ctx, false) // first sight: every peer is created and baselined
	reads := w.reads
	b.ReportAllocs()
	for b.Loop() {
		m.runRound(ctx, false)
	}
	b.StopTimer()
	if got := w.reads - reads; got != b.N {
		b.Fatalf("%d device reads in %d rounds: the rounds did not observe", got, b.N)
	}
	if n := len(m.Checks()); n != 5000 {
		b.Fatalf("%d checks, want 5000", n)
	}
	if changes := w.Changes(); len(changes) != 0 {
		b.Fatalf("a healthy hub got actions: %v", changes)
	}
}

// BenchmarkTunnelChecks5000Peers measures building the checks of 5,000
// peers from the last round's snapshot.
func BenchmarkTunnelChecks5000Peers(b *testing.B) {
	w := newTunnelWorld(5000, 20*time.Second)
	w.noTraffic = true
	m := New(Config{Tunnel: tunnelTestConfig(), Policy: tunnelTestPolicy(), OS: w.os(), Clock: clock.New(w.clock)})
	m.runRound(context.Background(), false)
	b.ReportAllocs()
	for b.Loop() {
		_ = m.Checks()
	}
}
