package history

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/google/go-cmp/cmp"

	"github.com/edgeheal/edgeheal/agent/core"
	"github.com/edgeheal/edgeheal/regfile"
	"github.com/edgeheal/edgeheal/wire"
)

var t0 = time.Date(2026, 12, 3, 9, 59, 50, 0, time.UTC) // ten seconds before an hour

func peer(state string) wire.Check {
	return wire.Check{Kind: wire.KindPeer, Target: "wg0/AbCdEfGh", State: state, Healthy: state == wire.CheckOK}
}

// sweep observes the same checks every second from (and after) at for n
// seconds, and returns the time after.
func sweep(b *Book, at time.Time, n int, checks ...wire.Check) time.Time {
	for range n {
		at = at.Add(time.Second)
		b.Observe(checks, at)
	}
	return at
}

// darkFor is a tunnel dark for secs seconds as the monitor reports it:
// two misses (suspect), the third confirms (an incident that began at the
// last good observation), a forced handshake, healthy again.
func darkFor(b *Book, at time.Time, secs int, id string) time.Time {
	lastGood := at
	at = sweep(b, at, 2, peer("suspect"))
	at = sweep(b, at, 1, peer(wire.CheckDown))
	b.Event(core.Event{ID: id, Time: at, Kind: wire.EventIncident, Target: "wg0/AbCdEfGh", Result: "opened",
		Summary: "wg0/AbCdEfGh dark: probe missed: timeout", Evidence: map[string]any{"began": lastGood.Format(time.RFC3339Nano)}})
	b.Event(core.Event{ID: id + "-a", Time: at, Kind: wire.EventAction, Target: "wg0", Action: "reassert", Result: "unchanged"})
	at = sweep(b, at, secs-4, peer(wire.CheckHealing))
	b.Event(core.Event{ID: id + "-b", Time: at, Kind: wire.EventAction, Target: "wg0/AbCdEfGh", Action: "handshake", Result: "changed"})
	at = sweep(b, at, 1, peer(wire.CheckOK))
	b.Event(core.Event{ID: id + "-r", Time: at, Kind: wire.EventRecovered, Target: "wg0/AbCdEfGh", Result: "ok",
		Duration: at.Sub(lastGood).Seconds(), Evidence: map[string]any{"how": "healed by handshake"}})
	return at
}

func TestAnIncidentRunsFromTheLastGoodObservationAcrossAnHour(t *testing.T) {
	b := New("edge-17", "plant-7", 10*time.Second)
	at := sweep(b, t0, 5, peer(wire.CheckOK))
	at = darkFor(b, at, 10, "i1")
	sweep(b, at, 5, peer(wire.CheckOK))
	h := b.Snapshot(at.Add(5*time.Second), false)
	if len(h.Incidents) != 1 {
		t.Fatalf("incidents %+v, want one", h.Incidents)
	}
	in := h.Incidents[0]
	want := wire.Incident{ID: "i1", Kind: wire.KindPeer, Target: "wg0/AbCdEfGh", Start: t0.Add(5 * time.Second), End: t0.Add(15 * time.Second),
		DurationSeconds: 10, Diagnosis: "wg0/AbCdEfGh dark: probe missed: timeout", Repairs: []string{"reassert", "handshake"}, HealedBy: "handshake"}
	if diff := cmp.Diff(want, in); diff != "" {
		t.Errorf("incident (-want +got):\n%s", diff)
	}
	// Before the hour: 4 s healthy (the first sweep is the baseline) and 5
	// dark, 2 of them pending until the third miss; after it, 5 dark (the
	// second up to the first good observation included) and 5 healthy.
	n := len(h.Hours.Healthy)
	gotHours := [][3]int{{h.Hours.Healthy[n-2], h.Hours.Dark[n-2], h.Hours.Incidents[n-2]}, {h.Hours.Healthy[n-1], h.Hours.Dark[n-1], h.Hours.Incidents[n-1]}}
	if diff := cmp.Diff([][3]int{{4, 5, 1}, {5, 5, 0}}, gotHours); diff != "" {
		t.Errorf("the two hours {healthy, dark, incidents} (-want +got):\n%s", diff)
	}
	if !h.Hours.Start.Equal(t0.Truncate(time.Hour).Add(-46*time.Hour)) || h.Hours.Step != 3600 || n != 48 {
		t.Errorf("hours start %v step %d n %d, want the 48 hours up to now", h.Hours.Start, h.Hours.Step, n)
	}
	s := h.Targets[0]
	if s.DarkSeconds != 10 || s.HealthySeconds != 9 || s.Incidents != 1 || s.OutageMaxSeconds != 10 || s.MTTRSeconds != 10 || s.Repairs["handshake"] != 1 {
		t.Errorf("target summary %+v", s)
	}
}

