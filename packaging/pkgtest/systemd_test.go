package pkgtest

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/edgeheal/edgeheal/internal/testsupport"

	sddbus "github.com/coreos/go-systemd/v22/dbus"

	"github.com/edgeheal/edgeheal/internal/testsupport/systemdlab"
)

// payloadMounts starts every lab's mounts script, which runs as a boot
// unit in the confined systemd's mount namespace (never the host's) with
// the extracted payload ($1) and the test's directory ($2): loopback up,
// /usr/bin gains the payload's binary through a read-only overlay, and
// $2/etc-extra over /etc holds the mount points of the test's own
// configuration directories.
const payloadMounts = `set -eu
P=$1 T=$2
ip link set lo up
mount -t overlay edgeheal-pkgtest-usrbin -o "lowerdir=$P/usr/bin:/usr/bin" /usr/bin
mount -t overlay edgeheal-pkgtest-etc -o "lowerdir=$T/etc-extra:/etc" /etc
`

// labMounts makes the agent's payload look installed: /etc/edgeheal and
// /var/lib/edgeheal are the test's own directories, so that neither the
// unit's ConfigurationDirectory= nor its StateDirectory= nor the agent
// writes anything on the host.
const labMounts = payloadMounts + `# A link for the offload guard, inside the lab's own network namespace.
ip link add ehpkg0 type veth peer name ehpkg1
ip link set ehpkg0 up
ip link set ehpkg1 up
mount --bind "$T/etc-edgeheal" /etc/edgeheal
mount -t overlay edgeheal-pkgtest-varlib -o "lowerdir=$T/varlib-extra:/var/lib" /var/lib
mount --bind "$T/state" /var/lib/edgeheal
`

// labDropIn is all the lab changes in the packaged unit: the lab boots
// without sysinit.target, so units must not depend on it, and the watchdog
// timings are shortened so that a frozen agent is restarted in seconds
// (the packaged WatchdogSec=30s and the default abort timeout would take
// almost a minute). Everything else, ExecStart, ExecReload, the sandbox
// and Restart=, is the package's.
const labDropIn = `[Unit]
DefaultDependencies=no

[Service]
WatchdogSec=3s
TimeoutAbortSec=2s
`

