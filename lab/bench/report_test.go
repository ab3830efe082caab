package bench

import (
	"encoding/xml"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/edgeheal/edgeheal/lab"
)

var t0 = time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)

func at(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }

// samples makes rate messages a second for secs seconds; lost(sec) says
// whether the messages sent in that second were lost.
func samples(secs, rate int, lost func(sec float64) bool) []lab.Sample {
	var out []lab.Sample
	for i := range secs * rate {
		sent := float64(i) / float64(rate)
		s := lab.Sample{Seq: i, Sent: at(sent)}
		if !lost(sent) {
			s.Received = at(sent + 0.01)
		}
		out = append(out, s)
	}
	return out
}

func TestSeries(t *testing.T) {
	tests := []struct {
		name string
		lost func(float64) bool
		want []int
	}{
		{"nothing lost gives the full rate every second", func(float64) bool { return false }, []int{4, 4, 4, 4, 4}},
		{"a gap shows as zeros", func(s float64) bool { return s >= 2 && s < 4 }, []int{4, 4, 0, 0, 4}},
		{"everything lost is all zeros", func(float64) bool { return true }, []int{0, 0, 0, 0, 0}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// 6 s of samples, end at 6 s: the last second is still being judged.
			got := Series(samples(6, 4, tt.lost), t0, at(6), time.Second)
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("Series (-want +got):\n%s", diff)
			}
		})
	}
}

func TestSeriesCountsLateMessagesAsLost(t *testing.T) {
	s := []lab.Sample{
		{Sent: at(0.1), Received: at(0.2)},
		{Sent: at(0.5), Received: at(2)}, // 1.5 s late
		{Sent: at(1.1)},
	}
	if diff := cmp.Diff([]int{1, 0}, Series(s, t0, at(3), time.Second)); diff != "" {
		t.Errorf("Series (-want +got):\n%s", diff)
	}
}

func TestFillTelemetry(t *testing.T) {
	st := lab.Stats{
		Sent: 1000, Received: 900, LossPct: 10,
		Outages: []lab.Outage{
			{Start: at(1), End: at(2), Lost: 20},     // before the fault: ignored
			{Start: at(10), End: at(13.5), Lost: 70}, // the fault's
			{Start: at(20), End: at(21), Lost: 10},
		},
	}
	var r Result
	fillTelemetry(&r, st, at(10), at(12), at(30))
	want := Result{Sent: 1000, Delivered: 900, LossPct: 10, Outages: 2, OutageSeconds: 3.5, TotalOutageSeconds: 4.5,
		RecoverSeconds: ptr(1.5)}
	if diff := cmp.Diff(want, r); diff != "" {
		t.Errorf("fillTelemetry (-want +got):\n%s", diff)
	}
}

func TestFillTelemetryOngoingOutage(t *testing.T) {
	st := lab.Stats{Sent: 100, LossPct: 100, Outages: []lab.Outage{{Start: at(0), Lost: 100}}}
	var r Result
	fillTelemetry(&r, st, at(0), at(0), at(30))
	if !r.OutageOngoing || r.OutageSeconds != 30 || r.RecoverSeconds != nil {
		t.Errorf("got ongoing=%v outage=%v recover=%v, want ongoing, 30 s, no recovery", r.OutageOngoing, r.OutageSeconds, r.RecoverSeconds)
	}
	if got := fmtOutage(r); got != "> 30.0 s (not recovered)" {
		t.Errorf("fmtOutage = %q", got)
	}
}

func TestPercentileAndRatio(t *testing.T) {
	xs := []float64{5, 1, 4, 2, 3, 100}
	if got := Percentile(xs, 50); got != 3 {
		t.Errorf("p50 = %v, want 3", got)
	}
	if got := Percentile(xs, 99); got != 100 {
		t.Errorf("p99 = %v, want 100", got)
	}
	if !math.IsNaN(Percentile(nil, 50)) {
		t.Error("p50 of nothing is not NaN")
	}
	if r := Ratio(1, 4); r == nil || *r != 0.25 {
		t.Errorf("Ratio(1, 4) = %v, want 0.25", r)
	}
	if r := Ratio(1, 0); r != nil {
		t.Errorf("Ratio(1, 0) = %v, want nil", *r)
	}
}

