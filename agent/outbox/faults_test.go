package outbox

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/edgeheal/edgeheal/agent/core"
)

// fakeClock is a settable Options.Now.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func newClock() *fakeClock { return &fakeClock{t: time.Date(2026, 12, 1, 8, 0, 0, 0, time.UTC)} }

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) Add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// openClocked opens an outbox of 100 in a new directory on a fake clock.
func openClocked(t *testing.T) (*Outbox, *fakeClock, string) {
	t.Helper()
	clock := newClock()
	dir := t.TempDir()
	o, err := Open(dir, Options{Max: 100, Now: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { o.Close() })
	return o, clock, dir
}

// tickNow is one look of Run.
func tickNow(o *Outbox) {
	o.mu.Lock()
	o.tick()
	o.mu.Unlock()
}

// settleDisk runs Run's looks at a disk that works again: the first writes
// what memory holds, and the incident stays open (degraded, nothing in
// memory) until the disk has kept room for settleFor.
func settleDisk(t *testing.T, o *Outbox, clock *fakeClock) {
	t.Helper()
	tickNow(o)
	if h := o.Health(); !h.Degraded || !strings.Contains(h.Detail, "the incident stays open") || o.MemoryOnly() != 0 {
		t.Errorf("once written again: health %+v, %d in memory only; want everything on disk and the incident open", h, o.MemoryOnly())
	}
	clock.Add(settleFor - time.Second)
	tickNow(o)
	if h := o.Health(); !h.Degraded {
		t.Errorf("the incident closed before the disk kept room for %s", settleFor)
	}
	clock.Add(time.Second)
	tickNow(o)
}

func rec(t *testing.T, r record) []byte {
	t.Helper()
	b, err := encodeRecord(r)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func evRec(t *testing.T, seq uint64) []byte {
	return rec(t, record{Op: "e", Seq: seq, Event: &core.Event{ID: fmt.Sprintf("ev-%03d", seq)}})
}

func cat(parts ...[]byte) []byte {
	var out []byte
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}

func liveIDs(r replayed) []string {
	var out []string
	for seq := range uint64(20) {
		if e, ok := r.live[seq]; ok {
			out = append(out, e.ID)
		}
	}
	return out
}

// zeroTail is b with its last n bytes zeroed.
func zeroTail(b []byte, n int) []byte {
	out := append([]byte(nil), b...)
	clear(out[len(out)-n:])
	return out
}

func TestParseLogResynchronisesPastDamageAndCutsOnlyATornTail(t *testing.T) {
	e1, e2, e3 := evRec(t, 1), evRec(t, 2), evRec(t, 3)
	flipped := append([]byte(nil), e2...)
	flipped[len(flipped)-3] ^= 0xff
	badLen := append([]byte(nil), e2...)
	badLen[3] = 0x7f // a length far beyond the log
	grown := append([]byte(nil), e2...)
	grown[1] ^= 0x01 // 256 bytes more than the body
	tests := []struct {
		name    string
		data    []byte
		live    []string
		damaged []span
		tail    int64
	}{
		{"a clean log", cat(e1, e2, e3), []string{"ev-001", "ev-002", "ev-003"}, nil, 0},
		{"a flipped byte in the middle costs that record only", cat(e1, flipped, e3), []string{"ev-001", "ev-003"},
			[]span{{int64(len(e1)), int64(len(e2))}}, 0},
		{"a bad length in the middle", cat(e1, badLen, e3), []string{"ev-001", "ev-003"},
			[]span{{int64(len(e1)), int64(len(e2))}}, 0},
		{"garbage between records", cat(e1, []byte("\x00\x13garbage{\"op\":\"e\""), e2), []string{"ev-001", "ev-002"},
			[]span{{int64(len(e1)), 18}}, 0},
		{"two damaged regions", cat(e1, flipped, e3, []byte("xx"), evRec(t, 4)), []string{"ev-001", "ev-003", "ev-004"},
			[]span{{int64(len(e1)), int64(len(e2))}, {int64(len(e1) + len(e2) + len(e3)), 2}}, 0},
		{"a torn last record is a tail, not damage", cat(e1, e2, e3[:len(e3)/2]), []string{"ev-001", "ev-002"}, nil, int64(len(e3) / 2)},
		{"a torn header is a tail", cat(e1, e2, e3[:5]), []string{"ev-001", "ev-002"}, nil, 5},
		{"a flipped bit in the last, whole, record is damage", cat(e1, flipped), []string{"ev-001"},
			[]span{{int64(len(e1)), int64(len(e2))}}, 0},
		{"a length field grown in the last record is damage", cat(e1, grown), []string{"ev-001"},
			[]span{{int64(len(e1)), int64(len(e2))}}, 0},
		{"zeroes after the last record are damage", cat(e1, make([]byte, 64)), []string{"ev-001"}, []span{{int64(len(e1)), 64}}, 0},
		{"the last bytes zeroed are damage", cat(e1, e2, zeroTail(e3, 20)), []string{"ev-001", "ev-002"},
			[]span{{int64(len(e1) + len(e2)), int64(len(e3))}}, 0},
		{"a log of garbage is damage", []byte(strings.Repeat("garbage!", 64)), nil, []span{{0, 512}}, 0},
		{"damage at the very start", cat([]byte("junk"), e1, e2), []string{"ev-001", "ev-002"}, []span{{0, 4}}, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := parseLog(tt.data)
			if diff := cmp.Diff(tt.live, liveIDs(r)); diff != "" {
				t.Errorf("live (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tt.damaged, r.damaged); diff != "" {
				t.Errorf("damaged (-want +got):\n%s", diff)
			}
			covered := r.end + r.tail
			if n := len(r.damaged); n > 0 {
				covered = max(covered, r.damaged[n-1].Off+r.damaged[n-1].Len)
			}
			if r.tail != tt.tail || covered != int64(len(tt.data)) {
				t.Errorf("tail %d end %d of %d bytes, want tail %d", r.tail, r.end, len(tt.data), tt.tail)
			}
		})
	}
}

// A damaged record in the middle of the log costs that record only: every
// later one is kept, the damaged bytes are moved aside, the log is
// rewritten without them, and one incident says so.
func TestOutboxKeepsEveryRecordAfterADamagedOneAndReportsTheDamage(t *testing.T) {
	dir := t.TempDir()
	o := mustOpen(t, dir, 100)
	for i := range 10 {
		if err := o.Append(event(i)); err != nil {
			t.Fatal(err)
		}
	}
	o.Close()
	path := filepath.Join(dir, "outbox", outboxLog)
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	// Damage the fourth record's body.
	off := int64(0)
	for range 3 {
		_, n, err := decodeRecord(data[off:])
		if err != nil {
			t.Fatal(err)
		}
		off += int64(n)
	}
	copy(data[off+20:], "DAMAGED!")
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}

	o2 := mustOpen(t, dir, 100)
	want := []string{"ev-000", "ev-001", "ev-002", "ev-004", "ev-005", "ev-006", "ev-007", "ev-008", "ev-009", "incident outbox damaged"}
	if diff := cmp.Diff(want, describe(o2.Pending(0))); diff != "" {
		t.Errorf("after the damage (-want +got):\n%s", diff)
	}
	inc := o2.Pending(0)[9].Event
	if inc.Evidence["damaged_bytes"] == int64(0) || !strings.Contains(inc.Summary, "moved aside to outbox/damaged-") {
		t.Errorf("incident %+v, want the damage counted and where it went", inc)
	}
	if o2.Damaged() == 0 || o2.Truncated() != 0 {
		t.Errorf("Damaged() = %d Truncated() = %d, want damage counted and no tail cut", o2.Damaged(), o2.Truncated())
	}
	aside, _ := filepath.Glob(filepath.Join(dir, "outbox", "damaged-*.bin"))
	if len(aside) != 1 {
		t.Fatalf("damaged files %v, want one", aside)
	}
	if b, _ := os.ReadFile(aside[0]); !strings.Contains(string(b), "DAMAGED!") {
		t.Errorf("the file moved aside holds %q, want the damaged bytes", b)
	}
	o2.Close()
	// The log was rewritten: a reopen finds no damage and the same queue.
	o3 := mustOpen(t, dir, 100)
	if diff := cmp.Diff(want, describe(o3.Pending(0))); diff != "" {
		t.Errorf("after a reopen (-want +got):\n%s", diff)
	}
	if o3.Damaged() != 0 {
		t.Errorf("Damaged() after a reopen = %d, want 0: the log should have been rewritten", o3.Damaged())
	}
}

// churn appends and acks n events, so that compaction becomes due.
func churn(t *testing.T, o *Outbox, n int) {
	t.Helper()
	for i := range n {
		if err := o.Append(core.Event{ID: fmt.Sprintf("churn-%d", i), Kind: "action"}); err != nil {
			t.Fatalf("Append: %v", err)
		}
		for _, it := range o.Pending(0) {
			if strings.HasPrefix(it.Event.ID, "churn-") {
				if err := o.Ack(it.Seq); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
}

func setHook(t *testing.T, h func(step string) error) {
	t.Helper()
	compactHook = h
	t.Cleanup(func() { compactHook = nil })
}

// A compaction that fails removes its temporary file, never fails the
// Append that triggered it (the event is durable), makes the outbox
// degraded, and is not tried again before its backoff.
func TestOutboxCompactionFailureIsHealthNotALostEvent(t *testing.T) {
	for _, failAt := range []string{"create", "write", "sync", "rename"} {
		t.Run("failing at "+failAt, func(t *testing.T) {
			o, clock, dir := openClocked(t)
			attempts := 0
			setHook(t, func(step string) error {
				if step == "create" {
					attempts++
				}
				if step == failAt {
					return errors.New("injected " + step + " failure")
				}
				return nil
			})
			if err := o.Append(event(1)); err != nil {
				t.Fatal(err)
			}
			churn(t, o, 300) // 600 dead records: compaction due, and failing
			if attempts != 1 {
				t.Errorf("%d compaction attempts during 300 appends, want 1 (then backoff)", attempts)
			}
			if _, err := os.Stat(filepath.Join(dir, "outbox", outboxTmp)); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("the temporary file is left: %v", err)
			}
			if h := o.Health(); !h.Degraded || !strings.Contains(h.Detail, "compacting the log fails") {
				t.Errorf("health %+v, want degraded naming the compaction", h)
			}
			clock.Add(2 * time.Second) // past the first backoff
			compactHook = nil
			churn(t, o, 1)
			if h := o.Health(); h.Degraded {
				t.Errorf("health after a compaction that worked: %+v", h)
			}
			o.Close()
			o2 := mustOpen(t, dir, 100)
			if diff := cmp.Diff([]string{"ev-001"}, ids(o2.Pending(0))); diff != "" {
				t.Errorf("after reopen (-want +got):\n%s", diff)
			}
		})
	}
}

// Once the compaction's rename succeeded, the new file is the log, even if
// the directory fsync after it failed: later events go there, not into the
// old, unlinked file, and only once the directory is synced (until then
// they are kept in memory).
func TestOutboxUsesTheNewLogWhenTheDirectorySyncAfterTheRenameFails(t *testing.T) {
	o, clock, dir := openClocked(t)
	renamed := false
	setHook(t, func(step string) error {
		switch step {
		case "rename":
			renamed = true
		case "dir-sync":
			return errors.New("injected directory fsync failure")
		}
		return nil
	})
	for i := 0; !renamed && i < 1000; i++ {
		churn(t, o, 1)
	}
	if !renamed {
		t.Fatal("no compaction ran")
	}
	if h := o.Health(); !h.Degraded || !strings.Contains(h.Detail, "could not be synced after a compaction") {
		t.Errorf("health %+v, want degraded naming the directory sync", h)
	}
	if err := o.Append(event(42)); err != nil {
		t.Fatal(err)
	}
	if h := o.Health(); !h.Degraded || !strings.Contains(h.Detail, "syncing the outbox directory after a compaction") || o.MemoryOnly() == 0 {
		t.Errorf("health %+v with %d in memory only, want the event in memory while the directory cannot be synced", h, o.MemoryOnly())
	}
	compactHook = nil
	clock.Add(retryLast)
	settleDisk(t, o, clock)
	if h := o.Health(); h.Degraded || o.MemoryOnly() != 0 {
		t.Errorf("health after the directory synced: %+v, %d in memory only", h, o.MemoryOnly())
	}
	o.Close()
	o2 := mustOpen(t, dir, 100)
	want := []string{"ev-042", "incident outbox disk-failing", "recovered outbox written"}
	if diff := cmp.Diff(want, describe(o2.Pending(0))); diff != "" {
		t.Errorf("after reopen (-want +got):\n%s", diff)
	}
}

// A write that fails (here: /dev/full, whose truncate fails too) keeps the
// event in memory, queues an incident, never leaves a partial record in
// the log, and once the disk works again everything is written, in order.
func TestOutboxKeepsEventsInMemoryWhileTheLogCannotBeWritten(t *testing.T) {
	o, clock, dir := openClocked(t)
	for i := range 3 {
		if err := o.Append(event(i)); err != nil {
			t.Fatal(err)
		}
	}
	full, err := os.OpenFile("/dev/full", os.O_RDWR, 0)
	if err != nil {
		t.Skipf("no /dev/full: %v", err)
	}
	o.mu.Lock()
	real := o.f
	o.f = full
	o.mu.Unlock()
	acked := o.Pending(0)[0]
	for i := 3; i < 6; i++ {
		if err := o.Append(event(i)); err != nil {
			t.Fatalf("Append while the disk is full = %v, want the event kept in memory", err)
		}
	}
	if err := o.Ack(acked.Seq); err != nil {
		t.Fatal(err)
	}
	h := o.Health()
	if !h.Degraded || !strings.Contains(h.Detail, "events kept in memory only") || !strings.Contains(h.Detail, "no space left") {
		t.Errorf("health %+v, want degraded: kept in memory, and why", h)
	}
	if o.MemoryOnly() != 4 { // ev-003..005 and the incident
		t.Errorf("MemoryOnly() = %d, want 4", o.MemoryOnly())
	}
	// The disk works again: at the next retry everything is written.
	o.mu.Lock()
	o.f = real
	o.mu.Unlock()
	full.Close()
	clock.Add(retryLast)
	settleDisk(t, o, clock)
	if h := o.Health(); h.Degraded || o.MemoryOnly() != 0 {
		t.Errorf("after the disk recovered: health %+v, %d in memory only", h, o.MemoryOnly())
	}
	want := []string{"ev-001", "ev-002", "ev-003", "incident outbox disk-failing", "ev-004", "ev-005", "recovered outbox written"}
	if diff := cmp.Diff(want, describe(o.Pending(0))); diff != "" {
		t.Errorf("queued (-want +got):\n%s", diff)
	}
	o.Close()
	o2 := mustOpen(t, dir, 100)
	if diff := cmp.Diff(want, describe(o2.Pending(0))); diff != "" {
		t.Errorf("the log after reopening (-want +got):\n%s", diff)
	}
	if o2.Truncated() != 0 || o2.Damaged() != 0 {
		t.Errorf("the log was torn (%d) or damaged (%d)", o2.Truncated(), o2.Damaged())
	}
}

// A new log numbers its events from the clock (microseconds), so that a
// node whose state directory was wiped keeps numbering upwards.
func TestOutboxNumbersANewLogFromTheClock(t *testing.T) {
	clock := newClock()
	o, err := Open(t.TempDir(), Options{Now: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	defer o.Close()
	if err := o.Append(event(1)); err != nil {
		t.Fatal(err)
	}
	if got, want := o.Pending(0)[0].Seq, uint64(clock.Now().UnixMicro()); got != want {
		t.Errorf("first seq = %d, want the clock's %d", got, want)
	}
}

func FuzzParseLog(f *testing.F) {
	good, _ := encodeRecord(record{Op: "e", Seq: 1, Event: &core.Event{ID: "a"}})
	ack, _ := encodeRecord(record{Op: "a", Seq: 1})
	f.Add(cat(good, ack))
	f.Add(cat(good, []byte("junk"), good))
	f.Add(cat(good, good[:5]))
	f.Fuzz(func(t *testing.T, data []byte) {
		r := parseLog(data)
		if r.end+r.tail != int64(len(data)) || r.end < 0 || r.tail < 0 {
			t.Fatalf("end %d + tail %d != %d bytes", r.end, r.tail, len(data))
		}
		prev := int64(0)
		for _, s := range r.damaged {
			if s.Off < prev || s.Len <= 0 || s.Off+s.Len > r.end {
				t.Fatalf("damaged span %+v out of order or outside [0,%d): %+v", s, r.end, r.damaged)
			}
			prev = s.Off + s.Len
		}
		for seq := range r.live {
			if seq == 0 || seq >= maxSeq || seq >= r.nextSeq {
				t.Fatalf("live seq %d with next %d", seq, r.nextSeq)
			}
		}
	})
}

// BenchmarkOutboxAppendAtTheBound is Append into a full outbox of the
// default size: every append chooses what to drop.
func BenchmarkOutboxAppendAtTheBound(b *testing.B) {
	o, err := Open(b.TempDir(), Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer o.Close()
	kinds := []string{"incident", "action", "offload-drift", "recovered"}
	for i := range DefaultMax {
		if err := o.Append(core.Event{Kind: kinds[i%4], Target: fmt.Sprintf("wg0/%d", i%50)}); err != nil {
			b.Fatal(err)
		}
	}
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		if err := o.Append(core.Event{Kind: kinds[i%4], Target: "wg0/x"}); err != nil {
			b.Fatal(err)
		}
	}
}