// TestLabPackagedUnitUnderRealSystemd installs the unit and binary from the
// .deb payload into a confined systemd booted as PID 1 and checks the
// service's life: active with a STATUS=, restarted after kill -9,
// restarted by the watchdog when frozen, a reload with an invalid drop-in
// refused while the agent keeps running on its config, a valid one applied
// without a restart.
func TestLabPackagedUnitUnderRealSystemd(t *testing.T) {
	testsupport.RequireRoot(t, "systemd as PID 1 in its own namespaces")
	built(t)
	payload := extractDeb(t, debPath(runtime.GOARCH))
	dir := t.TempDir()
	for _, d := range []string{"etc-extra/edgeheal", "varlib-extra/edgeheal", "etc-edgeheal/config.d", "state"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	copyFile(t, filepath.Join(payload, "etc/edgeheal/config.yaml"), filepath.Join(dir, "etc-edgeheal/config.yaml"))
	// The agent guards the lab's veth: it must be able to change ethtool
	// features from inside the sandbox.
	writeConfig(t, filepath.Join(dir, "etc-edgeheal/config.d/10-lab.yaml"), "uplinks: [{name: ehpkg0, tx_checksum: \"off\"}]\n")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	s, conn := bootWithUnit(ctx, t, payload, dir, labMounts, "edgeheal.service", labDropIn, nil)
	defer conn.Close()

	// Start: Type=notify, so the job finishes only when the agent sent READY=1.
	if res := job(ctx, t, "start", func(ch chan<- string) (int, error) {
		return conn.StartUnitContext(ctx, "edgeheal.service", "replace", ch)
	}); res != "done" {
		t.Fatalf("start job: %s; service: %+v", res, unitState(ctx, t, conn, "edgeheal.service"))
	}
	first := waitState(ctx, t, conn, "the agent is active and reports a STATUS=", func(st state) bool {
		return st.active == "active" && st.sub == "running" && strings.Contains(st.status, "checks healthy")
	})
	t.Logf("after start: %+v", first)

	t.Run("the sandboxed agent turns TX checksum offload off", func(t *testing.T) {
		testsupport.WaitFor(t, 90*time.Second, "tx-checksum-ip-generic off on the lab's veth", func() bool {
			out, err := exec.Command("nsenter", "-t", strconv.Itoa(s.PID), "-n", "ethtool", "-k", "ehpkg0").CombinedOutput()
			if err != nil {
				t.Fatalf("ethtool -k in the lab: %v\n%s", err, out)
			}
			return strings.Contains(string(out), "tx-checksum-ip-generic: off")
		})
	})

	t.Run("the agent runs with the unit's narrow capabilities, no new privileges and a syscall filter", func(t *testing.T) {
		got := procStatus(t, s, first.mainPID)
		// CAP_NET_ADMIN (12), CAP_NET_RAW (13), CAP_SYS_ADMIN (21).
		want := map[string]string{"CapBnd": "0000000000203000", "NoNewPrivs": "1", "Seccomp": "2"}
		for k, v := range want {
			if got[k] != v {
				t.Errorf("%s = %q, want %q", k, got[k], v)
			}
		}
	})

	t.Run("the agent runs with the unit's memory settings", func(t *testing.T) {
		env, err := os.ReadFile(s.Path(fmt.Sprintf("/proc/%d/environ", first.mainPID)))
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Contains(strings.Split(string(env), "\x00"), "GOMEMLIMIT=64MiB") {
			t.Errorf("the agent's environment has no GOMEMLIMIT=64MiB: %q", strings.ReplaceAll(string(env), "\x00", " "))
		}
		for name, want := range map[string]uint64{"MemoryHigh": 96 << 20, "MemoryMax": 160 << 20} {
			p, err := conn.GetServicePropertyContext(ctx, "edgeheal.service", name)
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			if got, _ := p.Value.Value().(uint64); got != want {
				t.Errorf("%s = %v, want %d", name, p.Value.Value(), want)
			}
		}
	})

	t.Run("kill -9 of the agent is followed by a restart", func(t *testing.T) {
		before := unitState(ctx, t, conn, "edgeheal.service")
		if err := conn.KillUnitWithTarget(ctx, "edgeheal.service", sddbus.Main, int32(syscall.SIGKILL)); err != nil {
			t.Fatal(err)
		}
		after := waitState(ctx, t, conn, "a new agent is running", func(st state) bool {
			return st.restarts > before.restarts && st.active == "active" && st.mainPID != 0 && st.mainPID != before.mainPID && st.status != ""
		})
		t.Logf("restarted: %+v", after)
	})

	t.Run("a frozen agent is restarted by the watchdog", func(t *testing.T) {
		before := unitState(ctx, t, conn, "edgeheal.service")
		if err := conn.KillUnitWithTarget(ctx, "edgeheal.service", sddbus.Main, int32(syscall.SIGSTOP)); err != nil {
			t.Fatal(err)
		}
		after := waitState(ctx, t, conn, "the watchdog restarted the agent", func(st state) bool {
			return st.restarts > before.restarts && st.active == "active" && st.sub == "running" && st.mainPID != before.mainPID
		})
		t.Logf("restarted: %+v", after)
		// Result is "success" again once the new agent is up; systemd
		// logs the watchdog's action on the console.
		var lines []string
		for _, l := range strings.Split(s.Console(), "\n") {
			if strings.Contains(l, "edgeheal.service") && strings.Contains(l, "atchdog") {
				lines = append(lines, strings.TrimSpace(l))
			}
		}
		t.Logf("systemd: %q", lines)
		if !strings.Contains(strings.Join(lines, "\n"), "edgeheal.service: Watchdog timeout") {
			t.Errorf("restart after SIGSTOP not attributed to the watchdog; console:\n%s", s.Console())
		}
	})

	lastGood := filepath.Join(dir, "state", "last-good-config.yaml")
	t.Run("a reload with an invalid drop-in fails and the agent keeps running its config", func(t *testing.T) {
		before := unitState(ctx, t, conn, "edgeheal.service")
		goodBefore, err := os.ReadFile(lastGood)
		if err != nil {
			t.Fatalf("the agent kept no last good config: %v", err)
		}
		writeConfig(t, filepath.Join(dir, "etc-edgeheal/config.d/90-bad.yaml"), "interval: 1 second\n")
		if res := job(ctx, t, "reload", func(ch chan<- string) (int, error) {
			return conn.ReloadUnitContext(ctx, "edgeheal.service", "replace", ch)
		}); res != "failed" {
			t.Errorf("reload job result = %q, want failed (ExecReload validates first)", res)
		}
		after := unitState(ctx, t, conn, "edgeheal.service")
		if after.active != "active" || after.mainPID != before.mainPID || after.restarts != before.restarts {
			t.Errorf("after a refused reload: %+v, want the same agent still active (before: %+v)", after, before)
		}
		if goodAfter, _ := os.ReadFile(lastGood); string(goodAfter) != string(goodBefore) {
			t.Errorf("the last good config changed on a refused reload")
		}
		if err := os.Remove(filepath.Join(dir, "etc-edgeheal/config.d/90-bad.yaml")); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("a reload with a valid drop-in is applied without a restart", func(t *testing.T) {
		before := unitState(ctx, t, conn, "edgeheal.service")
		writeConfig(t, filepath.Join(dir, "etc-edgeheal/config.d/50-fleet.yaml"), "node: {site: pkgtest-site-2}\n")
		if res := job(ctx, t, "reload", func(ch chan<- string) (int, error) {
			return conn.ReloadUnitContext(ctx, "edgeheal.service", "replace", ch)
		}); res != "done" {
			t.Errorf("reload job result = %q, want done", res)
		}
		// SIGHUP is asynchronous: the agent saves the config it applied.
		testsupport.WaitFor(t, 90*time.Second, "the agent to apply the new site", func() bool {
			b, _ := os.ReadFile(lastGood)
			return strings.Contains(string(b), "pkgtest-site-2")
		})
		// The agent saves the config before it ends RELOADING=1 with
		// READY=1, so the unit may still be "reloading" for a moment.
		after := waitState(ctx, t, conn, "the unit to leave reloading", func(st state) bool {
			return st.active != "reloading"
		})
		if after.active != "active" || after.mainPID != before.mainPID || after.restarts != before.restarts {
			t.Errorf("after a valid reload: %+v, want the same agent still active (before: %+v)", after, before)
		}
	})
}

// bootWithUnit boots a confined systemd as PID 1 (systemdlab) whose boot
// unit runs the mounts script with the payload and dir as arguments, and
// which has unit from the payload with dropIn added; before it loads them,
// beforeReload (if set) runs with the systemd. It returns the systemd and
// a D-Bus connection once the mounts applied.
func bootWithUnit(ctx context.Context, t *testing.T, payload, dir, mounts, unit, dropIn string,
	beforeReload func(*systemdlab.Systemd)) (*systemdlab.Systemd, *sddbus.Conn) {
	t.Helper()
	script := filepath.Join(dir, "mounts.sh")
	if err := os.WriteFile(script, []byte(mounts), 0o755); err != nil {
		t.Fatal(err)
	}
	content, err := os.ReadFile(filepath.Join(payload, "usr/lib/systemd/system", unit))
	if err != nil {
		t.Fatal(err)
	}
	mountsUnit := fmt.Sprintf("[Unit]\nDefaultDependencies=no\n\n[Service]\nType=oneshot\nRemainAfterExit=yes\nExecStart=/bin/sh %s %s %s\n", script, payload, dir)
	s := systemdlab.Start(t, systemdlab.Options{
		Units: map[string]string{unit: string(content), "edgeheal-pkgtest-mounts.service": mountsUnit},
		Boot:  []string{"edgeheal-pkgtest-mounts.service"},
	})
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("systemd console:\n%s", s.Console())
		}
	})
	d := s.Path("/run/systemd/system/" + unit + ".d")
	if err := os.MkdirAll(d, 0o755); err != nil {
		t.Fatal(err)
	}
	writeConfig(t, filepath.Join(d, "lab.conf"), dropIn)
	if beforeReload != nil {
		beforeReload(s)
	}
	conn, err := s.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := conn.ReloadContext(ctx); err != nil {
		conn.Close()
		t.Fatalf("daemon-reload: %v", err)
	}
	if st := unitState(ctx, t, conn, "edgeheal-pkgtest-mounts.service"); st.active != "active" {
		conn.Close()
		t.Fatalf("the payload mounts did not apply: %+v", st)
	}
	return s, conn
}