// syntheticReport is a run of two contenders over three scenarios.
func syntheticReport() *Report {
	series := func(n, darkFrom, darkTo int) []int {
		s := make([]int, n)
		for i := range s {
			if i < darkFrom || i >= darkTo {
				s[i] = 20
			}
		}
		return s
	}
	rep := &Report{Started: t0, Finished: at(600), Machine: Machine{Hostname: "test", CPUs: 2, EdgehealBinaryBytes: 20 << 20}}
	rep.Results = []Result{
		{Scenario: S3a, Contender: Edgeheal, FaultAt: at(10), RestoreAt: at(30), DetectSeconds: ptr(3.1), OutageSeconds: 21, TotalOutageSeconds: 21, Outages: 1, LossPct: 50,
			Series: series(50, 10, 31), FaultOffset: 10, Marks: []Mark{{0, "blackhole"}, {20, "path back"}},
			Actions: []Action{{What: "reassert"}, {What: "handshake", Tunnel: true}, {What: "handshake", Tunnel: true}}},
		{Scenario: S1, Contender: None, OutageSeconds: 30, OutageOngoing: true, TotalOutageSeconds: 30, Outages: 1, LossPct: 100, Series: series(30, 0, 30)},
		{Scenario: S1, Contender: Edgeheal, OutageSeconds: 1.2, TotalOutageSeconds: 1.2, Outages: 1, LossPct: 4, RecoverSeconds: ptr(1.2), Series: series(30, 0, 2)},
		{Scenario: S3a, Contender: None, FaultAt: at(12), RestoreAt: at(32), OutageSeconds: 42, TotalOutageSeconds: 42, Outages: 1, LossPct: 80, Series: series(60, 12, 54), FaultOffset: 12},
		{Scenario: S5, Contender: Edgeheal, NeedlessActions: 1, Actions: []Action{{What: "handshake", Tunnel: true}}, Series: series(40, 10, 20), FaultOffset: 10},
		{Scenario: S5, Contender: None, Series: series(40, 10, 20), FaultOffset: 10},
	}
	rep.Footprints = []Footprint{{Contender: Edgeheal, RSSMiB: 12.5, CPUPct: 0.3, Bytes: 20 << 20}}
	rep.sort()
	rep.Goals = CheckGoals(rep)
	return rep
}

func TestCheckGoals(t *testing.T) {
	rep := syntheticReport()
	var got []string
	for _, g := range rep.Goals {
		got = append(got, g.Scenario+" "+g.What+" "+g.Measured+" "+map[bool]string{true: "met", false: "missed"}[g.Met])
	}
	want := []string{
		"S1 outage after the agent starts 1.20 s met",
		"S3a detection 3.10 s met",
		"S3a outage 21.00 s met",
		"S5 tunnel actions 1 missed",
		"S1 outage, never worse than WireGuard alone 1.20 s met",
		"S3a outage, never worse than WireGuard alone 21.00 s met",
		"S5 outage, never worse than WireGuard alone 0 s met",
		"footprint RSS 12.50 MiB met",
		"footprint idle CPU 0.30 % met",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("goals (-want +got):\n%s", diff)
	}
}

func TestNoWorseThanNone(t *testing.T) {
	for _, tc := range []struct {
		name           string
		none, edgeheal Result
		met            bool
	}{
		{"slower than WireGuard alone by more than 0.5 s", Result{OutageSeconds: 20.5}, Result{OutageSeconds: 23.5}, false},
		{"within 0.5 s", Result{OutageSeconds: 20.5}, Result{OutageSeconds: 20.9}, true},
		{"recovered where WireGuard alone never did", Result{OutageSeconds: 60, OutageOngoing: true}, Result{OutageSeconds: 1}, true},
		{"never recovered where WireGuard alone did", Result{OutageSeconds: 20.5}, Result{OutageSeconds: 10, OutageOngoing: true}, false},
	} {
		tc.none.Scenario, tc.none.Contender = S3a, None
		tc.edgeheal.Scenario, tc.edgeheal.Contender = S3a, Edgeheal
		gs := noWorseThanNone(&Report{Results: []Result{tc.none, tc.edgeheal}})
		if len(gs) != 1 || gs[0].Met != tc.met {
			t.Errorf("%s: %+v, want met=%v", tc.name, gs, tc.met)
		}
	}
}

