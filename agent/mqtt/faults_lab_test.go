package mqtt

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/edgeheal/edgeheal/agent/core"
	"github.com/edgeheal/edgeheal/agent/outbox"
	"github.com/edgeheal/edgeheal/internal/testsupport"
)

// corruptRecord overwrites a few bytes in the middle of the body of the
// n-th record of the outbox log in stateDir (records are length- and
// CRC-framed: 8 bytes of header, then the body).
func corruptRecord(t *testing.T, stateDir string, n int) {
	t.Helper()
	path := filepath.Join(stateDir, "outbox", "outbox.log")
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	off := 0
	for range n {
		if off+8 > len(data) {
			t.Fatalf("the log has fewer than %d records", n)
		}
		l := int(data[off]) | int(data[off+1])<<8 | int(data[off+2])<<16 | int(data[off+3])<<24
		off += 8 + l
	}
	copy(data[off+12:], "\x00BAD\x00")
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
}

// A record damaged in the middle of the outbox log costs that event only:
// every later one reaches the cloud, in order, and one incident event says
// what happened.
func TestMQTTDeliversEveryEventAfterACorruptRecordAndReportsTheDamage(t *testing.T) {
	deliversPastACorruptRecord(t, t.TempDir())
}

// TestLabMQTTDeliversPastACorruptRecordOnASmallTmpfs is the same on a
// 256 KiB tmpfs state directory (a private mount namespace of a child).
func TestLabMQTTDeliversPastACorruptRecordOnASmallTmpfs(t *testing.T) {
	testsupport.RequireRoot(t, "a tmpfs in a private mount namespace")
	testsupport.RunInTmpfs(t, 256, "TestHelperCorruptRecord")
}

// TestHelperCorruptRecord is the child of TestLabMQTTDeliversPastACorruptRecordOnASmallTmpfs.
func TestHelperCorruptRecord(t *testing.T) {
	if dir := os.Getenv(testsupport.TmpfsEnv); dir != "" {
		deliversPastACorruptRecord(t, dir)
	}
}

func deliversPastACorruptRecord(t *testing.T, stateDir string) {
	m := newMosquitto(t, map[string]string{"node-x": "pw-x", "watcher": "pw-w"})
	ob, err := outbox.Open(stateDir, outbox.Options{})
	if err != nil {
		t.Fatal(err)
	}
	all := eventIDs("damaged", 12)
	for _, id := range all {
		if err := ob.Append(core.Event{ID: id, Kind: "incident", Target: "wg0"}); err != nil {
			t.Fatal(err)
		}
	}
	ob.Close()
	corruptRecord(t, stateDir, 4) // damaged-004

	m.Start()
	w := m.watch(t, "pw-w")
	ob, err = outbox.Open(stateDir, outbox.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer ob.Close()
	p := newTestPublisher(t, m.nodeConfig(t, "node-x", "pw-x"), "node-x", stateDir, ob, nil)
	defer runPublisher(t, context.Background(), p)()
	want := append(append([]string{}, all[:4]...), all[5:]...)
	testsupport.WaitFor(t, 20*time.Second, "the outbox to empty", func() bool { return ob.Depth() == 0 })
	got := w.nextEvents(t, want)
	var ids []string
	damage := 0
	for _, a := range firstArrivals(got) {
		if a.msg.Target == "outbox" && a.msg.Result == "damaged" {
			damage++
			continue
		}
		ids = append(ids, a.msg.ID)
	}
	if strings.Join(ids, ",") != strings.Join(want, ",") {
		t.Errorf("delivered\n got %v\nwant %v", ids, want)
	}
	if damage != 1 {
		t.Errorf("%d damage incidents delivered, want 1", damage)
	}
}

// TestLabMQTTFullStateDirKeepsEveryEventAndDeliversIt fills a 256 KiB
// tmpfs state directory (in a private mount namespace of a child process)
// while events arrive and the broker is down: every event Append accepted
// is kept, the log gets them once space returns, no temporary file is
// left, and the cloud receives each once, in order, when the broker is back.
func TestLabMQTTFullStateDirKeepsEveryEventAndDeliversIt(t *testing.T) {
	testsupport.RequireRoot(t, "a tmpfs in a private mount namespace")
	out := testsupport.RunInTmpfs(t, 256, "TestHelperFullStateDir")
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, "FULL-OK") {
			t.Log(l)
		}
	}
}

// TestHelperFullStateDir is the child of TestLabMQTTFullStateDirKeepsEveryEventAndDeliversIt.
func TestHelperFullStateDir(t *testing.T) {
	dir := os.Getenv(testsupport.TmpfsEnv)
	if dir == "" {
		return
	}
	m := newMosquitto(t, map[string]string{"node-f": "pw-f", "watcher": "pw-w"})
	// The cloud subscribes first (its session survives the broker's
	// restart), so that it misses nothing published after the return.
	m.Start()
	w := m.watch(t, "pw-w")
	m.Stop()
	filler := filepath.Join(dir, "filler")
	if err := os.WriteFile(filler, make([]byte, 96<<10), 0o600); err != nil {
		t.Fatal(err)
	}
	ob, err := outbox.Open(dir, outbox.Options{Max: 100000})
	if err != nil {
		t.Fatal(err)
	}
	defer ob.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go ob.Run(ctx) // writes what memory holds once it can
	p := newTestPublisher(t, m.nodeConfig(t, "node-f", "pw-f"), "node-f", dir, ob, nil)
	defer runPublisher(t, ctx, p)()

	big := strings.Repeat("y", 400)
	var want []string
	for i := 0; ob.MemoryOnly() < 30 && i < 2000; i++ {
		id := fmt.Sprintf("full-%04d", i)
		if err := ob.Append(core.Event{ID: id, Kind: "incident", Target: "wg0", Summary: big}); err != nil {
			t.Fatalf("Append %s: %v", id, err)
		}
		want = append(want, id)
	}
	if ob.MemoryOnly() < 30 {
		t.Fatal("the disk never filled")
	}
	inMemory := ob.MemoryOnly()
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	testsupport.WaitFor(t, 30*time.Second, "the events kept in memory to reach the log", func() bool { return ob.MemoryOnly() == 0 })
	if _, err := os.Stat(filepath.Join(dir, "outbox", "outbox.log.tmp")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a temporary file is left: %v", err)
	}

	m.Start()
	testsupport.WaitFor(t, 60*time.Second, "the outbox to empty", func() bool { return ob.Depth() == 0 })
	got := w.nextEvents(t, want)
	var ids []string
	for _, a := range firstArrivals(got) {
		if a.msg.Target != "outbox" {
			ids = append(ids, a.msg.ID)
		}
	}
	if strings.Join(ids, ",") != strings.Join(want, ",") {
		t.Fatalf("delivered %d events, want the %d accepted, in order\n got %v\nwant %v", len(ids), len(want), ids, want)
	}
	fmt.Printf("FULL-OK %d events accepted, %d of them only in memory while the disk was full; all delivered once space and the broker returned\n", len(want), inMemory)
}
