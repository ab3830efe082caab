package main

import (
	"bufio"
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/edgeheal/edgeheal/internal/testsupport"
)

func run(args ...string) (code int, stdout, stderr string) {
	var out, errb bytes.Buffer
	code = runMain(args, &out, &errb)
	return code, out.String(), errb.String()
}

func writeFile(t testing.TB, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestConfigCheckListsEveryProblemAndExits1(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "config.yaml")
	writeFile(t, cfg, "version: 1\ncolour: blue\ninterval: 1 second\ntunnels:\n  - interface: flannel-wg\n    persistent_keepalive: 70000s\n")
	code, _, stderr := run("config", "check", "--config", cfg)
	if code != exitProblem {
		t.Errorf("exit code = %d, want %d", code, exitProblem)
	}
	for _, want := range []string{
		cfg + ": colour: unknown key",
		cfg + `: interval: "1 second" is not a duration`,
		cfg + ": tunnels[0].persistent_keepalive: 70000s is out of range (0..65535s)",
	} {
		if !strings.Contains(stderr, want) {
			t.Errorf("stderr lacks %q:\n%s", want, stderr)
		}
	}
}

func TestConfigCheckExampleIsValid(t *testing.T) {
	code, stdout, stderr := run("config", "check", "--config", "../../configs/examples/edge-node.yaml")
	if code != exitOK {
		t.Fatalf("exit code = %d, want 0; stderr:\n%s", code, stderr)
	}
	if !strings.Contains(stdout, "valid") {
		t.Errorf("stdout = %q, want it to say valid", stdout)
	}
}

func TestConfigShowOrigin(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "config.yaml")
	writeFile(t, cfg, "version: 1\nnode: {name: gw-1}\n")
	writeFile(t, filepath.Join(dir, "config.d", "10-site.yaml"), "node: {site: plant-7}\n")
	code, stdout, stderr := run("config", "show", "--origin", "--config", cfg)
	if code != exitOK {
		t.Fatalf("exit code = %d; stderr:\n%s", code, stderr)
	}
	for _, want := range []string{
		"name: gw-1 # " + cfg + ":2",
		"site: plant-7 # " + filepath.Join(dir, "config.d", "10-site.yaml") + ":1",
		"interval: 1s # (defaults)",
	} {
		if !strings.Contains(stdout, want) {
			t.Errorf("config show --origin lacks %q:\n%s", want, stdout)
		}
	}
}

func TestExitCodes(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		want int
	}{
		{"no command is a usage error", nil, exitCantRun},
		{"an unknown command is a usage error", []string{"frobnicate"}, exitCantRun},
		{"help is fine", []string{"--help"}, exitOK},
		{"a command's help is fine", []string{"check", "--help"}, exitOK},
		{"an unknown flag is a usage error", []string{"check", "--frob"}, exitCantRun},
		{"a stray argument is a usage error", []string{"version", "extra"}, exitCantRun},
		{"a missing config cannot run", []string{"config", "check", "--config", "/nonexistent/edgeheal.yaml"}, exitCantRun},
		{"an unknown config subcommand is a usage error", []string{"config", "lint"}, exitCantRun},
		{"version works", []string{"version"}, exitOK},
		{"status with no agent cannot run", []string{"status", "--socket", "/nonexistent/edgeheal.sock"}, exitCantRun},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if code, _, stderr := run(tc.args...); code != tc.want {
				t.Errorf("edgeheal %v = exit %d, want %d; stderr:\n%s", tc.args, code, tc.want, stderr)
			}
		})
	}
}