func TestMarkdownOrdersScenariosAndShowsRatiosAgainstNone(t *testing.T) {
	md := syntheticReport().Markdown("chart.svg")
	var rows []string
	for _, l := range strings.Split(md, "\n") {
		if strings.HasPrefix(l, "| S") && strings.Count(l, "|") == 12 {
			f := strings.Split(l, "|")
			rows = append(rows, strings.TrimSpace(f[1])+" / "+strings.TrimSpace(f[2])+" / "+strings.TrimSpace(f[7])+" / "+strings.TrimSpace(f[8])+" / "+strings.TrimSpace(f[9]))
		}
	}
	want := []string{
		"S1 offload on at start / none / — / — / 0",
		"S1 offload on at start / edgeheal / ×0.04 / ×0.04 / 0",
		"S3a blackhole 20 s / none / — / — / 0",
		"S3a blackhole 20 s / edgeheal / ×0.5 / ×0.625 / 3: reassert, handshake ×2",
		"S5 broker outage / none / — / — / 0",
		"S5 broker outage / edgeheal / — / — / 1: handshake",
	}
	if diff := cmp.Diff(want, rows); diff != "" {
		t.Errorf("result rows (scenario / contender / outage ratio / loss ratio / actions) (-want +got):\n%s\n%s", diff, md)
	}
	for _, s := range []string{"![telemetry delivered", "chart.svg", "## Footprint", "| edgeheal | 12.50 MiB"} {
		if !strings.Contains(md, s) {
			t.Errorf("markdown lacks %q", s)
		}
	}
}

func TestChartIsSVGWithAPanelPerScenarioAndALinePerResult(t *testing.T) {
	rep := syntheticReport()
	svg := Chart(rep)
	var doc struct {
		XMLName   xml.Name `xml:"svg"`
		Polylines []struct {
			Stroke string `xml:"stroke,attr"`
			Points string `xml:"points,attr"`
		} `xml:"polyline"`
		Texts []string `xml:"text"`
	}
	if err := xml.Unmarshal(svg, &doc); err != nil {
		t.Fatalf("chart is not XML: %v", err)
	}
	if got, want := len(doc.Polylines), len(rep.Results); got != want {
		t.Errorf("%d lines, want one per result (%d)", got, want)
	}
	titles := 0
	for _, s := range doc.Texts {
		for _, sc := range []string{S1, S3a, S5} {
			if s == sc+" "+Titles[sc] {
				titles++
			}
		}
	}
	if titles != 3 {
		t.Errorf("%d panel titles, want 3: %q", titles, doc.Texts)
	}
	for _, p := range doc.Polylines {
		if p.Stroke != colors[Edgeheal] && p.Stroke != colors[None] {
			t.Errorf("line colour %s is not a contender's", p.Stroke)
		}
		if strings.Contains(p.Points, "NaN") || strings.Contains(p.Points, "Inf") {
			t.Errorf("line has bad coordinates: %s", p.Points)
		}
	}
}

func TestWriteStoresMarkdownJSONAndChart(t *testing.T) {
	dir := t.TempDir()
	md, err := syntheticReport().Write(dir)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasSuffix(md, "results.md") {
		t.Errorf("Write returned %s", md)
	}
	for _, f := range []string{"results.md", "results.json", "chart.svg", "run-20261129T120000Z.json", "run-20261129T120000Z.md", "run-20261129T120000Z.svg"} {
		if _, err := readFile(dir, f); err != nil {
			t.Errorf("%s: %v", f, err)
		}
	}
}

func TestParseStatCPU(t *testing.T) {
	// /proc/<pid>/stat of a process named "a b) c" (spaces and a paren).
	stat := "4242 (a b) c) S 1 4242 4242 0 -1 4194560 600 0 0 0 150 50 7 3 20 0 9 0 12345 800000000 5000 18446744073709551615"
	total, children, err := parseStatCPU(stat)
	if err != nil {
		t.Fatal(err)
	}
	if total != 210 || children != 10 {
		t.Errorf("got total %d children %d, want 210 and 10", total, children)
	}
	if _, _, err := parseStatCPU("garbage"); err == nil {
		t.Error("no error for garbage")
	}
}

func TestParseLogs(t *testing.T) {
	in := `{"time":"2026-11-29T12:00:01.5Z","level":"WARN","msg":"peer dark: incident opened","peer":"wg/abc"}
not json
`
	got := ParseLogs([]byte(in))
	want := []LogLine{
		{Time: at(1.5), Level: "WARN", Msg: "peer dark: incident opened", Attrs: map[string]any{"peer": "wg/abc"}},
		{Msg: "not json"},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("ParseLogs (-want +got):\n%s", diff)
	}
}

func readFile(dir, name string) ([]byte, error) { return os.ReadFile(filepath.Join(dir, name)) }

