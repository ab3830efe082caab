package outbox

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/edgeheal/edgeheal/agent/core"
)

func event(i int) core.Event {
	return core.Event{
		ID:      fmt.Sprintf("ev-%03d", i),
		Time:    time.Date(2026, 11, 29, 12, 0, i, 0, time.UTC),
		Kind:    "incident",
		Target:  "wg0",
		Summary: fmt.Sprintf("event %d", i),
	}
}

func ids(items []Item) []string {
	var out []string
	for _, it := range items {
		out = append(out, it.Event.ID)
	}
	return out
}

func mustOpen(t *testing.T, dir string, max int) *Outbox {
	t.Helper()
	o, err := Open(dir, Options{Max: max})
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { o.Close() })
	return o
}

func TestOutboxKeepsUnackedEventsAcrossReopen(t *testing.T) {
	dir := t.TempDir()
	o := mustOpen(t, dir, 100)
	for i := range 5 {
		if err := o.Append(event(i)); err != nil {
			t.Fatal(err)
		}
	}
	items := o.Pending(0)
	if err := o.Ack(items[1].Seq); err != nil {
		t.Fatal(err)
	}
	if err := o.Ack(items[3].Seq); err != nil {
		t.Fatal(err)
	}
	if err := o.Ack(items[3].Seq); err != nil { // twice: no-op
		t.Fatal(err)
	}
	o.Close()

	o2 := mustOpen(t, dir, 100)
	want := []string{"ev-000", "ev-002", "ev-004"}
	if diff := cmp.Diff(want, ids(o2.Pending(0))); diff != "" {
		t.Errorf("pending after reopen (-want +got):\n%s", diff)
	}
	if err := o2.Append(event(5)); err != nil {
		t.Fatal(err)
	}
	if got := o2.Pending(0); got[len(got)-1].Seq <= items[4].Seq {
		t.Errorf("seq after reopen = %d, want above %d", got[len(got)-1].Seq, items[4].Seq)
	}
	select {
	case <-o2.Changed():
	default:
		t.Error("Changed was not signalled after Append")
	}
}

func TestOutboxCutsATornTail(t *testing.T) {
	tests := []struct {
		name   string
		damage func(t *testing.T, path string)
	}{
		{"a half-written record at the end is cut", func(t *testing.T, path string) {
			b, err := encodeRecord(record{Op: "e", Seq: 99, Event: &core.Event{ID: "torn"}})
			if err != nil {
				t.Fatal(err)
			}
			appendBytes(t, path, b[:len(b)/2])
		}},
		{"a header without its body is cut", func(t *testing.T, path string) {
			appendBytes(t, path, []byte{40, 0, 0, 0, 1, 2})
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			o := mustOpen(t, dir, 100)
			for i := range 3 {
				if err := o.Append(event(i)); err != nil {
					t.Fatal(err)
				}
			}
			o.Close()
			tt.damage(t, filepath.Join(dir, "outbox", outboxLog))

			o2 := mustOpen(t, dir, 100)
			if o2.Truncated() == 0 {
				t.Error("Truncated() = 0, want the torn bytes counted")
			}
			if err := o2.Append(event(3)); err != nil {
				t.Fatal(err)
			}
			o2.Close()
			o3 := mustOpen(t, dir, 100)
			want := []string{"ev-000", "ev-001", "ev-002", "ev-003"}
			if diff := cmp.Diff(want, ids(o3.Pending(0))); diff != "" {
				t.Errorf("pending (-want +got):\n%s", diff)
			}
			if o3.Truncated() != 0 {
				t.Errorf("Truncated() after a clean reopen = %d, want 0", o3.Truncated())
			}
		})
	}
}

func appendBytes(t *testing.T, path string, b []byte) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.Write(b); err != nil {
		t.Fatal(err)
	}
}

func reports(items []Item) []core.Event {
	var out []core.Event
	for _, it := range items {
		if it.Event.Kind == KindDropped {
			out = append(out, it.Event)
		}
	}
	return out
}