// Render moved to edgeheal-fleet: the daemon says so in one line, exits 2
// whatever the flags, writes nothing, and no longer lists it.
func TestRenderSaysWhereItMoved(t *testing.T) {
	out := filepath.Join(t.TempDir(), "out")
	for _, args := range [][]string{
		{"render"},
		{"render", "--templates", "../../configs/fleet", "--inventory", "../../configs/fleet/inventory.example.yaml", "--out", out},
		{"render", "--help"},
	} {
		code, stdout, stderr := run(args...)
		want := "edgeheal: render has moved to the fleet side: run 'edgeheal-fleet render' (package edgeheal-fleet) with the same flags\n"
		if code != exitCantRun || stdout != "" || stderr != want {
			t.Errorf("edgeheal %v = exit %d, stdout %q, stderr %q; want exit %d and only %q", args, code, stdout, stderr, exitCantRun, want)
		}
	}
	if _, err := os.Stat(out); !os.IsNotExist(err) {
		t.Errorf("%s exists (err %v): the daemon rendered", out, err)
	}
	if _, usage, _ := run("--help"); strings.Contains(usage, "render") {
		t.Errorf("edgeheal --help still lists render:\n%s", usage)
	}
}

// buildBinary builds edgeheal once for the process tests.
func buildBinary(t testing.TB) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "edgeheal")
	out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// daemon runs `edgeheal run` and gives its log lines on a channel.
type daemon struct {
	cmd   *exec.Cmd
	lines chan string
	done  chan error
}

func startDaemon(t *testing.T, bin string, args ...string) *daemon {
	t.Helper()
	cmd := testsupport.Command(bin, append([]string{"run"}, args...)...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	d := &daemon{cmd: cmd, lines: make(chan string, 1000), done: make(chan error, 1)}
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			d.lines <- sc.Text()
		}
		close(d.lines)
		d.done <- cmd.Wait()
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill() // by PID; a no-op once it exited
		<-d.done
	})
	return d
}

// await waits for a log line containing all of want, or fails after 10 s.
func (d *daemon) await(t *testing.T, want ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for {
		select {
		case line, ok := <-d.lines:
			if !ok {
				t.Fatalf("edgeheal exited before logging %q", want)
			}
			match := true
			for _, w := range want {
				match = match && strings.Contains(line, w)
			}
			if match {
				return line
			}
		case <-ctx.Done():
			t.Fatalf("no log line with %q within 10s", want)
		}
	}
}

func TestRunReloadsOnSIGHUPAndKeepsTheOldConfigWhenInvalid(t *testing.T) {
	bin := buildBinary(t)
	dir := t.TempDir()
	cfg := filepath.Join(dir, "config.yaml")
	writeFile(t, cfg, "version: 1\nnode: {name: gw-1}\nreport: {state_dir: "+filepath.Join(dir, "state")+", http: {listen: '', socket: ''}}\n")
	d := startDaemon(t, bin, "--config", cfg)
	line := d.await(t, "starting", "node=gw-1")
	rev := field(line, "config_revision")

	writeFile(t, filepath.Join(dir, "config.d", "50-bad.yaml"), "policy: {cooldown: soon}\n")
	if err := d.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	d.await(t, "reload refused", "50-bad.yaml: policy.cooldown", "running_revision="+rev)

	writeFile(t, filepath.Join(dir, "config.d", "50-bad.yaml"), "policy: {cooldown: 5s}\n")
	if err := d.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	line = d.await(t, "reloaded")
	if got := field(line, "config_revision"); got == rev || got == "" {
		t.Errorf("revision after a changed reload = %q, want a new one (was %q)", got, rev)
	}

	if err := d.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	d.await(t, "stopped")
	if err := <-d.done; err != nil {
		t.Errorf("exit after SIGTERM: %v, want status 0", err)
	}
	d.done <- nil // for the cleanup
}

func TestRunFallsBackToTheLastGoodConfig(t *testing.T) {
	bin := buildBinary(t)
	dir := t.TempDir()
	state := filepath.Join(dir, "state")
	cfg := filepath.Join(dir, "config.yaml")
	writeFile(t, cfg, "version: 1\nnode: {name: gw-good}\nreport: {state_dir: "+state+", http: {listen: '', socket: ''}}\n")
	d := startDaemon(t, bin, "--config", cfg, "--state-dir", state)
	d.await(t, "starting", "node=gw-good")
	_ = d.cmd.Process.Signal(syscall.SIGTERM)
	d.await(t, "stopped")

	writeFile(t, cfg, "version: 1\nnode: {name: gw-bad}\ninterval: never\n")
	d = startDaemon(t, bin, "--config", cfg, "--state-dir", state)
	d.await(t, "running with the last good copy", `interval: \"never\"`)
	d.await(t, "starting", "node=gw-good")

	code, _, stderr := run("run", "--config", cfg, "--state-dir", filepath.Join(dir, "empty"))
	if code != exitProblem || !strings.Contains(stderr, "no last good copy") {
		t.Errorf("with no last good copy: exit %d, stderr %q; want 1 and a message saying so", code, stderr)
	}
}

