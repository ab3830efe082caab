package mqtt

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestSessionCountsAndPersists(t *testing.T) {
	dir := t.TempDir()
	s := OpenSession(dir, nil)
	if a, b := s.Next(), s.Next(); a != 1 || b != 2 {
		t.Errorf("Next, Next = %d, %d; want 1, 2", a, b)
	}
	if s.Problem() != nil {
		t.Errorf("Problem = %v, want nil", s.Problem())
	}
	again := OpenSession(dir, nil)
	if got := again.Next(); got != 3 {
		t.Errorf("after reopening, Next = %d, want 3", got)
	}
}

// A counter that cannot be read or kept must neither stop reporting nor go
// back: the Session counts from the clock, which is above any counter.
func TestSessionFallsBackToTheClock(t *testing.T) {
	clock := func() time.Time { return time.Unix(1_800_000_000, 0) }
	t.Run("a corrupt file", func(t *testing.T) {
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, "session"), []byte("garbage\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		s := OpenSession(dir, clock)
		if got := s.Next(); got != 1_800_000_000 {
			t.Errorf("Next = %d, want the clock's 1800000000", got)
		}
		if got := s.Next(); got != 1_800_000_001 {
			t.Errorf("a second Next in the same second = %d, want one more", got)
		}
		if err := s.Problem(); err == nil || !strings.Contains(err.Error(), "corrupt") {
			t.Errorf("Problem = %v, want it to say the file is corrupt", err)
		}
	})
	t.Run("a state directory that cannot be written", func(t *testing.T) {
		file := filepath.Join(t.TempDir(), "not-a-directory")
		if err := os.WriteFile(file, nil, 0o600); err != nil {
			t.Fatal(err)
		}
		s := OpenSession(file, clock) // the counter would be file/session
		if got := s.Next(); got != 1_800_000_000 {
			t.Errorf("Next = %d, want the clock's 1800000000", got)
		}
		if s.Problem() == nil {
			t.Error("Problem = nil, want why the counter is not kept")
		}
	})
}