type state struct {
	active, sub, result, status string
	mainPID                     uint32
	restarts                    uint32
}

func unitState(ctx context.Context, t *testing.T, conn *sddbus.Conn, unit string) state {
	t.Helper()
	var st state
	get := func(iface, name string) any {
		var p *sddbus.Property
		var err error
		if iface == "unit" {
			p, err = conn.GetUnitPropertyContext(ctx, unit, name)
		} else {
			p, err = conn.GetServicePropertyContext(ctx, unit, name)
		}
		if err != nil {
			t.Fatalf("%s %s: %v", unit, name, err)
		}
		return p.Value.Value()
	}
	st.active, _ = get("unit", "ActiveState").(string)
	st.sub, _ = get("unit", "SubState").(string)
	if strings.HasSuffix(unit, ".service") {
		st.result, _ = get("service", "Result").(string)
		st.status, _ = get("service", "StatusText").(string)
		st.mainPID, _ = get("service", "MainPID").(uint32)
		st.restarts, _ = get("service", "NRestarts").(uint32)
	}
	return st
}

// waitState polls the unit until ok holds; it fails the test at the
// context's deadline.
func waitState(ctx context.Context, t *testing.T, conn *sddbus.Conn, what string, ok func(state) bool) state {
	t.Helper()
	return waitUnit(ctx, t, conn, "edgeheal.service", what, ok)
}

// waitUnit is waitState for any unit.
func waitUnit(ctx context.Context, t *testing.T, conn *sddbus.Conn, unit, what string, ok func(state) bool) state {
	t.Helper()
	var st state
	testsupport.WaitFor(t, 90*time.Second, what, func() bool {
		st = unitState(ctx, t, conn, unit)
		return ok(st)
	})
	return st
}

// job runs a systemd job and returns its result (done, failed, timeout, ...).
func job(ctx context.Context, t *testing.T, what string, start func(chan<- string) (int, error)) string {
	t.Helper()
	ch := make(chan string, 1)
	if _, err := start(ch); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	select {
	case res := <-ch:
		return res
	case <-ctx.Done():
		t.Fatalf("%s: no job result", what)
		return ""
	}
}

func writeConfig(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	b, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, b, 0o644); err != nil {
		t.Fatal(err)
	}
}