func TestPendingTimeThatIsNotConfirmedCountsHealthy(t *testing.T) {
	b := New("n", "", 10*time.Second)
	at := sweep(b, t0, 3, peer(wire.CheckOK))
	at = sweep(b, at, 2, peer("suspect")) // one lost probe, then another
	sweep(b, at, 3, peer(wire.CheckOK))
	h := b.Snapshot(at.Add(3*time.Second), true)
	if s := h.Targets[0]; s.DarkSeconds != 0 || s.HealthySeconds != 7 || s.Incidents != 0 {
		t.Errorf("summary %+v, want 7 s healthy, none dark (the first sweep is the baseline)", s)
	}
}

func TestAGapAndAClockStepDoNotStretchWhatWasObserved(t *testing.T) {
	b := New("n", "", 10*time.Second)
	at := sweep(b, t0, 3, peer(wire.CheckOK))
	// The agent was stopped for an hour: only maxGap of it counts.
	at = at.Add(time.Hour)
	b.Observe([]wire.Check{peer(wire.CheckOK)}, at)
	h := b.Snapshot(at, true)
	if s := h.Targets[0]; s.HealthySeconds != 12 {
		t.Errorf("after an hour's gap: %d s healthy, want 2 + the 10 s a gap counts at the most", s.HealthySeconds)
	}
	// An incident's length is the monotonic one its events measured,
	// whatever the wall clock did meanwhile.
	b.Event(core.Event{ID: "i", Time: at, Kind: wire.EventIncident, Target: "wg0/AbCdEfGh", Result: "opened"})
	b.Event(core.Event{ID: "r", Time: at.Add(-time.Hour + 20*time.Second), Kind: wire.EventRecovered, Target: "wg0/AbCdEfGh", Duration: 20})
	if in := b.Snapshot(at, true).Incidents[0]; in.DurationSeconds != 20 || !in.End.Equal(at.Add(20*time.Second)) {
		t.Errorf("incident across a clock step back of an hour: %+v, want 20 s from its start", in)
	}
}

func TestThePublishedHistoryStaysSmallWhateverTheNodeWentThrough(t *testing.T) {
	b := New("edge-17", "plant-7", 10*time.Second)
	at := t0
	for i := range 10000 {
		at = at.Add(10 * time.Minute) // ten thousand incidents over 70 days
		b.Observe([]wire.Check{peer(wire.CheckOK)}, at)
		id := fmt.Sprintf("i%05d", i)
		b.Event(core.Event{ID: id, Time: at, Kind: wire.EventIncident, Target: "wg0/AbCdEfGh", Result: "opened", Summary: strings.Repeat("x", 400)})
		b.Event(core.Event{ID: id + "-a", Time: at, Kind: wire.EventAction, Target: "wg0/AbCdEfGh", Action: "handshake", Result: "changed"})
		b.Event(core.Event{ID: id + "-r", Time: at.Add(5 * time.Second), Kind: wire.EventRecovered, Target: "wg0/AbCdEfGh", Duration: 5,
			Evidence: map[string]any{"how": "healed by handshake"}})
	}
	size := func(all bool) (wire.History, int) {
		h := b.Snapshot(at, all)
		raw, err := json.Marshal(h)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := wire.DecodeHistory(raw); err != nil {
			t.Errorf("the history does not decode: %v", err)
		}
		return h, len(raw)
	}
	h, n := size(false)
	t.Logf("a node with 10,000 incidents publishes %d bytes", n)
	if n > 12<<10 || len(h.Incidents) != wire.HistoryIncidents {
		t.Errorf("a node with 10,000 incidents publishes %d bytes with %d incidents; want a few KiB (at most 12) and %d", n, len(h.Incidents), wire.HistoryIncidents)
	}
	if s := h.Targets[0]; s.Incidents < 9000 || s.Repairs["handshake"] != closedKept {
		t.Errorf("the target counts %d incidents and %d repairs in its days; want every incident of the 90 days and the last %d repairs", s.Incidents, s.Repairs["handshake"], closedKept)
	}
	if _, n := size(true); n > 256<<10 {
		t.Errorf("the local history is %d bytes, want it bounded (%d incidents in full)", n, incidentsKept)
	}
	for i := range 400 { // a hub: more targets than a history names
		b.Observe([]wire.Check{{Kind: wire.KindPeer, Target: fmt.Sprintf("hub/%03d", i), State: wire.CheckOK, Healthy: true}}, at)
	}
	h, n = size(false)
	t.Logf("a hub with 400 peers publishes %d bytes", n)
	// 256 accounts of their own (wg0 and 255 of the hub's) and "others".
	if n > 24<<10 || len(h.Targets) != PublishedTargets || h.TargetsOmitted != targetsKept+1-PublishedTargets {
		t.Errorf("a hub publishes %d bytes, %d targets (%d omitted); want at most 24 KiB, %d targets, the rest of the %d accounts counted",
			n, len(h.Targets), h.TargetsOmitted, PublishedTargets, targetsKept+1)
	}
	kept, _ := b.marshal()
	if len(kept) > 4<<20 {
		t.Errorf("the kept history is %d bytes", len(kept))
	}
}

