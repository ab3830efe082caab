package main

import (
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// An outbox log damaged while the agent was down (here: replaced by
// garbage) is reported at start in the agent's own log, with the incident
// that goes to the cloud, and counted: it used to be cut as a torn write,
// and a damaged region was only queued for the cloud, never logged.
func TestRunLogsADamagedOutboxAtStart(t *testing.T) {
	bin := buildBinary(t)
	dir := t.TempDir()
	state := filepath.Join(dir, "state")
	cfg := filepath.Join(dir, "config.yaml")
	writeFile(t, cfg, "version: 1\nnode: {name: gw-1}\nreport: {state_dir: "+state+", http: {listen: '', socket: ''}}\n")
	writeFile(t, filepath.Join(state, "outbox", "outbox.log"), strings.Repeat("\x7f\x13garbage", 100))
	d := startDaemon(t, bin, "--config", cfg, "--state-dir", state)
	line := d.await(t, "outbox log damaged", "kind=incident", "target=outbox", "result=damaged")
	if !strings.Contains(line, "900 bytes") {
		t.Errorf("the line does not say how much was damaged: %s", line)
	}
	_ = d.cmd.Process.Signal(syscall.SIGTERM)
	d.await(t, "stopped")
}