// field returns the value of key=value in a slog text line.
func field(line, key string) string {
	for _, f := range strings.Fields(line) {
		if v, ok := strings.CutPrefix(f, key+"="); ok {
			return v
		}
	}
	return ""
}

// config check refuses credentials in a broker URL and a password over
// plain tcp:// (unless the config accepts it), naming file, key and reason,
// and never shows the password.
func TestConfigCheckRefusesCredentialsInTheURLAndAPasswordInClear(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "config.yaml")
	dropIn := filepath.Join(dir, "config.d", "50-report.yaml")
	writeFile(t, cfg, "version: 1\nnode: {name: n1}\n")
	writeFile(t, dropIn, "report:\n  mqtt: {broker: \"tcp://n1:pw-s3cret@cloud:1883\"}\n")
	code, _, stderr := run("config", "check", "--config", cfg)
	if code != exitProblem || !strings.Contains(stderr, dropIn+`: report.mqtt.broker: "tcp://***@cloud:1883": credentials do not belong in a broker URL`) {
		t.Errorf("credentials in the URL: exit %d, stderr:\n%s", code, stderr)
	}
	if strings.Contains(stderr, "pw-s3cret") {
		t.Errorf("config check shows the password:\n%s", stderr)
	}

	writeFile(t, dropIn, "report:\n  mqtt: {broker: \"tcp://cloud:1883\", username: n1, password_file: /etc/edgeheal/mqtt.password}\n")
	code, _, stderr = run("config", "check", "--config", cfg)
	if code != exitProblem || !strings.Contains(stderr, dropIn+": report.mqtt.password_file: the password would cross the network in clear") {
		t.Errorf("a password over tcp://: exit %d, stderr:\n%s", code, stderr)
	}

	writeFile(t, dropIn, "report:\n  mqtt: {broker: \"tcp://cloud:1883\", username: n1, password_file: /etc/edgeheal/mqtt.password, insecure_plaintext: true}\n")
	if code, _, stderr = run("config", "check", "--config", cfg); code != exitOK {
		t.Errorf("a password over tcp:// with insecure_plaintext: exit %d, stderr:\n%s", code, stderr)
	}
}

// config check shows what each uplink pattern chooses on this node, and
// that a pattern passes over the loopback (which every namespace has).
func TestConfigCheckShowsWhatAPatternChoosesHere(t *testing.T) {
	cfg := filepath.Join(t.TempDir(), "config.yaml")
	writeFile(t, cfg, "version: 1\nnode: {name: n1}\nuplinks: [{name: \"*\"}, {name: lo}]\n")
	code, stdout, stderr := run("config", "check", "--config", cfg)
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	if strings.Contains(stdout, "the links could not be listed") && os.Getenv(testsupport.ExecEnv) != "" {
		t.Skipf("no netlink under the emulator %s: %s", os.Getenv(testsupport.ExecEnv), stdout)
	}
	var star, lo string
	for _, l := range strings.Split(stdout, "\n") {
		switch {
		case strings.HasPrefix(l, `  uplinks[0] "*": `):
			star = l
		case strings.HasPrefix(l, `  uplinks[1] "lo": `):
			lo = l
		}
	}
	if !strings.Contains(star, "a pattern never chooses") || !strings.Contains(star, "lo (loopback)") ||
		strings.Contains(strings.SplitN(star, "(", 2)[0], " lo,") {
		t.Errorf("the pattern's line: %q\n%s", star, stdout)
	}
	if lo != `  uplinks[1] "lo": lo` {
		t.Errorf("an exact name's line: %q, want lo chosen\n%s", lo, stdout)
	}
}
