package metrics

import (
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	dto "github.com/prometheus/client_model/go"
	"google.golang.org/protobuf/proto"

	"github.com/edgeheal/edgeheal/agent/core"
	"github.com/edgeheal/edgeheal/wire"
)

// TestTheStandardFamiliesAreClientGolangs: the go_* and process_*
// families have the names, types and help texts of client_golang's Go and
// process collectors (the library the daemon used before; dashboards
// graph these), so nothing a scraper saw is gone. promhttp's own error
// counter is the one family left out: there is no promhttp.
func TestTheStandardFamiliesAreClientGolangs(t *testing.T) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	theirs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	describe := func(mfs []*dto.MetricFamily) []string {
		var out []string
		for _, mf := range mfs {
			if n := mf.GetName(); strings.HasPrefix(n, "go_") || strings.HasPrefix(n, "process_") {
				out = append(out, fmt.Sprintf("%s %s %q", n, mf.GetType(), mf.GetHelp()))
			}
		}
		return out
	}
	if diff := cmp.Diff(describe(theirs), describe(gather(t, New(Options{Version: "t"})))); diff != "" {
		t.Errorf("go_* and process_* families differ from client_golang's (-theirs +ours):\n%s", diff)
	}
}

// TestTheProbeHistogramIsClientGolangs: the same observations give the
// same buckets, sum and count as a client_golang histogram with the same
// bounds, an observation on a bound included.
func TestTheProbeHistogramIsClientGolangs(t *testing.T) {
	ours := New(Options{Version: "t"})
	theirs := prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "edgeheal_probe_duration_seconds", Help: "x", Buckets: probeBuckets,
	}, []string{"kind", "target", "result"})
	for _, d := range []time.Duration{300 * time.Microsecond, time.Millisecond, 3 * time.Millisecond, 40 * time.Millisecond, 2 * time.Second, 9 * time.Second} {
		ours.ObserveProbe(core.ProbeSample{Kind: "tunnel", Target: "wg0", Result: "ok", Duration: d})
		theirs.WithLabelValues("tunnel", "wg0", "ok").Observe(d.Seconds())
	}
	var want dto.Metric
	if err := theirs.WithLabelValues("tunnel", "wg0", "ok").(prometheus.Metric).Write(&want); err != nil {
		t.Fatal(err)
	}
	for _, mf := range gather(t, ours) {
		if mf.GetName() != "edgeheal_probe_duration_seconds" {
			continue
		}
		got := mf.GetMetric()[0].GetHistogram()
		// The text format writes the +Inf bucket; client_golang's own
		// struct leaves it implied by the count.
		if n := len(got.Bucket); n > 0 && math.IsInf(got.Bucket[n-1].GetUpperBound(), 1) {
			if got.Bucket[n-1].GetCumulativeCount() != got.GetSampleCount() {
				t.Errorf("+Inf bucket %d, count %d", got.Bucket[n-1].GetCumulativeCount(), got.GetSampleCount())
			}
			got.Bucket = got.Bucket[:n-1]
		} else {
			t.Error("no +Inf bucket")
		}
		w := want.GetHistogram()
		w.CreatedTimestamp = nil
		if !proto.Equal(got, w) {
			t.Errorf("histogram\n got %v\nwant %v", got, w)
		}
		return
	}
	t.Fatal("no edgeheal_probe_duration_seconds in the scrape")
}

// TestALabelValueIsEscaped: a target with a quote, a backslash and a
// newline (an interface name cannot have them, a workload name could)
// reads back as written.
func TestALabelValueIsEscaped(t *testing.T) {
	m := New(Options{Version: "t"})
	target := "we\"ird\\name\nx"
	m.SetChecks([]wire.Check{{Kind: "workload", Target: target, State: "ok", Healthy: true}})
	if got, ok := value(gather(t, m), "edgeheal_check_healthy", "kind=workload", "target="+target); !ok || got != 1 {
		t.Errorf("edgeheal_check_healthy for %q: %g, present %v", target, got, ok)
	}
}
