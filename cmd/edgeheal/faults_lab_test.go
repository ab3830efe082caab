package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/edgeheal/edgeheal/agent"
	"github.com/edgeheal/edgeheal/internal/testsupport"
	"github.com/edgeheal/edgeheal/internal/testsupport/labtest"
	"github.com/edgeheal/edgeheal/internal/testsupport/mosquitto"
	"github.com/edgeheal/edgeheal/lab"
	"github.com/edgeheal/edgeheal/wire"
)

// The daemon in the lab's edge namespace, with a fault of its own making:
// what was an exit 2 (and a restart every 5 s, with no offload guard) is a
// component that is reported and retried while the rest runs.

// labAgent runs the built daemon in the lab's edge namespace, prefix (if
// any) in front of the `ip netns exec` (e.g. an unshare), until the test ends.
func labAgent(t *testing.T, l *lab.Lab, bin, cfg, stateDir string, prefix ...string) *daemon {
	t.Helper()
	args := append(prefix, "ip", "netns", "exec", l.NetnsName(lab.Edge), bin, "run", "--config", cfg, "--state-dir", stateDir)
	cmd := exec.Command(args[0], args[1:]...)
	logf, err := os.Create(filepath.Join(t.TempDir(), "agent.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	d := &daemon{cmd: cmd, done: make(chan error, 1)}
	go func() { d.done <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill() // by PID; a no-op once it exited
		<-d.done
		if t.Failed() {
			out, _ := os.ReadFile(logf.Name())
			t.Logf("agent log:\n%s", out)
		}
	})
	return d
}

// labAgentStatus is `edgeheal status --json` from inside the edge
// namespace, on the socket edgeheal.sock in dir.
func labAgentStatus(t *testing.T, l *lab.Lab, bin, dir string) (wire.LocalStatus, bool) {
	t.Helper()
	out, _ := l.Exec(context.Background(), lab.Edge, bin, "status", "--json", "--socket", filepath.Join(dir, "edgeheal.sock"))
	var st wire.LocalStatus
	if err := json.Unmarshal(out, &st); err != nil {
		return st, false
	}
	return st, true
}

func statusComponent(st wire.LocalStatus, name string) wire.Check {
	for _, c := range st.Checks {
		if c.Kind == wire.KindComponent && c.Target == name {
			return c
		}
	}
	return wire.Check{}
}

func TestLabDaemonWithoutItsBrokerCAKeepsOffloadOffAndReportsOnceTheCAAppears(t *testing.T) {
	l := labtest.New(t, lab.Options{NoTelemetry: true}) // the uplink starts with offload on
	bin := buildBinary(t)
	broker := mosquitto.Start(t, mosquitto.Options{TLS: true, Netns: l.NetnsPath(lab.Edge)})
	dir := t.TempDir()
	ca := filepath.Join(dir, "pki", "ca.pem") // not there yet: a fleet push that forgot it
	cfg := filepath.Join(dir, "config.yaml")
	writeFile(t, cfg, fmt.Sprintf(`version: 1
node: {name: gw-no-ca}
interval: 200ms
uplinks: [{name: %s}]
report:
  mqtt: {broker: "%s", tls: {ca: %s, server_name: broker.test}}
  http: {listen: "127.0.0.1:9469", socket: %s/edgeheal.sock}
  state_dir: %s
`, l.EdgeUplink(), broker.TLSURL(), ca, filepath.Join(dir, "state"), filepath.Join(dir, "state")))
	labAgent(t, l, bin, cfg, filepath.Join(dir, "state"))

	testsupport.WaitFor(t, 10*time.Second, "offload off on the uplink", func() bool { on, err := l.UplinkTxChecksumOn(); return err == nil && !on })
	var st wire.LocalStatus
	testsupport.WaitFor(t, 10*time.Second, "the status naming mqtt as failed", func() bool {
		var ok bool
		st, ok = labAgentStatus(t, l, bin, filepath.Join(dir, "state"))
		return ok && statusComponent(st, "mqtt").State == agent.ComponentFailed
	})
	if st.Ready || !strings.Contains(st.ReadyDetail, "mqtt: failed") || !strings.Contains(st.ReadyDetail, "ca.pem") {
		t.Errorf("/readyz: ready=%v %q, want not ready naming mqtt and the missing CA", st.Ready, st.ReadyDetail)
	}

	// The modem re-enumerates: the guard runs regardless of reporting.
	if err := l.Replug(context.Background()); err != nil {
		t.Fatal(err)
	}
	testsupport.WaitFor(t, 10*time.Second, "offload off after the re-plug", func() bool { on, err := l.UplinkTxChecksumOn(); return err == nil && !on })

	// The CA arrives: reporting starts, without a restart.
	if err := os.MkdirAll(filepath.Dir(ca), 0o755); err != nil {
		t.Fatal(err)
	}
	pem, err := os.ReadFile(broker.PKI.CAFile)
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, ca, string(pem))
	testsupport.WaitFor(t, 90*time.Second, "mqtt connected once the CA is there", func() bool {
		st, ok := labAgentStatus(t, l, bin, filepath.Join(dir, "state"))
		return ok && st.MQTT != nil && st.MQTT.Connected && statusComponent(st, "mqtt").State == agent.ComponentOK
	})
}

func TestLabDaemonWithAReadOnlyStateDirRunsAndSaysSo(t *testing.T) {
	l := labtest.New(t, lab.Options{NoTelemetry: true})
	bin := buildBinary(t)
	dir := t.TempDir()
	state := filepath.Join(dir, "state")
	if err := os.MkdirAll(state, 0o755); err != nil {
		t.Fatal(err)
	}
	cfg := filepath.Join(dir, "config.yaml")
	writeFile(t, cfg, fmt.Sprintf(`version: 1
node: {name: gw-ro}
interval: 200ms
uplinks: [{name: %s}]
report:
  http: {listen: "127.0.0.1:9469", socket: %s/edgeheal.sock}
  state_dir: %s
`, l.EdgeUplink(), dir, state))
	// A read-only file system over the state directory, in a private mount
	// namespace of the agent's own: nothing outside sees it.
	unshare, err := exec.LookPath("unshare")
	if err != nil {
		t.Fatalf("unshare (util-linux) not found: %v", err)
	}
	script := fmt.Sprintf("mount -t tmpfs -o ro,size=1m tmpfs %s && exec \"$@\"", state)
	labAgent(t, l, bin, cfg, state, unshare, "--mount", "--propagation", "private", "sh", "-c", script, "sh")

	testsupport.WaitFor(t, 10*time.Second, "offload off on the uplink", func() bool { on, err := l.UplinkTxChecksumOn(); return err == nil && !on })
	var st wire.LocalStatus
	testsupport.WaitFor(t, 10*time.Second, "the status naming the outbox", func() bool {
		var ok bool
		st, ok = labAgentStatus(t, l, bin, dir) // not in the read-only state directory
		return ok && statusComponent(st, "outbox").State == agent.ComponentDegraded
	})
	if c := statusComponent(st, "outbox"); !strings.Contains(c.Detail, "events kept in memory only") || !strings.Contains(c.Detail, "read-only file system") {
		t.Errorf("outbox component %+v, want it to say events are kept in memory and why", c)
	}
	if st.Ready || !strings.Contains(st.ReadyDetail, "outbox: degraded") {
		t.Errorf("/readyz: ready=%v %q, want not ready naming the outbox", st.Ready, st.ReadyDetail)
	}
	if st.Outbox == nil || st.Outbox.Depth == 0 {
		t.Errorf("outbox %+v: the offload fix's events should be queued in memory", st.Outbox)
	}
}