// At the bound the least important go first (here all are incidents, so
// the oldest), one report counts them, and a later drop supersedes it.
func TestOutboxDropsAtItsBoundAndReportsIt(t *testing.T) {
	dir := t.TempDir()
	o := mustOpen(t, dir, 5)
	for i := range 5 {
		if err := o.Append(event(i)); err != nil {
			t.Fatal(err)
		}
	}
	// Full. The next append drops two: one for the event, one for the report.
	if err := o.Append(event(5)); err != nil {
		t.Fatal(err)
	}
	got := o.Pending(0)
	if diff := cmp.Diff([]string{"ev-002", "ev-003", "ev-004", "ev-005", got[4].Event.ID}, ids(got)); diff != "" {
		t.Errorf("pending after the first drop (-want +got):\n%s", diff)
	}
	if got[4].Event.Kind != KindDropped || got[4].Event.Evidence["dropped"] != uint64(2) {
		t.Errorf("report = %+v, want kind %s with dropped 2", got[4].Event, KindDropped)
	}
	// Another: one more dropped, and the report is superseded, not added.
	if err := o.Append(event(6)); err != nil {
		t.Fatal(err)
	}
	got = o.Pending(0)
	if len(got) != 5 {
		t.Fatalf("depth = %d, want 5", len(got))
	}
	rs := reports(got)
	if len(rs) != 1 {
		t.Fatalf("%d drop reports queued, want 1", len(rs))
	}
	wantEv := map[string]any{
		"dropped":          uint64(3),
		"dropped_by_class": map[string]uint64{"incident": 3},
		"dropped_total":    uint64(3),
		"first_dropped_ts": event(0).Time.Format(time.RFC3339Nano),
		"last_dropped_ts":  event(2).Time.Format(time.RFC3339Nano),
	}
	if diff := cmp.Diff(wantEv, rs[0].Evidence); diff != "" {
		t.Errorf("report evidence (-want +got):\n%s", diff)
	}
	if o.Dropped() != 3 {
		t.Errorf("Dropped() = %d, want 3", o.Dropped())
	}
	o.Close()

	// The count survives a restart, and a replayed report (float64 numbers
	// from JSON) is still superseded correctly.
	o2 := mustOpen(t, dir, 5)
	if o2.Dropped() != 3 || o2.Depth() != 5 {
		t.Errorf("after reopen Dropped() = %d Depth() = %d, want 3 and 5", o2.Dropped(), o2.Depth())
	}
	if err := o2.Append(event(7)); err != nil {
		t.Fatal(err)
	}
	rs = reports(o2.Pending(0))
	if len(rs) != 1 || rs[0].Evidence["dropped"] != uint64(4) || rs[0].Evidence["dropped_by_class"].(map[string]uint64)["incident"] != 4 {
		t.Errorf("report after reopen: %v, want one with dropped 4, all incidents", rs)
	}
}

func ev(id, kind, target, result string) core.Event {
	return core.Event{ID: id, Kind: kind, Target: target, Result: result, Time: time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)}
}

func TestDropOrderIsDuplicatesAndInfoThenActionsThenIncidentsOldestFirst(t *testing.T) {
	items := []Item{
		{1, ev("inc-a", "incident", "wg0/A", "opened")},
		{2, ev("drift-1", "offload-drift", "wwan0", "")},
		{3, ev("act-1", "action", "wwan0", "changed")},
		{4, ev("drift-2", "offload-drift", "wwan0", "")}, // a repeat of drift-1
		{5, ev("inc-a2", "incident", "wg0/A", "opened")}, // incidents are never duplicates
		{6, ev("comp", "component", "mqtt", "failed")},
		{7, ev("act-2", "action", "wwan0", "changed")}, // a repeat of act-1
		{8, ev("rec", "recovered", "wg0/A", "ok")},
		{9, ev("report", KindDropped, "outbox", "dropped")}, // never dropped: superseded
		{10, ev("gave", "gave-up", "wg0/A", "degraded")},
	}
	ptrs := make([]*Item, len(items))
	for i := range items {
		ptrs[i] = &items[i]
	}
	classes := classify(ptrs)
	var got []string
	for _, i := range dropOrder(ptrs, classes) {
		got = append(got, fmt.Sprintf("%s:%s", items[i].Event.ID, classes[i]))
	}
	want := []string{
		"drift-2:duplicate", "act-2:duplicate",
		"drift-1:info", "comp:info",
		"act-1:action", "rec:action",
		"inc-a:incident", "inc-a2:incident", "gave:incident",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("drop order (-want +got):\n%s", diff)
	}
}

