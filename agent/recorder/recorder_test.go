package recorder

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/edgeheal/edgeheal/agent/core"
	"github.com/edgeheal/edgeheal/agent/evidence"
	"github.com/edgeheal/edgeheal/wire"
)

// fakeStore is a Store that keeps what it is given, refuses it, or holds
// every Append until released (a disk that gives no answer).
type fakeStore struct {
	mu     sync.Mutex
	events []core.Event
	err    error
	hold   chan struct{} // non-nil: Append waits for it to close
	held   chan struct{} // closed when the first Append waits on hold
	once   sync.Once
}

func (s *fakeStore) Append(e core.Event) error {
	s.mu.Lock()
	hold := s.hold
	s.mu.Unlock()
	if hold != nil {
		s.once.Do(func() { close(s.held) })
		<-hold
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err != nil {
		return s.err
	}
	s.events = append(s.events, e)
	return nil
}

func (s *fakeStore) kinds() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for _, e := range s.events {
		out = append(out, e.Kind)
	}
	return out
}

// start runs r until the test ends.
func start(t *testing.T, r *Recorder) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run = %v, want nil", err)
		}
	})
}

func flush(t *testing.T, r *Recorder) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := r.Flush(ctx); err != nil {
		t.Fatalf("Flush: %v", err)
	}
}

func TestRecorderStampsQueuesAndObserves(t *testing.T) {
	store := &fakeStore{}
	var mu sync.Mutex
	var seen []string
	r := New(Options{Store: store, Log: slog.New(slog.DiscardHandler), OnEvent: func(e core.Event) {
		mu.Lock()
		seen = append(seen, e.Kind)
		mu.Unlock()
	}})
	start(t, r)
	r.Emit(core.Event{Kind: "action", Action: "handshake", Result: "ok", Target: "wg0/AbCd"})
	r.Emit(core.Event{Kind: "offload-drift", Target: "wwan0"})
	flush(t, r)
	if got := store.kinds(); len(got) != 2 {
		t.Fatalf("queued %v, want 2 events", got)
	}
	for _, e := range store.events {
		if e.ID == "" || e.Time.IsZero() {
			t.Errorf("an emitted event lacks its id or time: %+v", e)
		}
	}
	store.mu.Lock()
	store.err = errors.New("disk full")
	store.mu.Unlock()
	r.Emit(core.Event{Kind: "incident"})
	flush(t, r)
	want := []string{"action", "offload-drift", "incident", EventOutboxError}
	mu.Lock()
	defer mu.Unlock()
	if len(seen) != len(want) {
		t.Fatalf("observed %v, want %v", seen, want)
	}
	for i := range want {
		if seen[i] != want[i] {
			t.Errorf("observed %v, want %v", seen, want)
		}
	}
}

func TestRecorderAttachesEvidenceToAnIncident(t *testing.T) {
	dir := t.TempDir()
	store := &fakeStore{}
	ev, err := evidence.Open(dir, 3)
	if err != nil {
		t.Fatal(err)
	}
	collected := 0
	r := New(Options{Store: store, Evidence: ev, Log: slog.New(slog.DiscardHandler)})
	r.SetCollect(func(ctx context.Context) map[string]any {
		collected++
		if _, ok := ctx.Deadline(); !ok {
			t.Error("evidence collected without a deadline")
		}
		return map[string]any{"udp": map[string]int{"InCsumErrors": 7}}
	})
	start(t, r)
	r.Emit(core.Event{Kind: "action", Target: "wg0/AbCd"})
	r.Emit(core.Event{Kind: "incident", Target: "wg0/AbCd", Summary: "probe failed 3 times"})
	flush(t, r)
	if collected != 1 {
		t.Errorf("evidence collected %d times, want once: only for the incident", collected)
	}
	if len(store.events) != 2 {
		t.Fatalf("queued %d events, want 2", len(store.events))
	}
	if store.events[0].Evidence != nil {
		t.Errorf("an action got evidence: %v", store.events[0].Evidence)
	}
	b, ok := store.events[1].Evidence["bundle"].(map[string]any)
	if !ok || b["evidence_file"] == nil {
		t.Fatalf("the incident's evidence = %v, want a bundle summary with its file", store.events[1].Evidence)
	}
	files, err := ev.List()
	if err != nil || len(files) != 1 {
		t.Errorf("bundles on disk = %v, %v; want one", files, err)
	}
}

// A store that gives no answer (a hung disk) never holds up Emit: the
// queue keeps the most important events up to its bound, reports what it
// gave up, and records everything kept once the store answers again.
func TestEmitNeverWaitsForAStoreThatGivesNoAnswer(t *testing.T) {
	store := &fakeStore{hold: make(chan struct{}), held: make(chan struct{})}
	r := New(Options{Store: store, Log: slog.New(slog.DiscardHandler), Max: 8})
	start(t, r)
	r.Emit(core.Event{Kind: wire.EventAction, Target: "first"})
	<-store.held // the drain took it and waits for the disk
	for range 100 {
		r.Emit(core.Event{Kind: "listen-port", Target: "info"}) // information: the first to go
	}
	for range 4 {
		r.Emit(core.Event{Kind: wire.EventIncident, Target: "incident"})
	}
	// Emit returned 105 times while the store held: it does not wait.
	close(store.hold)
	flush(t, r)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for {
		if k := store.kinds(); len(k) > 0 && k[len(k)-1] == EventDropped {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("no %s report: %v", EventDropped, store.kinds())
		case <-time.After(time.Millisecond):
		}
	}
	counts := map[string]int{}
	for _, e := range store.events {
		counts[e.Target]++
	}
	if counts["first"] != 1 || counts["incident"] != 4 || counts["info"] != 4 {
		t.Errorf("recorded %v; want the first action, all 4 incidents and the 4 newest of the information the bound leaves room for", counts)
	}
	rep := store.events[len(store.events)-1]
	if rep.Evidence["dropped"] != 96 {
		t.Errorf("the report counts %v dropped, want 96: %s", rep.Evidence["dropped"], rep.Summary)
	}
}
