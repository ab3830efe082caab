package outbox

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/edgeheal/edgeheal/agent/core"
	"github.com/edgeheal/edgeheal/internal/testsupport"
)

// TestLabOutboxSurvivesAFullDisk fills a 256 KiB tmpfs (in a private mount
// namespace of a child process, so nothing outside sees it) while events
// arrive and are acknowledged, so that appends and compactions run out of
// space: every event Append accepted is kept, no temporary file is left,
// and once space returns everything is in the log, in order.
func TestLabOutboxSurvivesAFullDisk(t *testing.T) {
	testsupport.RequireRoot(t, "a tmpfs in a private mount namespace")
	out := testsupport.RunInTmpfs(t, 256, "TestHelperFullDisk")
	t.Log(lastLine(out, "FULLDISK-OK"))
}

func lastLine(s, prefix string) string {
	for _, l := range strings.Split(s, "\n") {
		if strings.HasPrefix(l, prefix) {
			return strings.TrimSpace(l)
		}
	}
	return ""
}

func noTmp(t *testing.T, dir string) {
	t.Helper()
	if _, err := os.Stat(filepath.Join(dir, "outbox", outboxTmp)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a compaction's temporary file is left: %v", err)
	}
}

// TestHelperFullDisk is the child of TestLabOutboxSurvivesAFullDisk.
func TestHelperFullDisk(t *testing.T) {
	dir := os.Getenv(testsupport.TmpfsEnv)
	if dir == "" {
		return
	}
	filler := filepath.Join(dir, "filler")
	if err := os.WriteFile(filler, make([]byte, 64<<10), 0o600); err != nil {
		t.Fatal(err)
	}
	clock := newClock()
	ob, err := Open(dir, Options{Max: 100000, Now: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	big := strings.Repeat("x", 300)
	var kept []string
	compactFailures := 0
	for i := 0; ob.MemoryOnly() < 40 && i < 5000; i++ {
		id := fmt.Sprintf("e%05d", i)
		if err := ob.Append(core.Event{ID: id, Kind: "incident", Summary: big}); err != nil {
			t.Fatalf("Append %s: %v", id, err)
		}
		kept = append(kept, id)
		if i%3 == 2 { // the broker acknowledges two of three: compactions come due
			for _, it := range ob.Pending(2) {
				if err := ob.Ack(it.Seq); err != nil {
					t.Fatal(err)
				}
				kept = slices.DeleteFunc(kept, func(s string) bool { return s == it.Event.ID })
			}
		}
		noTmp(t, dir)
		ob.mu.Lock()
		if ob.disk.compactErr != nil && ob.disk.compactAt.Sub(clock.Now()) == ob.disk.compactDelay {
			compactFailures++ // failed just now
		}
		ob.mu.Unlock()
		clock.Add(100 * time.Millisecond)
	}
	if ob.MemoryOnly() == 0 {
		t.Fatal("the disk never filled")
	}
	if compactFailures == 0 {
		t.Fatal("no compaction ran out of space: the test's sizes no longer make it")
	}
	if h := ob.Health(); !h.Degraded || !strings.Contains(h.Detail, "no space left on device") {
		t.Errorf("health while full: %+v", h)
	}
	inMemory := ob.MemoryOnly()
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	clock.Add(retryLast)
	tickNow(ob)
	if ob.MemoryOnly() != 0 {
		t.Fatalf("%d events still only in memory after space returned: %+v", ob.MemoryOnly(), ob.Health())
	}
	ob.Close()
	ob2, err := Open(dir, Options{Max: 100000})
	if err != nil {
		t.Fatal(err)
	}
	defer ob2.Close()
	var got []string
	for _, it := range ob2.Pending(0) {
		if it.Event.Target != "outbox" {
			got = append(got, it.Event.ID)
		}
	}
	if diff := cmp.Diff(kept, got); diff != "" {
		t.Fatalf("after reopen (-want +got):\n%s", diff)
	}
	if ob2.Truncated() != 0 || ob2.Damaged() != 0 {
		t.Fatalf("the log had a torn (%d) or damaged (%d) record", ob2.Truncated(), ob2.Damaged())
	}
	noTmp(t, dir)
	fmt.Printf("FULLDISK-OK %d events kept, %d of them written only after space returned; %d compactions ran out of space\n", len(kept), inMemory, compactFailures)
}

// compactSteps are the steps a compaction can be killed at.
var compactSteps = []string{"create", "write", "sync", "rename", "dir-sync"}

// TestLabOutboxCompactionSurvivesAKill9AtEachStep kills -9 an agent-like
// child in the middle of a compaction, at each of its steps, on a 256 KiB
// tmpfs: afterwards the queue holds exactly the events that were queued,
// each once, and no temporary file is left.
func TestLabOutboxCompactionSurvivesAKill9AtEachStep(t *testing.T) {
	testsupport.RequireRoot(t, "a tmpfs in a private mount namespace")
	out := testsupport.RunInTmpfs(t, 256, "TestHelperCompactionKeeper")
	for _, s := range compactSteps {
		if !strings.Contains(out, "KILLED-AT "+s+" OK") {
			t.Errorf("no kill at step %s:\n%s", s, out)
		}
	}
}

const killStepEnv = "EDGEHEAL_TEST_KILL_AT"

// TestHelperCompactionKeeper runs in the tmpfs's mount namespace: for each
// step it starts TestHelperCompactionVictim, kills it -9 when it reports
// that step, and checks the queue.
func TestHelperCompactionKeeper(t *testing.T) {
	dir := os.Getenv(testsupport.TmpfsEnv)
	if dir == "" || os.Getenv(killStepEnv) != "" {
		return
	}
	for _, s := range compactSteps {
		state := filepath.Join(dir, s)
		cmd := testsupport.Command(os.Args[0], "-test.run=^TestHelperCompactionVictim$", "-test.count=1")
		cmd.Env = append(os.Environ(), killStepEnv+"="+s, "EDGEHEAL_TEST_STATE="+state)
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		cmd.Stderr = os.Stderr
		sc := bufio.NewScanner(stdout)
		reached := false
		var said []string
		for sc.Scan() {
			if sc.Text() == "AT "+s {
				reached = true
				break
			}
			said = append(said, sc.Text())
		}
		if err := syscall.Kill(cmd.Process.Pid, syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		_ = cmd.Wait()
		if !reached {
			t.Fatalf("the victim never reached step %s:\n%s", s, strings.Join(said, "\n"))
		}
		o, err := Open(state, Options{Max: 1000})
		if err != nil {
			t.Fatal(err)
		}
		want := eventIDs(victimKeep)
		if diff := cmp.Diff(want, ids(o.Pending(0))); diff != "" {
			t.Fatalf("after a kill -9 at %s (-want +got):\n%s", s, diff)
		}
		o.Close()
		noTmp(t, state)
		if err := os.RemoveAll(state); err != nil { // room for the next step
			t.Fatal(err)
		}
		fmt.Printf("KILLED-AT %s OK\n", s)
	}
}

const victimKeep = 20

func eventIDs(n int) []string {
	var out []string
	for i := range n {
		out = append(out, fmt.Sprintf("keep-%02d", i))
	}
	return out
}

// TestHelperCompactionVictim queues victimKeep events, then appends and
// acknowledges until a compaction reaches its step, says so and waits to
// be killed.
func TestHelperCompactionVictim(t *testing.T) {
	at := os.Getenv(killStepEnv)
	if at == "" {
		return
	}
	o, err := Open(os.Getenv("EDGEHEAL_TEST_STATE"), Options{Max: 1000})
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range eventIDs(victimKeep) {
		if err := o.Append(core.Event{ID: id, Kind: "incident"}); err != nil {
			t.Fatal(err)
		}
	}
	compactHook = func(step string) error {
		if step == at {
			fmt.Println("AT " + step)
			time.Sleep(time.Minute) // killed here
		}
		return nil
	}
	churn(t, o, 1000)
	t.Fatal("no compaction reached step " + at)
}
