package agent

import (
	"errors"
	"log/slog"
	"sync"
	"testing"

	"github.com/edgeheal/edgeheal/agent/evidence"
)

// fakeStore is an EventStore that keeps what it is given, or refuses it.
type fakeStore struct {
	mu     sync.Mutex
	events []Event
	err    error
}

func (s *fakeStore) Append(e Event) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err != nil {
		return s.err
	}
	s.events = append(s.events, e)
	return nil
}

func TestRecorderStampsQueuesAndObserves(t *testing.T) {
	store := &fakeStore{}
	var seen []string
	r := &Recorder{Store: store, Log: slog.New(slog.DiscardHandler), OnEvent: func(e Event) { seen = append(seen, e.Kind) }}
	r.Emit(Event{Kind: "action", Action: "handshake", Result: "ok", Target: "wg0/AbCd"})
	r.Emit(Event{Kind: "offload-drift", Target: "wwan0"})
	if len(store.events) != 2 {
		t.Fatalf("queued %d events, want 2", len(store.events))
	}
	for _, e := range store.events {
		if e.ID == "" || e.Time.IsZero() {
			t.Errorf("an emitted event lacks its id or time: %+v", e)
		}
	}
	store.err = errors.New("disk full")
	r.Emit(Event{Kind: "incident"})
	want := []string{"action", "offload-drift", "incident", EventOutboxError}
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
	r := &Recorder{Store: store, Evidence: ev, Log: slog.New(slog.DiscardHandler)}
	r.SetCollect(func() map[string]any {
		collected++
		return map[string]any{"udp": map[string]int{"InCsumErrors": 7}}
	})
	r.Emit(Event{Kind: "action", Target: "wg0/AbCd"})
	r.Emit(Event{Kind: "incident", Target: "wg0/AbCd", Summary: "probe failed 3 times"})
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
