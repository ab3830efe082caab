package ktrace

import (
	"os"
	"runtime"
	"slices"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/edgeheal/edgeheal/internal/testsupport"
)

func TestParseLine(t *testing.T) {
	for _, tc := range []struct {
		line string
		want Event
	}{
		{"         ethtool-12311   (  12311) [001] ..... 26696.215363: notifier_run: ethnl_netdev_event",
			Event{At: 26696*time.Second + 215363*time.Microsecond, TGID: 12311, TID: 12311, Comm: "ethtool"}},
		{"  edgeheal-lab b-7-4242   (   4200) [000] .N... 12.000001: notifier_run: ethnl_netdev_event",
			Event{At: 12*time.Second + time.Microsecond, TGID: 4200, TID: 4242, Comm: "edgeheal-lab b-7"}},
		{"           <...>-99     (-------) [001] d.h1. 3.5: notifier_run: ethnl_netdev_event",
			Event{At: 3*time.Second + 500*time.Millisecond, TGID: 0, TID: 99, Comm: "<...>"}},
	} {
		got, err := parseLine(tc.line)
		if err != nil {
			t.Errorf("parseLine(%q): %v", tc.line, err)
			continue
		}
		if got != tc.want {
			t.Errorf("parseLine(%q) = %+v, want %+v", tc.line, got, tc.want)
		}
	}
	for _, bad := range []string{
		"ethtool-12311 [001] ..... 26696.215363: notifier_run: x", // no TGID
		"ethtool-x   (  1) [001] ..... 26696.215363: notifier_run: x",
		"ethtool-1   (  1) [001] ..... 26696.215363 notifier_run: x",
	} {
		if ev, err := parseLine(bad); err == nil {
			t.Errorf("parseLine(%q) = %+v, want an error", bad, ev)
		}
	}
}

func TestKernelThreadsAreToldApart(t *testing.T) {
	if isKernelThread(os.Getpid()) {
		t.Errorf("this test process (%d) taken for a kernel thread", os.Getpid())
	}
	if !isKernelThread(2) { // kthreadd, the parent of every kernel thread
		b, _ := os.ReadFile("/proc/2/stat")
		t.Errorf("pid 2 not taken for a kernel thread: %s", b)
	}
	if isKernelThread(1 << 30) {
		t.Error("a thread that does not exist taken for a kernel thread")
	}
}

// A veth created in a namespace of the test's own is recorded, by this
// process, between the clock readings either side of its creation; the
// instance is gone after Close.
func TestTheKernelRecordsALinkThisProcessCreated(t *testing.T) {
	testsupport.RequireRoot(t, "tracefs and a network namespace")
	tr, err := OpenNetdevEvents()
	if err != nil {
		t.Fatalf("OpenNetdevEvents: %v", err)
	}
	closed := false
	t.Cleanup(func() {
		if !closed {
			tr.Close()
		}
	})
	if _, err := tr.Take(); err != nil { // what others did before
		t.Fatalf("Take: %v", err)
	}
	before := Now()
	errc := make(chan error, 1)
	go func() {
		// Never unlocked: the thread ends with the goroutine, and the
		// namespace with its links goes with it.
		runtime.LockOSThread()
		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
			errc <- err
			return
		}
		errc <- netlink.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "kt0"}, PeerName: "kt1"})
	}()
	if err := <-errc; err != nil {
		t.Fatalf("creating a veth in a new namespace: %v", err)
	}
	after := Now()
	evs, err := tr.Take()
	if err != nil {
		t.Fatalf("Take: %v", err)
	}
	mine := slices.DeleteFunc(evs, func(e Event) bool { return e.TGID != os.Getpid() })
	for _, e := range mine {
		if e.Kernel {
			t.Errorf("an event of this process marked as a kernel thread's: %+v", e)
		}
	}
	if len(mine) == 0 {
		t.Fatalf("no event of this process (%d) among %d: %+v", os.Getpid(), len(evs), evs)
	}
	for _, e := range mine {
		if e.At < before || e.At > after {
			t.Errorf("event at %v, outside the creation's %v..%v", e.At, before, after)
		}
	}
	if err := tr.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	closed = true
	again, err := OpenNetdevEvents()
	if err != nil {
		t.Fatalf("OpenNetdevEvents again: %v", err)
	}
	defer again.Close()
	if _, err := again.instances.Seek(0, 0); err != nil {
		t.Fatal(err)
	}
	names, err := again.instances.Readdirnames(-1)
	if err != nil {
		t.Fatal(err)
	}
	if slices.Contains(names, tr.name) {
		t.Errorf("instance %s still there after Close: %v", tr.name, names)
	}
	if !slices.Contains(names, again.name) {
		t.Errorf("the listing %v lacks the open instance %s: it proves nothing", names, again.name)
	}
}
