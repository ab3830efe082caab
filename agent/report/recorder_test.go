package report

import (
	"log/slog"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/edgeheal/edgeheal/agent"
)

func TestRecorderQueuesDurablyAndCounts(t *testing.T) {
	dir := t.TempDir()
	ob := mustOpen(t, dir, 100)
	m := NewMetrics(MetricsOptions{Version: "t", Outbox: ob})
	emit := (&Recorder{Outbox: ob, Metrics: m, Log: slog.New(slog.DiscardHandler)}).Emit
	emit(agent.Event{Kind: "action", Action: "handshake", Result: "ok", Target: "wg0/AbCd"})
	emit(agent.Event{Kind: "offload-drift", Target: "wwan0"})
	if ob.Depth() != 2 {
		t.Errorf("depth = %d, want 2", ob.Depth())
	}
	for _, it := range ob.Pending(0) {
		if it.Event.ID == "" {
			t.Error("an emitted event has no id")
		}
	}
	if got := counterValue(t, m.remediations.WithLabelValues("handshake", "ok")); got != 1 {
		t.Errorf("remediations = %g, want 1", got)
	}
	if got := counterValue(t, m.offloadDrift.WithLabelValues("wwan0")); got != 1 {
		t.Errorf("offload drift = %g, want 1", got)
	}
	ob.Close()
	emit(agent.Event{Kind: "incident"}) // closed outbox: logged and counted, no panic
	if got := counterValue(t, m.events.WithLabelValues("outbox-error")); got != 1 {
		t.Errorf("outbox errors = %g, want 1", got)
	}
}

func TestRecorderAttachesEvidenceToAnIncident(t *testing.T) {
	dir := t.TempDir()
	ob := mustOpen(t, dir, 100)
	store, err := OpenEvidenceStore(dir, 3)
	if err != nil {
		t.Fatal(err)
	}
	collected := 0
	r := &Recorder{Outbox: ob, Evidence: store, Log: slog.New(slog.DiscardHandler)}
	r.SetCollect(func() map[string]any {
		collected++
		return map[string]any{"udp": map[string]int{"InCsumErrors": 7}}
	})
	r.Emit(agent.Event{Kind: "action", Target: "wg0/AbCd"})
	r.Emit(agent.Event{Kind: "incident", Target: "wg0/AbCd", Summary: "probe failed 3 times"})
	if collected != 1 {
		t.Errorf("evidence collected %d times, want once: only for the incident", collected)
	}
	items := ob.Pending(0)
	if len(items) != 2 {
		t.Fatalf("queued %d events, want 2", len(items))
	}
	if items[0].Event.Evidence != nil {
		t.Errorf("an action got evidence: %v", items[0].Event.Evidence)
	}
	b, ok := items[1].Event.Evidence["bundle"].(map[string]any)
	if !ok || b["evidence_file"] == nil {
		t.Fatalf("the incident's evidence = %v, want a bundle summary with its file", items[1].Event.Evidence)
	}
	files, err := store.List()
	if err != nil || len(files) != 1 {
		t.Errorf("bundles on disk = %v, %v; want one", files, err)
	}
}

func TestEvidenceFileNamedByTimeAndIncident(t *testing.T) {
	s, err := OpenEvidenceStore(t.TempDir(), 2)
	if err != nil {
		t.Fatal(err)
	}
	sum, err := s.Save(Bundle{Incident: "inc1", Target: "wg0", Reason: "probe failed", Time: time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC),
		Sections: map[string]any{"routes": []string{"default via 10.0.0.1"}}})
	if err != nil {
		t.Fatal(err)
	}
	if sum["evidence_file"] != "evidence/20261129T120000.000Z-inc1.json" {
		t.Errorf("summary = %v", sum)
	}
}

// counterValue reads one counter through the prometheus.Metric interface.
func counterValue(t *testing.T, c prometheus.Counter) float64 {
	t.Helper()
	var out dto.Metric
	if err := c.Write(&out); err != nil {
		t.Fatal(err)
	}
	return out.GetCounter().GetValue()
}