// A full outbox keeps its incidents: chatter goes first, even the new
// event itself when it matters least.
func TestOutboxDropsTheLeastImportantFirstAndCountsByClass(t *testing.T) {
	o := mustOpen(t, t.TempDir(), 6)
	for _, e := range []core.Event{
		ev("inc-1", "incident", "wg0/A", "opened"),
		ev("drift-1", "offload-drift", "wwan0", ""),
		ev("drift-2", "offload-drift", "wwan0", ""),
		ev("act-1", "action", "wg0/A", "changed"),
		ev("inc-2", "incident", "wg0/B", "opened"),
		ev("drift-3", "offload-drift", "wwan0", ""),
	} {
		if err := o.Append(e); err != nil {
			t.Fatal(err)
		}
	}
	// Full: a new incident costs the two duplicates (one for it, one for
	// the report).
	if err := o.Append(ev("inc-3", "incident", "wg0/C", "opened")); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"inc-1", "drift-1", "act-1", "inc-2", "inc-3"}, ids(o.Pending(0))[:5]); diff != "" {
		t.Errorf("after the first drop (-want +got):\n%s", diff)
	}
	// Then the info, then the action; incidents stay.
	for _, id := range []string{"inc-4", "inc-5"} {
		if err := o.Append(ev(id, "incident", "wg0/"+id, "opened")); err != nil {
			t.Fatal(err)
		}
	}
	if diff := cmp.Diff([]string{"inc-1", "inc-2", "inc-3", "inc-4", "inc-5"}, ids(o.Pending(0))[:5]); diff != "" {
		t.Errorf("after dropping info and the action (-want +got):\n%s", diff)
	}
	// Only incidents left: a new info event is the one dropped.
	if err := o.Append(ev("info-late", "workload", "telemetry", "ok")); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"inc-1", "inc-2", "inc-3", "inc-4", "inc-5"}, ids(o.Pending(0))[:5]); diff != "" {
		t.Errorf("a new info event into a queue of incidents (-want +got):\n%s", diff)
	}
	rs := reports(o.Pending(0))
	if len(rs) != 1 {
		t.Fatalf("%d reports, want 1", len(rs))
	}
	want := map[string]uint64{"duplicate": 2, "info": 2, "action": 1}
	if diff := cmp.Diff(want, rs[0].Evidence["dropped_by_class"]); diff != "" {
		t.Errorf("dropped by class (-want +got):\n%s", diff)
	}
	if o.Dropped() != 5 || !strings.Contains(rs[0].Summary, "2 duplicate, 2 info, 1 action") {
		t.Errorf("Dropped() = %d, summary %q; want 5 and the classes", o.Dropped(), rs[0].Summary)
	}
}

func TestOutboxCompactionKeepsQueuedEventsAndCounts(t *testing.T) {
	dir := t.TempDir()
	o := mustOpen(t, dir, 50)
	for i := range 1200 {
		if err := o.Append(event(i % 60)); err != nil {
			t.Fatal(err)
		}
		if i%3 != 0 { // ack two of three
			it := o.Pending(0)
			if err := o.Ack(it[len(it)-1].Seq); err != nil {
				t.Fatal(err)
			}
		}
	}
	want := ids(o.Pending(0))
	dropped := o.Dropped()
	st, err := os.Stat(filepath.Join(dir, "outbox", outboxLog))
	if err != nil {
		t.Fatal(err)
	}
	if st.Size() > 120_000 {
		t.Errorf("log is %d bytes after 1200 appends: compaction did not run", st.Size())
	}
	o.Close()
	o2 := mustOpen(t, dir, 50)
	if diff := cmp.Diff(want, ids(o2.Pending(0))); diff != "" {
		t.Errorf("pending after compaction and reopen (-want +got):\n%s", diff)
	}
	if o2.Dropped() != dropped || dropped == 0 {
		t.Errorf("Dropped() = %d after reopen, want %d (> 0)", o2.Dropped(), dropped)
	}
}

func TestOutboxRejectsABoundBelowTwo(t *testing.T) {
	if _, err := Open(t.TempDir(), Options{Max: 1}); err == nil {
		t.Error("Open with Max 1 succeeded, want an error")
	}
}

