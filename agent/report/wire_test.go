package report

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/edgeheal/edgeheal/agent"
)

func TestEmitterQueuesDurablyAndCounts(t *testing.T) {
	dir := t.TempDir()
	ob := mustOpen(t, dir, 100)
	m := NewMetrics(MetricsOptions{Version: "t", Outbox: ob})
	emit := Emitter(ob, m, nil)
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

func TestCaptureIsSaveWithPlainArguments(t *testing.T) {
	s, err := OpenEvidenceStore(t.TempDir(), 2)
	if err != nil {
		t.Fatal(err)
	}
	sum, err := s.Capture("inc1", "wg0", "probe failed", time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC),
		map[string]any{"routes": []string{"default via 10.0.0.1"}})
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
