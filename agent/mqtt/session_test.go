package mqtt

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func fixedClock(t time.Time) func() time.Time { return func() time.Time { return t } }

// A new counter starts at the instance's epoch (the clock in ms) and
// counts up by one; a reopened one goes on from the file.
func TestSessionCountsFromTheInstanceEpochAndPersists(t *testing.T) {
	dir := t.TempDir()
	start := time.Date(2026, 12, 1, 8, 0, 0, 0, time.UTC)
	s := OpenSession(dir, fixedClock(start))
	e := uint64(start.UnixMilli())
	if a, b := s.Next(), s.Next(); a != e || b != e+1 {
		t.Errorf("Next, Next = %d, %d; want %d, %d", a, b, e, e+1)
	}
	if s.Problem() != nil {
		t.Errorf("Problem = %v, want nil", s.Problem())
	}
	again := OpenSession(dir, fixedClock(start.Add(time.Hour)))
	if got := again.Next(); got != e+2 {
		t.Errorf("after reopening, Next = %d, want %d", got, e+2)
	}
}

// A counter written by an older agent (small numbers) goes on from them.
func TestSessionGoesOnFromAnOldSmallCounter(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "session"), []byte("17\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if got := OpenSession(dir, nil).Next(); got != 18 {
		t.Errorf("Next = %d, want 18", got)
	}
}

// A wiped state directory, or a replacement node of the same name, must
// not make the numbers go back.
func TestSessionNeverGoesBackAfterTheStateDirIsWiped(t *testing.T) {
	dir := t.TempDir()
	start := time.Date(2026, 12, 1, 8, 0, 0, 0, time.UTC)
	s := OpenSession(dir, fixedClock(start))
	var last uint64
	for range 500 { // a bad minute: 500 attempts
		last = s.Next()
	}
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	later := OpenSession(dir, fixedClock(start.Add(time.Minute)))
	if got := later.Next(); got <= last {
		t.Errorf("after a wipe, Next = %d, want above %d", got, last)
	}
}

func TestSessionUsesAFloorForAClockThatWasNeverSet(t *testing.T) {
	s := OpenSession(t.TempDir(), fixedClock(time.Unix(0, 0)))
	if got := s.Next(); got != uint64(epochFloor.UnixMilli()) {
		t.Errorf("Next with a 1970 clock = %d, want the floor %d", got, epochFloor.UnixMilli())
	}
}

// A counter that cannot be read or kept must neither stop reporting nor go
// back: the Session counts from the clock, which is above any counter.
func TestSessionFallsBackToTheClock(t *testing.T) {
	now := time.UnixMilli(1_800_000_000_000)
	clock := fixedClock(now)
	t.Run("a corrupt file", func(t *testing.T) {
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, "session"), []byte("garbage\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		s := OpenSession(dir, clock)
		if got := s.Next(); got != 1_800_000_000_000 {
			t.Errorf("Next = %d, want the clock's 1800000000000", got)
		}
		if got := s.Next(); got != 1_800_000_000_001 {
			t.Errorf("a second Next in the same millisecond = %d, want one more", got)
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
		if got := s.Next(); got != 1_800_000_000_000 {
			t.Errorf("Next = %d, want the clock's 1800000000000", got)
		}
		if s.Problem() == nil {
			t.Error("Problem = nil, want why the counter is not kept")
		}
	})
}
