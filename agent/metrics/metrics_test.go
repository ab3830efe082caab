package metrics

import (
	"flag"
	"fmt"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus/testutil/promlint"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/edgeheal/edgeheal/agent/core"
	"github.com/edgeheal/edgeheal/agent/recorder"
	"github.com/edgeheal/edgeheal/wire"
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
	m := New(Options{Version: "1.2.3", Outbox: fakeOutboxStats{3, 7}, MQTT: func() bool { return true },
		History: func() []TargetTotal {
			return []TargetTotal{{Kind: "peer", Target: "wg0/AbCd", DarkSeconds: 30, DegradedSeconds: 0, Incidents: 2}}
		}})
	m.SetChecks([]wire.Check{
		{Kind: "peer", Target: "wg0/AbCd", State: "ok", Healthy: true, Peer: &wire.PeerInfo{LastHandshake: time.Unix(1_700_000_000, 0), HandshakeAgeSeconds: 42}},
		{Kind: wire.KindPathMTU, Target: "wg0", State: wire.CheckPathClamped, Healthy: true, PathMTU: &wire.PathMTUInfo{
			Tunnel: &wire.PathInfo{Link: "wg0", LinkMTU: 1420, PathMTU: 1328, ClampMTU: 1328},
			Uplink: &wire.PathInfo{Link: "wwan0", LinkMTU: 1500, PathMTU: 1400, ClampMTU: 1400}}},
	})
	m.ObserveProbe(core.ProbeSample{Kind: "tunnel", Target: "wg0", Result: "ok", Duration: 3 * time.Millisecond})
	m.ObserveEvent(core.Event{Kind: "action", Action: "handshake", Result: "ok"})
	m.ObserveEvent(core.Event{Kind: "offload-drift", Target: "wwan0"})
	m.ObserveEvent(core.Event{Kind: "recovered", Target: "wg0/AbCd", Duration: 10.5})
	m.ConfigLoaded(true, time.Unix(1_700_000_000, 0))
	return m
}

func TestTheHistoryIsCountedAndIncidentsTimed(t *testing.T) {
	mfs := gather(t, filledMetrics())
	for _, c := range []struct {
		name string
		want float64
	}{{"edgeheal_dark_seconds_total", 30}, {"edgeheal_incidents_total", 2}, {"edgeheal_degraded_seconds_total", 0}} {
		if v, ok := value(mfs, c.name, "kind=peer", "target=wg0/AbCd"); !ok || v != c.want {
			t.Errorf("%s{wg0/AbCd} = %v, %v; want %v", c.name, v, ok, c.want)
		}
	}
	for _, mf := range mfs {
		if mf.GetName() == "edgeheal_incident_duration_seconds" {
			h := mf.GetMetric()[0].GetHistogram()
			if h.GetSampleCount() != 1 || h.GetSampleSum() != 10.5 {
				t.Errorf("incident durations: %d observed, sum %v; want the one of 10.5 s", h.GetSampleCount(), h.GetSampleSum())
			}
			return
		}
	}
	t.Error("no edgeheal_incident_duration_seconds")
}

// gather scrapes m's handler and parses the body with prometheus/common's
// text parser, the one Prometheus itself uses: what it cannot read fails
// the test. The families come back sorted by name.
func gather(t *testing.T, m *Metrics) []*dto.MetricFamily {
	t.Helper()
	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	if ct := rec.Header().Get("Content-Type"); ct != "text/plain; version=0.0.4; charset=utf-8" {
		t.Errorf("Content-Type %q", ct)
	}
	p := expfmt.NewTextParser(model.LegacyValidation)
	byName, err := p.TextToMetricFamilies(rec.Body)
	if err != nil {
		t.Fatalf("parsing the scrape: %v", err)
	}
	var mfs []*dto.MetricFamily
	for _, mf := range byName {
		mfs = append(mfs, mf)
	}
	sort.Slice(mfs, func(i, j int) bool { return mfs[i].GetName() < mfs[j].GetName() })
	return mfs
}

// value is the value of the counter or gauge series name{labels} (labels
// as "k=v" pairs in name order), and whether there is one.
func value(mfs []*dto.MetricFamily, name string, labels ...string) (float64, bool) {
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, mt := range mf.GetMetric() {
			var l []string
			for _, lp := range mt.GetLabel() {
				l = append(l, lp.GetName()+"="+lp.GetValue())
			}
			if slices.Equal(l, labels) {
				if c := mt.GetCounter(); c != nil {
					return c.GetValue(), true
				}
				return mt.GetGauge().GetValue(), true
			}
		}
	}
	return 0, false
}

func TestMetricNamesMatchTheGoldenList(t *testing.T) {
	mfs := gather(t, filledMetrics())
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
	problems, err := promlint.NewWithMetricFamilies(gather(t, filledMetrics())).Lint()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("%s: %s", p.Metric, p.Text)
	}
}