func TestTheHistorySurvivesARestartAndMovesAnUnreadableFileAside(t *testing.T) {
	dir := t.TempDir()
	b, err := Open(dir, "edge-17", "plant-7", 10*time.Second, t0)
	if err != nil {
		t.Fatal(err)
	}
	at := sweep(b, t0, 5, peer(wire.CheckOK))
	at = darkFor(b, at, 10, "i1")
	// A second incident is open when the agent stops.
	b.Event(core.Event{ID: "i2", Time: at, Kind: wire.EventIncident, Target: "wg0/AbCdEfGh", Result: "opened"})
	k := &Keeper{Book: b, Dir: dir}
	k.save()
	before := b.Snapshot(at, true)

	again, err := Open(dir, "edge-17", "plant-7", 10*time.Second, at)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(before, again.Snapshot(at, true)); diff != "" {
		t.Errorf("after a restart (-before +after):\n%s", diff)
	}
	again.Event(core.Event{ID: "r2", Time: at.Add(7 * time.Second), Kind: wire.EventRecovered, Target: "wg0/AbCdEfGh", Duration: 7})
	if in := again.Snapshot(at, true).Incidents[0]; in.ID != "i2" || in.DurationSeconds != 7 {
		t.Errorf("the incident open across the restart: %+v, want closed after 7 s", in)
	}

	if err := os.WriteFile(filepath.Join(dir, FileName), []byte("{not json"), 0o640); err != nil {
		t.Fatal(err)
	}
	fresh, err := Open(dir, "edge-17", "plant-7", 10*time.Second, at)
	if err == nil || !strings.Contains(err.Error(), "moved to") {
		t.Errorf("Open of a damaged file: %v, want it named and moved aside", err)
	}
	if h := fresh.Snapshot(at, true); len(h.Incidents) != 0 {
		t.Errorf("after a damaged file: %d incidents, want an empty history", len(h.Incidents))
	}
}

func TestAnOffloadDriftIsAnIncidentHealedByItsFix(t *testing.T) {
	b := New("n", "", 10*time.Second)
	b.Observe([]wire.Check{{Kind: wire.KindUplink, Target: "wwan0", State: "ok", Healthy: true}}, t0)
	b.Event(core.Event{ID: "d", Time: t0, Kind: wire.EventOffloadDrift, Target: "wwan0"})
	b.Event(core.Event{ID: "a", Time: t0, Kind: wire.EventAction, Target: "wwan0", Action: "offload-off", Result: "changed", Duration: 0.0015})
	in := b.Snapshot(t0, true).Incidents[0]
	if in.Kind != wire.KindUplink || in.HealedBy != "offload-off" || in.End.IsZero() || in.DurationSeconds != 0.0015 {
		t.Errorf("drift: %+v, want an uplink incident closed by its fix in 1.5 ms", in)
	}
}

func TestGivingUpIsCounted(t *testing.T) {
	b := New("n", "", 10*time.Second)
	b.Observe([]wire.Check{peer(wire.CheckOK)}, t0)
	b.Event(core.Event{ID: "i", Time: t0, Kind: wire.EventIncident, Target: "wg0/AbCdEfGh", Result: "opened"})
	b.Event(core.Event{ID: "h", Time: t0, Kind: "uplink-outage", Target: "wg0/AbCdEfGh", Summary: "wg0/AbCdEfGh dark, not acting: uplink outage: no default route"})
	b.Event(core.Event{ID: "g", Time: t0, Kind: wire.EventGaveUp, Target: "wg0/AbCdEfGh"})
	h := b.Snapshot(t0.Add(time.Minute), true)
	if in := h.Incidents[0]; !in.GaveUp || !in.End.IsZero() || in.DurationSeconds != 60 || !strings.Contains(in.Diagnosis, "uplink outage") {
		t.Errorf("open, given-up incident %+v", in)
	}
	if h.Targets[0].GaveUps != 1 {
		t.Errorf("gave-ups %d, want 1", h.Targets[0].GaveUps)
	}
}

