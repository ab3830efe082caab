package main

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/edgeheal/edgeheal/internal/testsupport"

	"github.com/edgeheal/edgeheal/lab"
)

// buildCLI builds edgeheal-lab into a temporary directory.
func buildCLI(t *testing.T) string {
	t.Helper()
	testsupport.RequireRoot(t, "the lab: network namespaces, TUN, AF_PACKET")
	bin := filepath.Join(t.TempDir(), "edgeheal-lab")
	gobin, err := exec.LookPath("go")
	if err != nil {
		gobin = "/usr/local/go/bin/go"
	}
	out, err := exec.Command(gobin, "build", "-o", bin, ".").CombinedOutput()
	if err != nil {
		t.Fatalf("building: %v\n%s", err, out)
	}
	return bin
}

func prefix() string {
	var b [2]byte
	_, _ = rand.Read(b[:])
	return "ehc" + hex.EncodeToString(b[:])
}

type cli struct {
	t      *testing.T
	bin    string
	runDir string
}

func (c cli) run(args ...string) (string, error) {
	c.t.Helper()
	cmd := exec.Command(c.bin, append([]string{"--run-dir", c.runDir}, args...)...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return out.String(), err
}

func (c cli) must(args ...string) string {
	c.t.Helper()
	out, err := c.run(args...)
	if err != nil {
		c.t.Fatalf("edgeheal-lab %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return out
}

func (c cli) state() state {
	c.t.Helper()
	s, err := readState(dirs(c.runDir))
	if err != nil {
		c.t.Fatal(err)
	}
	return s
}

// requireNothingLeft checks namespaces, sockets, links, processes, the
// supervisor and the run directory.
func requireNothingLeft(t *testing.T, p, runDir string, pid int) {
	t.Helper()
	if left := lab.Leftovers(p, filepath.Join(runDir, p)); len(left) > 0 {
		t.Errorf("left behind: %v", left)
	}
	if !waitGone(pid, 5*time.Second) { // a zombie awaiting its reaper counts as gone
		t.Errorf("supervisor %d still running", pid)
	}
	if _, err := os.Stat(runDir); !errors.Is(err, os.ErrNotExist) {
		ents, _ := os.ReadDir(runDir)
		t.Errorf("run directory %s still exists with %d entries", runDir, len(ents))
	}
}

func TestLabCLIUpStatusFaultExecDown(t *testing.T) {
	c := cli{t: t, bin: buildCLI(t), runDir: filepath.Join(t.TempDir(), "run")}
	p := prefix()
	t.Cleanup(func() { c.run("down"); lab.Sweep(p, filepath.Join(c.runDir, p)) })

	out := c.must("up", "--prefix", p, "--offload", "off")
	t.Logf("up: %s", strings.SplitN(out, "\n", 2)[0])
	s := c.state()

	if out, err := c.run("up", "--prefix", prefix()); err == nil || !strings.Contains(out, "a lab exists") {
		t.Errorf("a second up = %v, %q; want a refusal naming the existing lab", err, out)
	}

	var st lab.Status
	deadline := time.Now().Add(15 * time.Second)
	for {
		if err := json.Unmarshal([]byte(c.must("status", "--json")), &st); err != nil {
			t.Fatal(err)
		}
		if st.Telemetry != nil && st.Telemetry.Received > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no telemetry within 15 s: %+v", st)
		}
		time.Sleep(200 * time.Millisecond)
	}
	if st.UplinkTxChecksum["tx-checksum-ip-generic"] || len(st.Tunnels) != 2 {
		t.Errorf("status = %+v; want offload off and two tunnels", st)
	}
	if txt := c.must("status"); !strings.Contains(txt, "UdpInCsumErrors") {
		t.Errorf("status text lacks UdpInCsumErrors:\n%s", txt)
	}

	if out := c.must("fault", "blackhole", "--for", "1s"); !strings.Contains(out, "blackhole for 1s") {
		t.Errorf("fault blackhole = %q", out)
	}
	if out, err := c.run("fault", "loss", "200"); err == nil {
		t.Errorf("fault loss 200 = %q, nil; want an error", out)
	}
	if out := c.must("fault", "mtu", "1400"); !strings.Contains(out, "mtu 1400") {
		t.Errorf("fault mtu 1400 = %q", out)
	}
	if out, err := c.run("fault", "mtu", "20"); err == nil {
		t.Errorf("fault mtu 20 = %q, nil; want an error", out)
	}
	c.must("fault", "pass")
	c.must("fault", "replug")
	if txt := c.must("status"); !strings.Contains(txt, "tx-checksum-ip-generic: on") {
		t.Errorf("after replug the status does not show offload on:\n%s", txt)
	}

	if out := c.must("exec", "edge", "--", "ip", "-br", "link"); !strings.Contains(out, s.Info.EdgeUplink) {
		t.Errorf("exec edge ip link = %q; want %s", out, s.Info.EdgeUplink)
	}
	if out := c.must("env"); !strings.Contains(out, `LAB_PREFIX="`+p+`"`) {
		t.Errorf("env = %q", out)
	}

	c.must("down")
	requireNothingLeft(t, p, c.runDir, s.PID)
}

func TestLabCLIDownSweepsAfterTheSupervisorWasKilled(t *testing.T) {
	c := cli{t: t, bin: buildCLI(t), runDir: filepath.Join(t.TempDir(), "run")}
	p := prefix()
	t.Cleanup(func() { c.run("down"); lab.Sweep(p, filepath.Join(c.runDir, p)) })

	c.must("up", "--prefix", p, "--broker", "mosquitto", "--no-telemetry")
	s := c.state()
	if err := syscall.Kill(s.PID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond)
	if left := lab.Leftovers(p, ""); len(left) == 0 {
		t.Fatalf("nothing left after kill -9; the test shows nothing")
	}
	if out, err := c.run("up", "--prefix", p); err == nil {
		t.Fatalf("up over a stale lab = %q, nil; want a refusal", out)
	}
	c.must("down")
	requireNothingLeft(t, p, c.runDir, s.PID)
}

func TestLabCLISIGTERMStopsTheLabAndRemovesEverything(t *testing.T) {
	c := cli{t: t, bin: buildCLI(t), runDir: filepath.Join(t.TempDir(), "run")}
	p := prefix()
	t.Cleanup(func() { c.run("down"); lab.Sweep(p, filepath.Join(c.runDir, p)) })

	c.must("up", "--prefix", p, "--no-telemetry")
	s := c.state()
	if err := syscall.Kill(s.PID, syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if !waitGone(s.PID, 10*time.Second) {
		t.Fatalf("supervisor %d still running 10 s after SIGTERM", s.PID)
	}
	requireNothingLeft(t, p, c.runDir, s.PID)
}

func TestLabCLIUpWithTheCarrierNATAndItsFaults(t *testing.T) {
	c := cli{t: t, bin: buildCLI(t), runDir: filepath.Join(t.TempDir(), "run")}
	p := prefix()
	t.Cleanup(func() { c.run("down"); lab.Sweep(p, filepath.Join(c.runDir, p)) })

	out := c.must("up", "--prefix", p, "--offload", "off", "--nat", "--listen-port", "51820")
	if !strings.Contains(out, "netns carrier") {
		t.Errorf("up --nat does not name the carrier's namespace:\n%s", out)
	}
	s := c.state()
	var st lab.Status
	deadline := time.Now().Add(15 * time.Second)
	for {
		if err := json.Unmarshal([]byte(c.must("status", "--json")), &st); err != nil {
			t.Fatal(err)
		}
		if st.Telemetry != nil && st.Telemetry.Received > 0 && st.Carrier != nil && len(st.Carrier.Mappings) > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no telemetry through the carrier within 15 s: %+v", st)
		}
		time.Sleep(200 * time.Millisecond)
	}
	if out := c.must("fault", "nat-stuck"); !strings.Contains(out, "100.64.0.2:51820 → 192.0.2.254:") {
		t.Errorf("fault nat-stuck = %q; want the mapping of the edge's port 51820", out)
	}
	if txt := c.must("status"); !strings.Contains(txt, "1 stuck") {
		t.Errorf("status after nat-stuck:\n%s", txt)
	}
	if out := c.must("exec", "carrier", "--", "nft", "list", "chain", "ip", "edgeheal_carrier", "forward"); !strings.Contains(out, "nat-stuck") {
		t.Errorf("the carrier's forward chain has no nat-stuck rule:\n%s", out)
	}
	if out := c.must("env"); !strings.Contains(out, `LAB_CARRIER_NETNS="/var/run/netns/`+p+`-carrier"`) {
		t.Errorf("env lacks the carrier's namespace:\n%s", out)
	}
	if out := c.must("fault", "nat-remap"); !strings.Contains(out, "192.0.2.253:40000-49999") {
		t.Errorf("fault nat-remap = %q", out)
	}
	c.must("down")
	requireNothingLeft(t, p, c.runDir, s.PID)
}

// TestLabCLIDownNamesSweepForOtherLabs: down stops the run directory's lab
// only; given a prefix (as for a lab a benchmark left) it refuses, and says
// which command removes such a lab, rather than answering "no lab" while
// the lab stays.
func TestLabCLIDownNamesSweepForOtherLabs(t *testing.T) {
	c := cli{t: t, bin: buildCLI(t), runDir: t.TempDir()}
	out, err := c.run("down", "--prefix", "ehl0000")
	if err == nil {
		t.Fatalf("down --prefix: no error; output %q", out)
	}
	if !strings.Contains(out, "sweep PREFIX") {
		t.Errorf("down --prefix: %q does not name `edgeheal-lab sweep PREFIX`", out)
	}
	out = c.must("down")
	if !strings.Contains(out, "no lab in "+c.runDir) || !strings.Contains(out, "edgeheal-lab sweep") {
		t.Errorf("down without a lab: %q, want `no lab in %s` and the sweep command", out, c.runDir)
	}
}
