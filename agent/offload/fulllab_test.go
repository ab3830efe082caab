package offload_test

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/edgeheal/edgeheal/agent/offload"
	"github.com/edgeheal/edgeheal/configs"
	"github.com/edgeheal/edgeheal/internal/testsupport"
	"github.com/edgeheal/edgeheal/internal/testsupport/agentlab"
	"github.com/edgeheal/edgeheal/internal/testsupport/labtest"
	"github.com/edgeheal/edgeheal/lab"
)

// TestLabOffloadGuardBringsTheDarkTunnelBackAndSurvivesAReplug runs the
// guard inside the full lab's edge namespace, selecting the uplink as
// "default-route": the WireGuard tunnel that is dark because the uplink has
// TX checksum offload on comes back once the guard runs, and a re-plug of
// the uplink (offload back on) does not darken it again.
func TestLabOffloadGuardBringsTheDarkTunnelBackAndSurvivesAReplug(t *testing.T) {
	l := labtest.New(t, lab.Options{}) // offload on: the fault
	if on, err := l.UplinkTxChecksumOn(); err != nil || !on {
		t.Fatalf("uplink offload on at start = %v, %v; want true", on, err)
	}
	time.Sleep(2 * time.Second)
	if st := l.Stats(); st.Sent == 0 || st.Received != 0 {
		t.Fatalf("before the guard: telemetry sent %d received %d; want a dark tunnel", st.Sent, st.Received)
	}

	uplink := l.EdgeUplink()
	fx := &fixes{ch: map[string]chan time.Time{uplink: make(chan time.Time, 1)}}
	g := offload.New(offload.Config{
		Uplinks: []configs.Uplink{{Name: configs.DefaultRoute, TxChecksum: "off"}},
		Floor:   time.Minute, OS: agentlab.LabOS(t, l, lab.Edge),
		Log: slog.New(slog.DiscardHandler), Emit: fx.emit,
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	started := time.Now()
	go func() { done <- g.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run returned %v, want nil", err)
		}
	}()

	fixedAt := fx.wait(t, uplink, 5*time.Second)
	back := testsupport.WaitFor(t, 20*time.Second, "telemetry after the guard started", func() bool {
		return l.StatsSince(fixedAt).Received > 0
	})
	t.Logf("guard fixed %s %v after starting; telemetry back %v after the fix",
		uplink, fixedAt.Sub(started).Round(time.Microsecond), back.Round(time.Millisecond))

	replugged := time.Now()
	if err := l.Replug(context.Background()); err != nil {
		t.Fatalf("replug: %v", err)
	}
	refixed := fx.wait(t, uplink, 5*time.Second)
	if on, err := l.UplinkTxChecksumOn(); err != nil || on {
		t.Fatalf("uplink offload on after the guard's fix = %v, %v; want off", on, err)
	}
	time.Sleep(3 * time.Second)
	st := l.StatsSince(replugged)
	if st.Received == 0 {
		t.Fatalf("after the replug: telemetry sent %d received %d; the tunnel went dark", st.Sent, st.Received)
	}
	for _, o := range st.Outages {
		if o.End.IsZero() {
			t.Errorf("an outage that began %v after the replug is still going", o.Start.Sub(replugged))
		}
	}
	var gap time.Duration
	for _, o := range st.Outages {
		gap = max(gap, o.Duration())
	}
	t.Logf("replug: guard fixed the new uplink %v after the replug began; telemetry sent %d received %d lost %.1f%%, longest gap %v (%d outages)",
		refixed.Sub(replugged).Round(time.Microsecond), st.Sent, st.Received, st.LossPct, gap.Round(time.Millisecond), len(st.Outages))
}