func TestLogEventsAndActions(t *testing.T) {
	log := `{"time":"2026-11-29T12:00:10Z","level":"WARN","msg":"peer dark: incident opened","component":"tunnel","peer":"x-wg/AbCd"}
{"time":"2026-11-29T12:00:10.1Z","level":"INFO","msg":"x-wg/AbCd dark: probe missed: timeout","component":"events","event_id":"e1","kind":"incident","target":"x-wg/AbCd","result":"opened"}
{"time":"2026-11-29T12:00:10.2Z","level":"INFO","msg":"reassert on x-wg: unchanged","component":"events","event_id":"e2","kind":"action","target":"x-wg","action":"reassert","result":"unchanged","duration_seconds":0.1}
{"time":"2026-11-29T12:00:11Z","level":"INFO","msg":"workload telemetry: marked suspect","component":"events","event_id":"e3","kind":"action","target":"telemetry","action":"suspect-tunnel","result":"ok"}
{"time":"2026-11-29T12:00:12Z","level":"INFO","msg":"handshake on x-wg/AbCd: changed","component":"events","event_id":"e4","kind":"action","target":"x-wg/AbCd","action":"handshake","result":"changed","duration_seconds":0.5}
`
	evs := LogEvents(ParseLogs([]byte(log)))
	if len(evs) != 4 {
		t.Fatalf("%d events, want 4 (only the events component): %+v", len(evs), evs)
	}
	when, what, ok := agentDetected(evs, at(5))
	if !ok || !when.Equal(at(10.1)) || what != "incident: x-wg/AbCd dark: probe missed: timeout" {
		t.Errorf("detected %v %v %q", ok, when, what)
	}
	got := agentActions(evs, at(10.15), "x-wg")
	want := []Action{
		{At: at(10.1), What: "reassert", Target: "x-wg", Tunnel: true}, // logged at 10.2 after 0.1 s: started 10.1
		{At: at(11), What: "suspect-tunnel", Target: "telemetry"},
		{At: at(11.5), What: "handshake", Target: "x-wg/AbCd", Tunnel: true},
	}
	// The reassert started before from (10.15): not counted.
	want = want[1:]
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("actions (-want +got):\n%s", diff)
	}
}

// The recorder logs an event when it records it, which can be a round
// later; its ts is when it happened, and that is what counts.
func TestLogEventsTakeTheEventsOwnTime(t *testing.T) {
	log := `{"time":"2026-11-29T12:00:11.3Z","level":"INFO","msg":"x-wg/AbCd dark","component":"events","event_id":"e1","kind":"incident","target":"x-wg/AbCd","result":"opened","ts":"2026-11-29T12:00:10.05Z"}
{"time":"2026-11-29T12:00:12.9Z","level":"INFO","msg":"handshake on x-wg/AbCd: changed","component":"events","event_id":"e2","kind":"action","target":"x-wg/AbCd","action":"handshake","result":"changed","duration_seconds":0.5,"ts":"2026-11-29T12:00:11.4Z"}
`
	evs := LogEvents(ParseLogs([]byte(log)))
	if len(evs) != 2 || !evs[0].Time.Equal(at(10.05)) || !evs[1].Time.Equal(at(11.4)) {
		t.Errorf("events %+v, want them at their own times 10.05 and 11.4 (an action's ts is its start)", evs)
	}
}

func TestS8GoalsAndTable(t *testing.T) {
	f := func(v float64) *float64 { return &v }
	transfers := func(first float64, later ...float64) []TransferResult {
		var rs []TransferResult
		for _, k := range TransferKinds {
			rs = append(rs, TransferResult{Kind: k.String(), BeforeSeconds: 0.01, FirstSeconds: f(first), LaterSeconds: later})
		}
		return rs
	}
	rep := &Report{Results: []Result{
		{Scenario: S8, Contender: None, Transfers: []TransferResult{{Kind: "tunnel-down", BeforeSeconds: 0.01}, {Kind: "tunnel-up"}, {Kind: "uplink-down"}, {Kind: "uplink-up"}}},
		{Scenario: S8, Contender: MTUProbing, Transfers: transfers(6.6, 6.5, 6.6)},
		{Scenario: S8, Contender: Edgeheal, Transfers: transfers(3.1, 0.012, 0.015), ReportSeconds: f(3.2),
			Actions: []Action{{What: "mss-clamp"}, {What: "link-mtu"}}},
	}}
	var got []string
	for _, g := range CheckGoals(rep) {
		if g.Scenario == S8 {
			got = append(got, g.What+": "+g.Measured+" "+map[bool]string{true: "met", false: "missed"}[g.Met])
		}
	}
	want := []string{
		"a new 256 KiB transfer through the tunnel completes, both ways: 3.10 s (tunnel-down) met",
		"a new 256 KiB transfer over the uplink completes, both ways: 3.10 s (uplink-down) met",
		"every later transfer at full speed (a new connection each): 8, the slowest 0.015 s, 0 failed met",
		"its own report at the cloud, over the uplink: 3.20 s met",
		"rungs of the ladder (forced handshakes, rebinds, bounces, restarts, ...): 0 met",
		"small telemetry interrupted: 0 outages met",
		"outage, never worse than WireGuard alone: 0 s met",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("S8 goals (-want +got):\n%s", diff)
	}
	md := rep.Markdown("")
	for _, s := range []string{"## S8: bulk transfers", "| none | max 0.010 s | never | never | never | never | — | — | 0 |",
		"| mtu-probing | max 0.010 s | 6.60 s | 6.60 s | 6.60 s | 6.60 s | 8: p50 6.500 s, max 6.600 s |",
		"| edgeheal | max 0.010 s | 3.10 s | 3.10 s | 3.10 s | 3.10 s | 8: p50 0.012 s, max 0.015 s | 3.20 s | 2: mss-clamp, link-mtu |"} {
		if !strings.Contains(md, s) {
			t.Errorf("markdown lacks %q:\n%s", s, md)
		}
	}
	var actions Result
	scoreActions(&actions, time.Time{}, time.Time{}, "", false, []Action{{What: "mss-clamp"}, {What: "handshake"}, {What: "reassert"}})
	actions.Scenario = S8
	scoreActions(&actions, time.Time{}, time.Time{}, "", false, []Action{{What: "mss-clamp"}, {What: "handshake"}, {What: "reassert"}})
	if actions.NeedlessActions != 2 {
		t.Errorf("S8 needless actions = %d, want the two rungs", actions.NeedlessActions)
	}
}