func FuzzOutboxReplay(f *testing.F) {
	good, _ := encodeRecord(record{Op: "e", Seq: 1, Event: &core.Event{ID: "a"}})
	ack, _ := encodeRecord(record{Op: "a", Seq: 1})
	f.Add(good)
	f.Add(append(append([]byte{}, good...), ack...))
	f.Add(append(append([]byte{}, good...), good[:5]...))
	f.Fuzz(func(t *testing.T, data []byte) {
		dir := t.TempDir()
		if err := os.MkdirAll(filepath.Join(dir, "outbox"), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "outbox", outboxLog), data, 0o600); err != nil {
			t.Fatal(err)
		}
		o, err := Open(dir, Options{Max: 100000})
		if err != nil {
			t.Fatalf("Open on arbitrary bytes: %v", err)
		}
		before := o.Depth()
		if err := o.Append(core.Event{ID: "fuzz"}); err != nil {
			t.Fatal(err)
		}
		o.Close()
		o2, err := Open(dir, Options{Max: 100000})
		if err != nil {
			t.Fatal(err)
		}
		defer o2.Close()
		if o2.Truncated() != 0 {
			t.Errorf("a log written after Open was torn again: %d bytes", o2.Truncated())
		}
		items := o2.Pending(0)
		if len(items) == 0 || items[len(items)-1].Event.ID != "fuzz" {
			t.Errorf("the appended event is not the newest queued one: %v (had %d before)", ids(items), before)
		}
	})
}

func BenchmarkOutboxAppend(b *testing.B) {
	o, err := Open(b.TempDir(), Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer o.Close()
	e := event(1)
	e.Evidence = map[string]any{"peers": 2, "udp_in_csum_errors": 17, "file": "evidence/x.json"}
	for b.Loop() {
		e.ID = ""
		if err := o.Append(e); err != nil {
			b.Fatal(err)
		}
		if it := o.Pending(1); len(it) == 1 {
			o.Ack(it[0].Seq)
		}
	}
}

// A state directory that cannot be written keeps events in memory, and
// once it can, they go to the log in order and are acked through the
// sequence numbers handed out in memory.
func TestOutboxKeepsEventsInMemoryUntilItsLogOpens(t *testing.T) {
	parent := t.TempDir()
	blocker := filepath.Join(parent, "state")
	if err := os.WriteFile(blocker, nil, 0o600); err != nil { // a file where the directory should be
		t.Fatal(err)
	}
	o, err := OpenOrMemory(blocker, Options{Max: 10})
	if err != nil {
		t.Fatal(err)
	}
	if h := o.Health(); !h.Degraded || !strings.Contains(h.Detail, "memory only") {
		t.Errorf("health %+v, want degraded: memory only", h)
	}
	for i := range 3 {
		if err := o.Append(event(i)); err != nil {
			t.Fatalf("Append in memory: %v", err)
		}
	}
	inflight := o.Pending(0)[1] // ev-000, which the publisher holds while the log opens
	if inflight.Event.ID != "ev-000" {
		t.Fatalf("queued %v, want the disk incident and ev-000 first", describe(o.Pending(0)))
	}
	if err := os.Remove(blocker); err != nil {
		t.Fatal(err)
	}
	o.mu.Lock()
	err = o.attach()
	o.mu.Unlock()
	if err != nil {
		t.Fatalf("attach: %v", err)
	}
	if err := o.Ack(inflight.Seq); err != nil {
		t.Fatal(err)
	}
	defer func(d time.Duration) { settleFor = d }(settleFor)
	settleFor = 0 // the room is there: the incident closes at the next look
	tickNow(o)
	if h := o.Health(); h.Degraded {
		t.Errorf("health after the log opened: %+v", h)
	}
	want := []string{"incident outbox disk-failing", "ev-001", "ev-002", "recovered outbox written"}
	if diff := cmp.Diff(want, describe(o.Pending(0))); diff != "" {
		t.Errorf("pending after the ack (-want +got):\n%s", diff)
	}
	o.Close()
	again := mustOpen(t, blocker, 10)
	if diff := cmp.Diff(want, describe(again.Pending(0))); diff != "" {
		t.Errorf("the log after reopening (-want +got):\n%s", diff)
	}
}

// describe is the ids of events, and kind, target and result of the
// outbox's own.
func describe(items []Item) []string {
	var out []string
	for _, it := range items {
		if it.Event.Target == "outbox" {
			out = append(out, it.Event.Kind+" outbox "+it.Event.Result)
			continue
		}
		out = append(out, it.Event.ID)
	}
	return out
}