// TestTheFileAtEveryBoundFitsItsLimit fills a book to every bound a node
// could push it to (every target kept, each with its closed incidents in
// full, every incident with the longest diagnosis and every repair) and
// checks the file it writes stays under the limit it is read with.
func TestTheFileAtEveryBoundFitsItsLimit(t *testing.T) {
	if testing.Short() {
		t.Skip("fills 256 targets with 1,000 incidents each: run without -short")
	}
	b := New("edge-17", "plant-7", 10*time.Second)
	at := t0
	long := strings.Repeat("é", 2*diagnosisKept)
	for i := range targetsKept + 10 {
		name := fmt.Sprintf("wg%d/%s", i, strings.Repeat("K", 43))
		check := wire.Check{Kind: wire.KindPeer, Target: name, State: wire.CheckOK, Healthy: true}
		for j := range closedKept + 1 {
			at = at.Add(time.Second)
			b.Observe([]wire.Check{check}, at)
			id := fmt.Sprintf("i%d-%d", i, j)
			b.Event(core.Event{ID: id, Time: at, Kind: wire.EventIncident, Target: name, Result: "opened", Summary: long})
			for range (repairsKept + 1) * (i / (targetsKept + 9)) { // the last target's, kept in full
				b.Event(core.Event{ID: id + "-a", Time: at, Kind: wire.EventAction, Target: name, Action: "restart-interface", Result: "changed"})
			}
			b.Event(core.Event{ID: id + "-r", Time: at, Kind: wire.EventRecovered, Target: name, Duration: 5,
				Evidence: map[string]any{"how": "healed by restart-interface"}})
		}
	}
	data, err := b.marshal()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("a history at every bound: %d bytes (limit %d)", len(data), FileLimit)
	if len(data) > FileLimit/2 {
		t.Errorf("a history at every bound is %d bytes; want at most half of FileLimit (%d) so that it is always read back", len(data), FileLimit)
	}
	in := b.Snapshot(at, true).Incidents[0]
	if len(in.Diagnosis) > diagnosisKept || !utf8.ValidString(in.Diagnosis) || len(in.Repairs) != repairsKept {
		t.Errorf("an incident keeps a diagnosis of %d bytes (valid UTF-8: %v) and %d repairs; want at most %d, cut at a character, and %d",
			len(in.Diagnosis), utf8.ValidString(in.Diagnosis), len(in.Repairs), diagnosisKept, repairsKept)
	}
}