func TestPlays(t *testing.T) {
	if plays(MTUProbing, S1) || !plays(MTUProbing, S8) || !plays(Edgeheal, S1) || !plays(None, S8) {
		t.Error("mtu-probing plays S8 only; every other contender plays everything")
	}
}

// The S2 goal is judged by the kernel's clock when every fixed re-plug
// has that figure, and otherwise by the bench's, saying why.
func TestS2GoalRow(t *testing.T) {
	for _, tc := range []struct {
		name        string
		bench, kern []float64
		unfixed     int
		want        string
	}{
		{"every re-plug timed by the kernel", []float64{1.5, 2.0}, []float64{2.5, 4.0},
			0, "offload exposure p99 (kernel's clock) 4.0 ms met"},
		{"the kernel's clock misses where the bench's would not", []float64{1.5, 2.0}, []float64{2.5, 6.0},
			0, "offload exposure p99 (kernel's clock) 6.0 ms missed"},
		{"one re-plug not timed by the kernel", []float64{1.5, 2.0, 3.0}, []float64{2.5, 4.0},
			0, "offload exposure p99 (as the bench saw it: 1 of 3 re-plugs not timed by the kernel) 3.0 ms met"},
		{"no trace", []float64{1.5, 2.0}, nil,
			0, "offload exposure p99 (as the bench saw it) 2.0 ms met"},
		{"a re-plug not fixed", []float64{1.5}, []float64{2.5},
			1, "offload exposure p99 (kernel's clock) 2.5 ms, 1 re-plugs not fixed missed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rep := &Report{Results: []Result{{Scenario: S2, Contender: Edgeheal,
				ExposureMs: tc.bench, ExposureKernelMs: tc.kern, ExposureUnfixed: tc.unfixed}}}
			var got []string
			for _, g := range CheckGoals(rep) {
				if g.Scenario == S2 && strings.HasPrefix(g.What, "offload exposure") {
					got = append(got, g.What+" "+g.Measured+" "+map[bool]string{true: "met", false: "missed"}[g.Met])
				}
			}
			if diff := cmp.Diff([]string{tc.want}, got); diff != "" {
				t.Errorf("S2 exposure goal (-want +got):\n%s", diff)
			}
		})
	}
}

// The report says how S2's exposure divides between the link's making and
// the agent, from the re-plugs where the trace told them apart.
func TestS2NotesSplitTheExposure(t *testing.T) {
	r := Result{Scenario: S2, Contender: Edgeheal, ExposureMs: []float64{1, 2, 3}, ExposureKernelMs: []float64{2, 3, 6},
		ExposureSplit: []ExposureSplit{{MakingMs: 1.5, AgentMs: 0.5}, {MakingMs: 1.0, AgentMs: 5.0}}}
	notes := strings.Join(resultNotes(r), "; ")
	want := "of which the link's making (kernel and lab) p50 1.0 ms, max 1.5 ms; the agent's part p50 0.5 ms, max 5.0 ms"
	if !strings.Contains(notes, want) {
		t.Errorf("notes %q lack %q", notes, want)
	}
}
