package metrics

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus/testutil/promlint"
	dto "github.com/prometheus/client_model/go"

	"github.com/edgeheal/edgeheal/agent"
)

var update = flag.Bool("update", false, "rewrite golden files in testdata")

type fakeOutboxStats struct {
	depth   int
	dropped uint64
}

func (f fakeOutboxStats) Depth() int      { return f.depth }
func (f fakeOutboxStats) Dropped() uint64 { return f.dropped }
func (f fakeOutboxStats) MemoryOnly() int { return 0 }
func (f fakeOutboxStats) Damaged() uint64 { return 0 }

// filledMetrics returns metrics with one observation of every kind, so that
// every vector shows up in a scrape.
func filledMetrics() *Metrics {
	m := New(Options{Version: "1.2.3", Outbox: fakeOutboxStats{3, 7}, MQTT: func() bool { return true }})
	m.SetChecks([]agent.Check{
		{Kind: "peer", Target: "wg0/AbCd", State: "ok", Healthy: true, Peer: &agent.PeerInfo{LastHandshake: time.Unix(1_700_000_000, 0), HandshakeAgeSeconds: 42}},
	})
	m.ObserveProbe(agent.ProbeSample{Kind: "tunnel", Target: "wg0", Result: "ok", Duration: 3 * time.Millisecond})
	m.ObserveEvent(agent.Event{Kind: "action", Action: "handshake", Result: "ok"})
	m.ObserveEvent(agent.Event{Kind: "offload-drift", Target: "wwan0"})
	m.ConfigLoaded(true, time.Unix(1_700_000_000, 0))
	return m
}

func TestMetricNamesMatchTheGoldenList(t *testing.T) {
	mfs, err := filledMetrics().Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	var lines []string
	for _, mf := range mfs {
		if !strings.HasPrefix(mf.GetName(), "edgeheal_") {
			continue
		}
		var labels []string
		for _, lp := range mf.GetMetric()[0].GetLabel() {
			labels = append(labels, lp.GetName())
		}
		sort.Strings(labels)
		lines = append(lines, fmt.Sprintf("%s %s {%s}", mf.GetName(), strings.ToLower(mf.GetType().String()), strings.Join(labels, ",")))
	}
	sort.Strings(lines)
	got := strings.Join(lines, "\n") + "\n"
	golden := filepath.Join("testdata", "metrics.golden")
	if *update {
		if err := os.WriteFile(golden, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatalf("%v (run go test ./agent/metrics -run Golden -update to create it)", err)
	}
	if diff := cmp.Diff(string(want), got); diff != "" {
		t.Errorf("metric names changed; dashboards and alerts depend on them (-want +got):\n%s", diff)
	}
}

func TestMetricsPassPromlint(t *testing.T) {
	mfs, err := filledMetrics().Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	var ours = mfs[:0]
	for _, mf := range mfs {
		if strings.HasPrefix(mf.GetName(), "edgeheal_") {
			ours = append(ours, mf)
		}
	}
	problems, err := promlint.NewWithMetricFamilies(ours).Lint()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("%s: %s", p.Metric, p.Text)
	}
}

func TestCheckSeriesFollowTheChecks(t *testing.T) {
	m := New(Options{Version: "x"})
	m.SetChecks([]agent.Check{{Kind: "peer", Target: "wg0/AbCd", State: "ok", Healthy: true}, {Kind: "uplink", Target: "wwan0", State: "ok", Healthy: true}})
	m.SetChecks([]agent.Check{{Kind: "peer", Target: "wg0/AbCd", State: "down", Healthy: false}})
	mfs, err := m.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, mf := range mfs {
		if mf.GetName() != "edgeheal_check_state" && mf.GetName() != "edgeheal_check_healthy" {
			continue
		}
		for _, mt := range mf.GetMetric() {
			var l []string
			for _, lp := range mt.GetLabel() {
				l = append(l, lp.GetName()+"="+lp.GetValue())
			}
			got = append(got, fmt.Sprintf("%s{%s} %g", mf.GetName(), strings.Join(l, ","), mt.GetGauge().GetValue()))
		}
	}
	want := []string{
		"edgeheal_check_healthy{kind=peer,target=wg0/AbCd} 0",
		"edgeheal_check_state{kind=peer,state=down,target=wg0/AbCd} 1",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("series (-want +got):\n%s", diff)
	}
}

func TestEventsAreCountedByKindAndDeriveTheirCounters(t *testing.T) {
	m := New(Options{Version: "t"})
	m.ObserveEvent(agent.Event{Kind: "action", Action: "handshake", Result: "changed"})
	m.ObserveEvent(agent.Event{Kind: "offload-drift", Target: "wwan0"})
	m.ObserveEvent(agent.Event{Kind: agent.EventOutboxError})
	for _, tt := range []struct {
		name string
		c    interface{ Write(*dto.Metric) error }
	}{
		{"remediations handshake/changed", m.remediations.WithLabelValues("handshake", "changed")},
		{"offload drift wwan0", m.offloadDrift.WithLabelValues("wwan0")},
		{"events outbox-error", m.events.WithLabelValues(agent.EventOutboxError)},
	} {
		var out dto.Metric
		if err := tt.c.Write(&out); err != nil {
			t.Fatal(err)
		}
		if got := out.GetCounter().GetValue(); got != 1 {
			t.Errorf("%s = %g, want 1", tt.name, got)
		}
	}
}

func TestAnOffloadFightCountsEveryFlip(t *testing.T) {
	m := New(Options{Version: "t"})
	m.ObserveEvent(agent.Event{Kind: "offload-drift", Target: "wwan0"})
	m.ObserveEvent(agent.Event{Kind: agent.EventOffloadFight, Result: "started", Target: "wwan0", Evidence: map[string]any{"new_fixes": 1}})
	m.ObserveEvent(agent.Event{Kind: agent.EventOffloadFight, Result: "ongoing", Target: "wwan0", Evidence: map[string]any{"new_fixes": 598}})
	m.ObserveEvent(agent.Event{Kind: agent.EventOffloadFight, Result: "ended", Target: "wwan0", Evidence: map[string]any{"new_fixes": float64(10)}})
	var out dto.Metric
	if err := m.offloadDrift.WithLabelValues("wwan0").Write(&out); err != nil {
		t.Fatal(err)
	}
	if got := out.GetCounter().GetValue(); got != 610 {
		t.Errorf("drift counter = %g after a fight of 610 flips", got)
	}
}