func TestPathMTUSeriesFollowTheCheck(t *testing.T) {
	m := New(Options{Version: "x"})
	clamped := wire.Check{Kind: wire.KindPathMTU, Target: "wg0", State: wire.CheckPathClamped, Healthy: true, PathMTU: &wire.PathMTUInfo{
		Tunnel: &wire.PathInfo{Link: "wg0", LinkMTU: 1420, PathMTU: 1328, ClampMTU: 1328},
		Uplink: &wire.PathInfo{Link: "wwan0", LinkMTU: 1500, PathMTU: 1400, ClampMTU: 1400}, Checks: 7}}
	m.SetChecks([]wire.Check{clamped})
	mfs := gather(t, m)
	if v, ok := value(mfs, "edgeheal_path_mtu_checks_total", "interface=wg0"); !ok || v != 7 {
		t.Errorf("edgeheal_path_mtu_checks_total = %v, %v; want 7", v, ok)
	}
	for _, tc := range []struct {
		name, path, link string
		want             float64
	}{
		{"edgeheal_path_mtu_bytes", "tunnel", "wg0", 1328}, {"edgeheal_path_mtu_bytes", "uplink", "wwan0", 1400},
		{"edgeheal_path_mtu_clamp_bytes", "tunnel", "wg0", 1328}, {"edgeheal_path_mtu_clamp_bytes", "uplink", "wwan0", 1400},
	} {
		if v, ok := value(mfs, tc.name, "interface=wg0", "link="+tc.link, "path="+tc.path); !ok || v != tc.want {
			t.Errorf("%s{%s} = %v, %v; want %v", tc.name, tc.path, v, ok, tc.want)
		}
	}
	ok := wire.Check{Kind: wire.KindPathMTU, Target: "wg0", State: "ok", Healthy: true, PathMTU: &wire.PathMTUInfo{
		Tunnel: &wire.PathInfo{Link: "wg0", LinkMTU: 1420, PathMTU: 1420}}}
	m.SetChecks([]wire.Check{ok})
	mfs = gather(t, m)
	if v, ok := value(mfs, "edgeheal_path_mtu_bytes", "interface=wg0", "link=wg0", "path=tunnel"); !ok || v != 1420 {
		t.Errorf("tunnel path MTU after it grew = %v, %v", v, ok)
	}
	for _, l := range [][]string{{"edgeheal_path_mtu_bytes", "wwan0", "uplink"}, {"edgeheal_path_mtu_clamp_bytes", "wg0", "tunnel"}} {
		if _, ok := value(mfs, l[0], "interface=wg0", "link="+l[1], "path="+l[2]); ok {
			t.Errorf("%s{%s} is still there", l[0], l[2])
		}
	}
	m.SetChecks(nil)
	mfs = gather(t, m)
	if _, ok := value(mfs, "edgeheal_path_mtu_bytes", "interface=wg0", "link=wg0", "path=tunnel"); ok {
		t.Error("the series outlives its check")
	}
	if _, ok := value(mfs, "edgeheal_path_mtu_checks_total", "interface=wg0"); ok {
		t.Error("the checks counter outlives its check")
	}
}

func TestCheckSeriesFollowTheChecks(t *testing.T) {
	m := New(Options{Version: "x"})
	m.SetChecks([]wire.Check{{Kind: "peer", Target: "wg0/AbCd", State: "ok", Healthy: true}, {Kind: "uplink", Target: "wwan0", State: "ok", Healthy: true}})
	m.SetChecks([]wire.Check{{Kind: "peer", Target: "wg0/AbCd", State: "down", Healthy: false}})
	mfs := gather(t, m)
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
	m.ObserveEvent(core.Event{Kind: "action", Action: "handshake", Result: "changed"})
	m.ObserveEvent(core.Event{Kind: "offload-drift", Target: "wwan0"})
	m.ObserveEvent(core.Event{Kind: recorder.EventOutboxError})
	mfs := gather(t, m)
	for _, tt := range []struct {
		name   string
		metric string
		labels []string
	}{
		{"remediations handshake/changed", "edgeheal_remediations_total", []string{"action=handshake", "result=changed"}},
		{"offload drift wwan0", "edgeheal_offload_drift_total", []string{"link=wwan0"}},
		{"events outbox-error", "edgeheal_events_total", []string{"kind=" + recorder.EventOutboxError}},
	} {
		if got, ok := value(mfs, tt.metric, tt.labels...); !ok || got != 1 {
			t.Errorf("%s = %g (present %v), want 1", tt.name, got, ok)
		}
	}
}

func TestAnOffloadFightCountsEveryFlip(t *testing.T) {
	m := New(Options{Version: "t"})
	m.ObserveEvent(core.Event{Kind: "offload-drift", Target: "wwan0"})
	m.ObserveEvent(core.Event{Kind: wire.EventOffloadFight, Result: "started", Target: "wwan0", Evidence: map[string]any{"new_fixes": 1}})
	m.ObserveEvent(core.Event{Kind: wire.EventOffloadFight, Result: "ongoing", Target: "wwan0", Evidence: map[string]any{"new_fixes": 598}})
	m.ObserveEvent(core.Event{Kind: wire.EventOffloadFight, Result: "ended", Target: "wwan0", Evidence: map[string]any{"new_fixes": float64(10)}})
	if got, _ := value(gather(t, m), "edgeheal_offload_drift_total", "link=wwan0"); got != 610 {
		t.Errorf("drift counter = %g after a fight of 610 flips", got)
	}
}
