package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/edgeheal/edgeheal/agent/core"
	"github.com/edgeheal/edgeheal/agent/history"
	"github.com/edgeheal/edgeheal/wire"
)

var historyNow = time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)

// sampleHistory is three days of a node: today with two incidents kept
// in full (one healed by a handshake, one open and given up), yesterday
// not observed, the day before with one incident older than those kept.
func sampleHistory() wire.History {
	day := 24 * 3600
	start := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	return wire.History{V: wire.Version, Node: "edge-17", Site: "plant-7", TS: historyNow, Since: start.Add(8 * time.Hour),
		Days: wire.Series{Start: start, Step: day,
			Healthy: []int{57590, 0, 43100}, Dark: []int{10, 0, 8}, Degraded: []int{0, 0, 92}, Incidents: []int{1, 0, 2}},
		Targets: []wire.TargetSummary{
			{Kind: wire.KindPeer, Target: "wg0/AbCdEfGh", HealthySeconds: 100690, DarkSeconds: 18, DegradedSeconds: 92, Incidents: 3, GaveUps: 1,
				OutageP50Seconds: 10.2, OutageP95Seconds: 10.2, OutageMaxSeconds: 10.2, MTTRSeconds: 9.1, Repairs: map[string]int{"handshake": 1, "itself": 1}},
			{Kind: wire.KindUplink, Target: "wwan0", HealthySeconds: 100800},
		},
		Incidents: []wire.Incident{
			{ID: "e2", Kind: wire.KindPeer, Target: "wg0/AbCdEfGh", Start: historyNow.Add(-92 * time.Second), DurationSeconds: 92,
				Diagnosis: "wg0/AbCdEfGh dark, not acting: uplink outage: no default route", Repairs: []string{"reassert"}, GaveUp: true},
			{ID: "e1", Kind: wire.KindPeer, Target: "wg0/AbCdEfGh", Start: historyNow.Add(-2 * time.Hour), End: historyNow.Add(-2*time.Hour + 8*time.Second),
				DurationSeconds: 8, Diagnosis: "wg0/AbCdEfGh dark: probe missed: timeout", Repairs: []string{"reassert", "handshake"}, HealedBy: "handshake"},
		},
	}
}

