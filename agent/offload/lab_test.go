package offload_test

import (
	"context"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/edgeheal/edgeheal/agent/core"
	"github.com/edgeheal/edgeheal/agent/offload"
	"github.com/edgeheal/edgeheal/configs"
	"github.com/edgeheal/edgeheal/internal/testsupport/agentlab"
	"github.com/edgeheal/edgeheal/wire"
)

// fixes delivers the time of each successful offload-off action, by link.
type fixes struct {
	mu sync.Mutex
	ch map[string]chan time.Time
}

func (f *fixes) emit(ev core.Event) {
	if ev.Kind != wire.EventAction || ev.Result != "changed" {
		return
	}
	at := time.Now()
	f.mu.Lock()
	ch := f.ch[ev.Target]
	f.mu.Unlock()
	if ch != nil {
		select {
		case ch <- at:
		default:
		}
	}
}

func (f *fixes) wait(tb testing.TB, link string, timeout time.Duration) time.Time {
	tb.Helper()
	f.mu.Lock()
	ch := f.ch[link]
	f.mu.Unlock()
	select {
	case at := <-ch:
		return at
	case <-time.After(timeout):
		tb.Fatalf("no offload fix on %s within %v", link, timeout)
		return time.Time{}
	}
}

func guard(l *agentlab.NS, uplinks []configs.Uplink, emit core.Emit) *offload.Guard {
	return offload.New(offload.Config{
		Uplinks: uplinks, Floor: time.Minute, OS: l.OS, Log: slog.New(slog.DiscardHandler), Emit: emit,
	})
}

// startGuard runs a guard over uplinks in the lab; it is stopped (and
// checked to return nil) in tb.Cleanup.
func startGuard(tb testing.TB, l *agentlab.NS, uplinks []configs.Uplink, links ...string) (*offload.Guard, *fixes) {
	tb.Helper()
	fx := &fixes{ch: map[string]chan time.Time{}}
	for _, n := range links {
		fx.ch[n] = make(chan time.Time, 1)
	}
	g := guard(l, uplinks, fx.emit)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- g.Run(ctx) }()
	tb.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				tb.Errorf("Run returned %v after cancel, want nil", err)
			}
		case <-time.After(5 * time.Second):
			tb.Errorf("Run did not return within 5s of cancel")
		}
	})
	return g, fx
}

func TestLabOffloadGuardTurnsOffloadOffOnAVeth(t *testing.T) {
	l := agentlab.New(t)
	l.AddVeth(t, "up0")
	uplinks := []configs.Uplink{{Name: "up0", TxChecksum: "off"}}

	before, err := guard(l, uplinks, nil).Check(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if before.Healthy {
		t.Fatalf("check says healthy with offload on: %+v", before)
	}

	g, fx := startGuard(t, l, uplinks, "up0")
	fx.wait(t, "up0", 5*time.Second)
	if on := l.TxOn(t, "up0"); len(on) != 0 {
		t.Errorf("after the guard's fix, %v still on", on)
	}
	if on := l.TxOn(t, "pup0"); len(on) == 0 {
		t.Errorf("the peer pup0, not an uplink, was changed")
	}
	after, err := guard(l, uplinks, nil).Check(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if !after.Healthy {
		t.Errorf("check unhealthy after the guard ran: %+v", after)
	}
	if cs := g.Checks(); len(cs) != 1 || !cs[0].Healthy || cs[0].Target != "up0" {
		t.Errorf("guard checks = %+v, want up0 healthy", cs)
	}

	// Someone turns it back on: the feature-change notification brings the
	// guard back (a fix so soon after the last is a fight: no action event
	// of its own, so the features are read).
	if err := l.OS.NIC.Change("up0", map[string]bool{"tx-checksum-ip-generic": true}); err != nil {
		t.Fatal(err)
	}
	if !l.WaitOff(t, "up0", 5*time.Second) {
		t.Errorf("after ethtool -K tx on, the guard left %v on", l.TxOn(t, "up0"))
	}
}

func TestLabOffloadGuardKeepsOffloadOffThrough20Replugs(t *testing.T) {
	l := agentlab.New(t)
	l.AddVeth(t, "wwan0")
	// A veth stands in for the modem, and a glob never chooses a veth:
	// the lab names it exactly (agent/offload's unit tests cover globs).
	_, fx := startGuard(t, l, []configs.Uplink{{Name: "wwan0"}}, "wwan0")
	fx.wait(t, "wwan0", 5*time.Second)

	for i := range 20 {
		l.DelLink(t, "wwan0")
		l.AddVeth(t, "wwan0") // a re-enumerated modem: offload on again
		fx.wait(t, "wwan0", 5*time.Second)
		if on := l.TxOn(t, "wwan0"); len(on) != 0 {
			t.Fatalf("re-plug %d: %v on after the guard's fix", i+1, on)
		}
	}
}

// BenchmarkLabOffloadExposureWindow measures, per re-plug, the time from
// just before a matching link is created to the guard having turned every
// guarded feature off and read it back (its "changed" action event). The
// window includes creating the veth itself. Goal: p99 under 50 ms. Run at
// least 50 re-plugs:
//
//	sudo env PATH=$PATH go test ./agent/offload -run XXX -bench LabOffloadExposure -benchtime=100x
func BenchmarkLabOffloadExposureWindow(b *testing.B) {
	l := agentlab.New(b)
	_, fx := startGuard(b, l, []configs.Uplink{{Name: "wwan0"}}, "wwan0") // a veth: named exactly
	l.AddVeth(b, "wwan0")
	fx.wait(b, "wwan0", 5*time.Second)

	var windows []time.Duration
	for b.Loop() {
		l.DelLink(b, "wwan0")
		start := time.Now()
		l.AddVeth(b, "wwan0")
		at := fx.wait(b, "wwan0", 5*time.Second)
		windows = append(windows, at.Sub(start))
	}
	b.StopTimer()
	if on := l.TxOn(b, "wwan0"); len(on) != 0 {
		b.Fatalf("after the last re-plug, %v on", on)
	}
	if len(windows) < 50 {
		b.Logf("only %d re-plugs; use -benchtime=100x for a meaningful p99", len(windows))
	}
	slices.Sort(windows)
	q := func(p float64) float64 {
		i := int(p * float64(len(windows)-1))
		return float64(windows[i].Microseconds()) / 1000
	}
	b.ReportMetric(q(0.50), "p50-ms")
	b.ReportMetric(q(0.99), "p99-ms")
	b.ReportMetric(float64(windows[len(windows)-1].Microseconds())/1000, "max-ms")
	b.ReportMetric(float64(len(windows)), "replugs")
}
