package history

import (
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/edgeheal/edgeheal/internal/testsupport"
	"github.com/edgeheal/edgeheal/wire"
)

// On a state directory whose disk is full, the history is kept in
// memory, the component says so, and it is written once the disk has
// room again: nothing it counted is lost.
func TestLabAFullDiskKeepsTheHistoryInMemoryUntilItHasRoom(t *testing.T) {
	testsupport.RequireRoot(t, "a tmpfs in a private mount namespace")
	out := testsupport.RunInTmpfs(t, 64, "TestHelperHistoryFullDisk")
	t.Log(strings.TrimSpace(out[strings.LastIndex(out, "SAVED-AGAIN"):]))
}

// TestHelperHistoryFullDisk is the child of
// TestLabAFullDiskKeepsTheHistoryInMemoryUntilItHasRoom.
func TestHelperHistoryFullDisk(t *testing.T) {
	dir := os.Getenv(testsupport.TmpfsEnv)
	if dir == "" {
		return
	}
	b, err := Open(dir, "edge-17", "plant-7", 10*time.Second, t0)
	if err != nil {
		t.Fatal(err)
	}
	k := &Keeper{Book: b, Dir: dir, Log: slog.New(slog.NewTextHandler(os.Stderr, nil))}
	at := sweep(b, t0, 5, peer(wire.CheckOK))
	at = darkFor(b, at, 10, "i1")
	k.save()
	if h := k.Health(); h.Degraded {
		t.Fatalf("with room: %+v", h)
	}

	// Another file takes every byte left.
	filler := filepath.Join(dir, "filler")
	f, err := os.Create(filler)
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := f.Write(make([]byte, 4096)); err != nil {
			break
		}
	}
	f.Close()
	at = darkFor(b, at, 20, "i2")
	k.save()
	h := k.Health()
	if !h.Degraded || !strings.Contains(h.Detail, "kept in memory only") {
		t.Fatalf("with the disk full: %+v, want degraded, kept in memory", h)
	}
	if n := len(b.Snapshot(at, true).Incidents); n != 2 {
		t.Fatalf("with the disk full the book holds %d incidents, want both", n)
	}

	// Room again: the next save writes everything, and a restart reads it.
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	k.save()
	if h := k.Health(); h.Degraded {
		t.Fatalf("with room again: %+v", h)
	}
	again, err := Open(dir, "edge-17", "plant-7", 10*time.Second, at)
	if err != nil {
		t.Fatal(err)
	}
	got := again.Snapshot(at, true).Incidents
	if len(got) != 2 || got[0].DurationSeconds != 20 || got[1].DurationSeconds != 10 {
		t.Fatalf("read back after the disk had room: %+v, want the 20 s and the 10 s incidents", got)
	}
	fmt.Println("SAVED-AGAIN: both incidents written once the disk had room")
}