func TestReadChangesNothingAndAFIFONeverBlocks(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, FileName)
	if err := os.WriteFile(path, []byte("{not json"), 0o640); err != nil {
		t.Fatal(err)
	}
	if _, err := Read(dir, "n", "", 10*time.Second); err == nil || !strings.Contains(err.Error(), path) {
		t.Errorf("Read of a damaged file: %v, want an error naming %s", err, path)
	}
	if _, err := os.Stat(path); err != nil {
		t.Errorf("Read moved or removed the damaged file: %v", err)
	}

	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(path, 0o600); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := Open(dir, "n", "", 10*time.Second, t0)
		done <- err
	}()
	select {
	case err := <-done:
		if !errors.Is(err, regfile.ErrNotRegular) {
			t.Errorf("Open of a FIFO: %v, want it refused as not a regular file", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Open of a FIFO in place of the history still waits after 10 s")
	}
	if st, err := os.Lstat(path); err != nil || st.Mode()&os.ModeNamedPipe == 0 {
		t.Errorf("Open moved what is not its file (%v)", err)
	}
}

func TestTargetsBeyondTheBoundShareOneAccountCountedOnce(t *testing.T) {
	b := New("hub", "", 10*time.Second)
	var checks []wire.Check
	for i := range targetsKept + 3 {
		checks = append(checks, wire.Check{Kind: wire.KindPeer, Target: fmt.Sprintf("hub/%03d", i), State: wire.CheckOK, Healthy: true})
	}
	at := t0
	for range 11 {
		at = at.Add(time.Second)
		b.Observe(checks, at)
	}
	last := checks[len(checks)-1].Target
	b.Event(core.Event{ID: "i", Time: at, Kind: wire.EventIncident, Target: last, Result: "opened"})
	b.Event(core.Event{ID: "a", Time: at, Kind: wire.EventAction, Target: last, Action: "handshake", Result: "changed"})
	b.Event(core.Event{ID: "r", Time: at.Add(3 * time.Second), Kind: wire.EventRecovered, Target: last, Duration: 3,
		Evidence: map[string]any{"how": "healed by handshake"}})
	h := b.Snapshot(at, true)
	var others *wire.TargetSummary
	for i := range h.Targets {
		if h.Targets[i].Target == "others" {
			others = &h.Targets[i]
		}
	}
	if others == nil {
		t.Fatalf("no account \"others\" among %d targets", len(h.Targets))
	}
	if others.HealthySeconds != 10 {
		t.Errorf("others counts %d healthy seconds in 10 s of sweeps, want 10: its 3 targets counted once", others.HealthySeconds)
	}
	if in := h.Incidents[0]; in.Target != last || in.HealedBy != "handshake" || in.DurationSeconds != 3 || others.Incidents != 1 {
		t.Errorf("the incident of a target beyond the bound: %+v (others counts %d); want it closed by its handshake after 3 s", in, others.Incidents)
	}
}

// After a restart, with the wall clock stepped an hour either way while
// the agent was down, the history says the same: the same incidents with
// the same durations, the same totals per target.
func TestARestartWithTheClockSteppedAnHourKeepsTheFigures(t *testing.T) {
	for _, step := range []time.Duration{time.Hour, -time.Hour} {
		t.Run(step.String(), func(t *testing.T) {
			dir := t.TempDir()
			b, err := Open(dir, "edge-17", "plant-7", 10*time.Second, t0)
			if err != nil {
				t.Fatal(err)
			}
			at := sweep(b, t0, 5, peer(wire.CheckOK))
			at = darkFor(b, at, 10, "i1")
			at = sweep(b, at, 5, peer(wire.CheckOK))
			at = darkFor(b, at, 20, "i2")
			at = sweep(b, at, 5, peer(wire.CheckOK))
			if err := (&Keeper{Book: b, Dir: dir}).Run(canceled()); err != nil {
				t.Fatal(err)
			}
			before := b.Snapshot(at, true)

			stepped := at.Add(step)
			again, err := Open(dir, "edge-17", "plant-7", 10*time.Second, stepped)
			if err != nil {
				t.Fatal(err)
			}
			// The first sweep after the start is the baseline: nothing
			// of the time the agent was down, or of the step, counts.
			again.Observe([]wire.Check{peer(wire.CheckOK)}, stepped)
			after := again.Snapshot(stepped, true)
			if diff := cmp.Diff(before.Incidents, after.Incidents); diff != "" {
				t.Errorf("incidents after a restart and a clock step of %s (-before +after):\n%s", step, diff)
			}
			if diff := cmp.Diff(before.Targets, after.Targets); diff != "" {
				t.Errorf("targets after a restart and a clock step of %s (-before +after):\n%s", step, diff)
			}
			if got := []float64{after.Incidents[1].DurationSeconds, after.Incidents[0].DurationSeconds}; got[0] != 10 || got[1] != 20 {
				t.Errorf("incidents of %v s, want 10 and 20", got)
			}
		})
	}
}

func canceled() context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	return ctx
}

// An incident that runs across midnight UTC counts its seconds in the
// day each of them was in, and opens in the day it began.
func TestAnIncidentAcrossMidnightCountsInBothDays(t *testing.T) {
	b := New("n", "", 10*time.Second)
	start := time.Date(2026, 12, 3, 23, 59, 50, 0, time.UTC)
	at := sweep(b, start, 3, peer(wire.CheckOK))
	at = darkFor(b, at, 20, "i") // 23:59:53 to 00:00:13
	h := b.Snapshot(at, true)
	n := len(h.Days.Dark)
	if got := []int{h.Days.Dark[n-2], h.Days.Dark[n-1]}; got[0] != 7 || got[1] != 13 {
		t.Errorf("dark seconds of the two days %v, want 7 before midnight and 13 after", got)
	}
	if got := []int{h.Days.Incidents[n-2], h.Days.Incidents[n-1]}; got[0] != 1 || got[1] != 0 {
		t.Errorf("incidents of the two days %v, want it counted in the day it began", got)
	}
	if in := h.Incidents[0]; in.DurationSeconds != 20 {
		t.Errorf("incident %+v, want 20 s", in)
	}
}