func TestHistoryTableShowsEachDayAndSaysWhatItCannotKnow(t *testing.T) {
	var buf bytes.Buffer
	if err := writeHistory(&buf, sampleHistory(), 14); err != nil {
		t.Fatal(err)
	}
	golden := filepath.Join("testdata", "history.golden")
	if os.Getenv("EDGEHEAL_UPDATE_GOLDEN") != "" {
		os.WriteFile(golden, buf.Bytes(), 0o644)
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(string(want), buf.String()); diff != "" {
		t.Errorf("history table (-want +got; EDGEHEAL_UPDATE_GOLDEN=1 rewrites it):\n%s", diff)
	}
	out := buf.String()
	// Today: two incidents kept in full, one closed in 8 s by a handshake.
	if !strings.Contains(out, "2026-12-03  99.769 %") || !strings.Contains(out, "2          8.0s        8.0s  8.0s  8.0s  handshake 1  1") {
		t.Errorf("today's row is not 99.769 %% with one 8 s outage healed by a handshake and one gave-up:\n%s", out)
	}
	// The day before: its incident is older than those kept, so only
	// its count is known.
	if !strings.Contains(out, "2026-12-01  99.983 %      10s   0s        1          -           -     -     -     -") {
		t.Errorf("the oldest day shows figures it cannot know:\n%s", out)
	}
	if !strings.Contains(out, "2026-12-02  not observed") {
		t.Errorf("a day the agent did not run is not shown as not observed:\n%s", out)
	}
}

func TestHistoryTableShowsOnlyTheDaysAskedFor(t *testing.T) {
	var buf bytes.Buffer
	if err := writeHistory(&buf, sampleHistory(), 1); err != nil {
		t.Fatal(err)
	}
	if out := buf.String(); !strings.Contains(out, "2026-12-03") || strings.Contains(out, "2026-12-02  ") || strings.Contains(out, "2026-12-01  ") {
		t.Errorf("--days 1 shows other days:\n%s", out)
	}
}

func TestHistoryEscapesWhatOthersWrote(t *testing.T) {
	evil := "\x1b]0;owned\x07\u202e\xff"
	h := sampleHistory()
	h.Node, h.Targets[0].Target, h.Targets[0].Repairs = evil, evil, map[string]int{evil: 1}
	h.Incidents[0].Target, h.Incidents[0].Diagnosis, h.Incidents[0].Repairs = evil, evil, []string{evil}
	var buf bytes.Buffer
	if err := writeHistory(&buf, h, 14); err != nil {
		t.Fatal(err)
	}
	for _, bad := range []string{"\x1b", "\x07", "\u202e", "\xff"} {
		if strings.Contains(buf.String(), bad) {
			t.Errorf("the history passes %q to the terminal:\n%q", bad, buf.String())
		}
	}
	if n := strings.Count(buf.String(), `\x1b]0;owned\a\u202e\xff`); n < 5 {
		t.Errorf("the escapes are shown %d times, want in the header, the target, its repairs, the incident, its diagnosis and repairs:\n%s", n, buf.String())
	}
}

// With no agent answering, `edgeheal history` reads what the agent saved
// in its state directory, says so, and moves nothing.
func TestHistoryReadsTheSavedFileWhenNoAgentAnswers(t *testing.T) {
	dir := t.TempDir()
	state := filepath.Join(dir, "state")
	if err := os.Mkdir(state, 0o750); err != nil {
		t.Fatal(err)
	}
	b, err := history.Open(state, "gw-1", "", 10*time.Second, historyNow)
	if err != nil {
		t.Fatal(err)
	}
	at := historyNow.Add(-time.Hour)
	check := func(s string) []wire.Check {
		return []wire.Check{{Kind: wire.KindPeer, Target: "wg0/AbCd", State: s, Healthy: s == wire.CheckOK}}
	}
	for range 5 {
		at = at.Add(time.Second)
		b.Observe(check(wire.CheckOK), at)
	}
	b.Event(core.Event{ID: "i1", Time: at, Kind: wire.EventIncident, Target: "wg0/AbCd", Result: "opened"})
	b.Event(core.Event{ID: "r1", Time: at.Add(4 * time.Second), Kind: wire.EventRecovered, Target: "wg0/AbCd", Duration: 4})
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // the keeper writes once as it stops
	if err := (&history.Keeper{Book: b, Dir: state}).Run(ctx); err != nil {
		t.Fatal(err)
	}
	cfg := filepath.Join(dir, "edgeheal.yaml")
	writeFile(t, cfg, "version: 1\nnode: {name: gw-1}\nreport: {state_dir: "+state+", http: {listen: '', socket: "+filepath.Join(dir, "none.sock")+"}}\n")

	var stdout, stderr bytes.Buffer
	if code := runMain([]string{"history", "--json", "--config", cfg}, &stdout, &stderr); code != exitOK {
		t.Fatalf("exit %d, stderr:\n%s", code, stderr.String())
	}
	if !strings.Contains(stderr.String(), "no agent answers on") || !strings.Contains(stderr.String(), "saved in "+state) {
		t.Errorf("stderr does not say the history was read from the file:\n%s", stderr.String())
	}
	var h wire.History
	if err := json.Unmarshal(stdout.Bytes(), &h); err != nil {
		t.Fatalf("--json: %v\n%s", err, stdout.String())
	}
	if h.Node != "gw-1" || len(h.Incidents) != 1 || h.Incidents[0].DurationSeconds != 4 || h.Incidents[0].HealedBy != "" {
		t.Errorf("the saved history reads %+v, want gw-1's one 4 s incident that recovered by itself", h)
	}

	// A damaged file is named and left where it is.
	writeFile(t, filepath.Join(state, history.FileName), "{not json")
	stdout.Reset()
	stderr.Reset()
	if code := runMain([]string{"history", "--config", cfg}, &stdout, &stderr); code != exitCantRun || !strings.Contains(stderr.String(), filepath.Join(state, history.FileName)) {
		t.Errorf("a damaged history: exit %d, stderr %q; want %d naming the file", code, stderr.String(), exitCantRun)
	}
	if _, err := os.Stat(filepath.Join(state, history.FileName)); err != nil {
		t.Errorf("edgeheal history moved the damaged file: %v", err)
	}
}

func TestHistoryRefusesDaysOutOfRange(t *testing.T) {
	var stdout, stderr bytes.Buffer
	if code := runMain([]string{"history", "--days", "0", "--socket", "/nonexistent"}, &stdout, &stderr); code != exitCantRun || !strings.Contains(stderr.String(), "want 1 to 90") {
		t.Errorf("--days 0: exit %d, stderr %q", code, stderr.String())
	}
}
