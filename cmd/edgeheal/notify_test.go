package main

import (
	"context"
	"net"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/edgeheal/edgeheal/wire"
)

// notifySocket is a real unixgram socket standing in for systemd; the test
// points NOTIFY_SOCKET at it.
type notifySocket struct {
	conn *net.UnixConn
}

func newNotifySocket(t *testing.T) *notifySocket {
	t.Helper()
	path := filepath.Join(t.TempDir(), "notify.sock")
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: path, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	t.Setenv("NOTIFY_SOCKET", path)
	return &notifySocket{conn: conn}
}

// read returns the next datagram, or "" if none arrives within d.
func (s *notifySocket) read(t *testing.T, d time.Duration) string {
	t.Helper()
	buf := make([]byte, 4096)
	s.conn.SetReadDeadline(time.Now().Add(d))
	n, err := s.conn.Read(buf)
	if err != nil {
		if ne, ok := err.(net.Error); ok && ne.Timeout() {
			return ""
		}
		t.Fatal(err)
	}
	return string(buf[:n])
}

func TestNotifierSendsReadyStatusReloadingAndStopping(t *testing.T) {
	sock := newNotifySocket(t)
	t.Setenv("WATCHDOG_USEC", "")
	n, err := newNotifier(nil)
	if err != nil {
		t.Fatal(err)
	}
	if !n.Enabled() {
		t.Fatal("Enabled() = false with NOTIFY_SOCKET set")
	}
	steps := []func() error{
		n.Ready,
		func() error { return n.Status("online: 2/2 checks\nhealthy") },
		func() error { return n.Status("online: 2/2 checks healthy") }, // same line: not sent again
		n.Reloading,
		n.Ready,
		n.Stopping,
	}
	for _, s := range steps {
		if err := s(); err != nil {
			t.Fatal(err)
		}
	}
	var got []string
	for {
		m := sock.read(t, 200*time.Millisecond)
		if m == "" {
			break
		}
		if strings.HasPrefix(m, "RELOADING=1\nMONOTONIC_USEC=") {
			m = "RELOADING=1\nMONOTONIC_USEC=<usec>"
		}
		got = append(got, m)
	}
	want := []string{"READY=1", "STATUS=online: 2/2 checks healthy", "RELOADING=1\nMONOTONIC_USEC=<usec>", "READY=1", "STOPPING=1"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("notify messages (-want +got):\n%s", diff)
	}
}

func TestWatchdogIntervalIsHalfOfWatchdogUsec(t *testing.T) {
	newNotifySocket(t)
	t.Setenv("WATCHDOG_USEC", "30000000")
	t.Setenv("WATCHDOG_PID", "")
	n, err := newNotifier(nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := n.WatchdogInterval(); got != 15*time.Second {
		t.Errorf("WatchdogInterval() = %s, want 15s", got)
	}
	t.Setenv("WATCHDOG_USEC", "")
	n, _ = newNotifier(nil)
	if got := n.WatchdogInterval(); got != 0 {
		t.Errorf("without WATCHDOG_USEC: WatchdogInterval() = %s, want 0", got)
	}
}

func TestWatchdogPingsOnlyWhenTheLoopProgressed(t *testing.T) {
	sock := newNotifySocket(t)
	n, err := newNotifier(nil)
	if err != nil {
		t.Fatal(err)
	}
	var progress atomic.Int64
	ticks := make(chan time.Time)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		n.watchdog(ctx, ticks, func() time.Time {
			if p := progress.Load(); p > 0 {
				return time.Unix(p, 0)
			}
			return time.Time{}
		})
	}()
	defer func() { cancel(); <-done }()

	// (progress before the tick, ping expected)
	steps := []struct {
		name     string
		progress int64
		ping     bool
	}{
		{"no round yet: no ping", 0, false},
		{"first round done: ping", 100, true},
		{"no progress since: no ping", 100, false},
		{"still stuck: no ping", 100, false},
		{"progress again: ping", 101, true},
	}
	for _, s := range steps {
		progress.Store(s.progress)
		ticks <- time.Now()
		// A sentinel after the tick: the watchdog goroutine has handled
		// the tick once it takes the next one, so anything it sent is
		// already in the socket.
		ticks <- time.Now()
		got := sock.read(t, 50*time.Millisecond)
		if s.ping && got != "WATCHDOG=1" {
			t.Errorf("%s: got %q, want WATCHDOG=1", s.name, got)
		}
		if !s.ping && got != "" {
			t.Errorf("%s: got %q, want nothing", s.name, got)
		}
	}
}

func TestWatchdogCadenceFromWatchdogUsec(t *testing.T) {
	sock := newNotifySocket(t)
	t.Setenv("WATCHDOG_USEC", "100000") // 100 ms: pings every 50 ms
	t.Setenv("WATCHDOG_PID", "")
	n, err := newNotifier(nil)
	if err != nil {
		t.Fatal(err)
	}
	var round atomic.Int64
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); n.RunWatchdog(ctx, func() time.Time { return time.Unix(round.Add(1), 0) }) }()
	defer func() { cancel(); <-done }()
	for i := range 3 {
		if got := sock.read(t, 5*time.Second); got != "WATCHDOG=1" {
			t.Fatalf("ping %d: got %q, want WATCHDOG=1", i, got)
		}
	}
}

func TestStatusLine(t *testing.T) {
	tests := []struct {
		name   string
		checks []wire.Check
		depth  int
		conn   bool
		mqtt   bool
		want   string
	}{
		{"all healthy and connected", []wire.Check{{Target: "wwan0", State: "ok", Healthy: true}}, 0, true, true,
			"online: 1/1 checks healthy; outbox 0; mqtt connected"},
		{"unhealthy checks are named", []wire.Check{{Target: "wwan0", State: "ok", Healthy: true}, {Target: "wg0/AbCd", State: "down"}}, 4, false, true,
			"degraded: 1/2 checks healthy (wg0/AbCd down); outbox 4; mqtt disconnected"},
		{"many unhealthy checks are cut", []wire.Check{{Target: "a", State: "down"}, {Target: "b", State: "down"}, {Target: "c", State: "down"}, {Target: "d", State: "down"}, {Target: "e", State: "down"}}, 0, false, false,
			"degraded: 0/5 checks healthy (a down, b down, c down, +2 more); outbox 0"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := statusLine(tt.checks, tt.depth, tt.conn, tt.mqtt); got != tt.want {
				t.Errorf("got  %q\nwant %q", got, tt.want)
			}
		})
	}
}
