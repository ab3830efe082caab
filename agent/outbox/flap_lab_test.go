package outbox

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/edgeheal/edgeheal/agent/core"
	"github.com/edgeheal/edgeheal/internal/testsupport"
)

// TestLabOutboxFullDiskNeverFlaps: with a 256 KiB state directory full
// and the broker up (everything queued is acknowledged at once), the old
// outbox made an incident and a recovery every second or two, forever:
// each ack was a small write that fit, which "recovered" the disk, and the
// next event's write failed again. Now the disk incident stays open until
// the disk has kept room for settleFor: one incident while it is full, one
// recovery after room returns, and every event the outbox queued of its
// own reached the observer (the agent's count) and the broker.
func TestLabOutboxFullDiskNeverFlaps(t *testing.T) {
	testsupport.RequireRoot(t, "a tmpfs in a private mount namespace")
	out := testsupport.RunInTmpfs(t, 256, "TestHelperFullDiskFlap")
	t.Log(lastLine(out, "FLAP-OK"))
}

// TestHelperFullDiskFlap is the child of TestLabOutboxFullDiskNeverFlaps.
func TestHelperFullDiskFlap(t *testing.T) {
	dir := os.Getenv(testsupport.TmpfsEnv)
	if dir == "" {
		return
	}
	settleFor = 3 * time.Second
	ob, err := Open(dir, Options{Max: 1000})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	told := map[string]bool{}
	ob.Observe(func(e core.Event) { mu.Lock(); told[e.ID] = true; mu.Unlock() })
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go ob.Run(ctx)
	// The broker is up: it takes and acknowledges whatever is queued.
	var delivered []core.Event
	ack := func() {
		for _, it := range ob.Pending(0) {
			if err := ob.Ack(it.Seq); err != nil {
				t.Error(err)
			}
			mu.Lock()
			delivered = append(delivered, it.Event)
			mu.Unlock()
		}
	}
	count := func() (incidents, recovered int) {
		mu.Lock()
		defer mu.Unlock()
		for _, e := range delivered {
			if e.Target == "outbox" && e.Result == "disk-failing" {
				incidents++
			}
			if e.Target == "outbox" && e.Result == "written" {
				recovered++
			}
		}
		return incidents, recovered
	}
	filler := fill(t, filepath.Join(dir, "filler"))
	run := func(d time.Duration, from int) int {
		i := from
		for end := time.Now().Add(d); time.Now().Before(end); i++ {
			if err := ob.Append(core.Event{ID: fmt.Sprintf("ev-%04d", i), Kind: "action", Target: "wg0"}); err != nil {
				t.Fatal(err)
			}
			time.Sleep(100 * time.Millisecond)
			ack()
		}
		return i
	}
	n := run(15*time.Second, 0)
	if inc, rec := count(); inc != 1 || rec != 0 {
		t.Fatalf("with the disk full for 15 s: %d disk incidents and %d recoveries, want one incident and no recovery", inc, rec)
	}
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	n = run(settleFor+4*time.Second, n)
	ack()
	inc, rec := count()
	if inc != 1 || rec != 1 {
		t.Fatalf("after room returned: %d disk incidents and %d recoveries, want one of each", inc, rec)
	}
	mu.Lock()
	for _, e := range delivered {
		if e.Target == "outbox" && !told[e.ID] {
			t.Errorf("the outbox's own event %s %s reached the broker but not the observer", e.Kind, e.Result)
		}
	}
	got := len(delivered)
	mu.Unlock()
	fmt.Printf("FLAP-OK events=%d delivered=%d incidents=%d recovered=%d\n", n, got, inc, rec)
}

// fill writes path until the file system is full.
func fill(t *testing.T, path string) string {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	buf := make([]byte, 4096)
	for {
		if _, err := f.Write(buf); err != nil {
			return path
		}
	}
}
