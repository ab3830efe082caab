package main

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// awaitNotify waits for a datagram to the notify socket that contains want.
func awaitNotify(t *testing.T, s *notifySocket, want string, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for time.Now().Before(deadline) {
		if m := s.read(t, time.Until(deadline)); strings.Contains(m, want) {
			return
		}
	}
	t.Fatalf("no %q to the notify socket within %s", want, within)
}

// A drop-in that is a FIFO or a link to /dev/zero: config check says so at
// once (exit 2: it could not read the config); a SIGHUP reload is refused
// naming the file, the running config stays, READY=1 follows and later
// reloads work; a start falls back to the last good copy; and SIGTERM ends
// the process within 10 s, a FIFO in config.d or not.
func TestRunRefusesDropInsThatAreNotFiles(t *testing.T) {
	bin := buildBinary(t)
	notify := newNotifySocket(t)
	dir := t.TempDir()
	state := filepath.Join(dir, "state")
	cfg := filepath.Join(dir, "config.yaml")
	writeFile(t, cfg, "version: 1\nnode: {name: gw-1}\nreport: {state_dir: "+state+", http: {listen: '', socket: ''}}\n")
	fifo := filepath.Join(dir, "config.d", "50-fifo.yaml")
	zero := filepath.Join(dir, "config.d", "60-zero.yaml")

	d := startDaemon(t, bin, "--config", cfg, "--state-dir", state)
	d.await(t, "starting", "node=gw-1")
	awaitNotify(t, notify, "READY=1", 10*time.Second)

	if err := os.MkdirAll(filepath.Dir(fifo), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	checked := make(chan string, 1)
	go func() {
		code, _, stderr := run("config", "check", "--config", cfg)
		checked <- strings.Join([]string{string(rune('0' + code)), stderr}, " ")
	}()
	select {
	case got := <-checked:
		if !strings.HasPrefix(got, "2 ") || !strings.Contains(got, fifo+" is a named pipe (FIFO)") {
			t.Errorf("config check with a FIFO drop-in: %q, want exit 2 naming it", got)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("config check blocked on a FIFO drop-in")
	}

	_ = d.cmd.Process.Signal(syscall.SIGHUP)
	d.await(t, "reload refused", fifo+" is a named pipe")
	awaitNotify(t, notify, "READY=1", 5*time.Second)

	os.Remove(fifo)
	if err := os.Symlink("/dev/zero", zero); err != nil {
		t.Fatal(err)
	}
	_ = d.cmd.Process.Signal(syscall.SIGHUP)
	d.await(t, "reload refused", zero+" is a character device")
	awaitNotify(t, notify, "READY=1", 5*time.Second)

	os.Remove(zero)
	_ = d.cmd.Process.Signal(syscall.SIGHUP)
	d.await(t, "reloaded")

	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	_ = d.cmd.Process.Signal(syscall.SIGHUP)
	_ = d.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-d.done:
		d.done <- nil
	case <-time.After(10 * time.Second):
		t.Fatal("the agent did not end within 10 s of SIGTERM")
	}

	// A start with the FIFO still there runs on the last good copy.
	d = startDaemon(t, bin, "--config", cfg, "--state-dir", state)
	d.await(t, "running with the last good copy", fifo+" is a named pipe")
	d.await(t, "starting", "node=gw-1")
	awaitNotify(t, notify, "READY=1", 10*time.Second)
}
