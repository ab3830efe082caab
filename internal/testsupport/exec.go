package testsupport

import (
	"debug/elf"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"
)

// ExecEnv names the environment variable that holds the command which runs
// a binary built for the test's GOARCH on this machine: `make test-arm64`
// sets it to qemu-aarch64-static, as it passes that to go test -exec.
// qemu-user is one process with its guest (same PID, signals passed on,
// SIGKILL kills both), so a test that stops or kills a child sees what it
// would see natively. Unset (every native run), binaries run directly.
const ExecEnv = "EDGEHEAL_TEST_EXEC"

// Command is exec.Command for a binary built for the test's GOARCH: the
// test binary itself (os.Args[0]) or one the test built with go build
// (which reads GOARCH from the environment, so it matches). Under an
// emulator named by ExecEnv, the emulator runs it; a binary of the host's
// own architecture (sh, mosquitto, ip) needs no wrapper and must not get one.
func Command(name string, arg ...string) *exec.Cmd {
	wrap := strings.Fields(os.Getenv(ExecEnv))
	if len(wrap) == 0 {
		return exec.Command(name, arg...)
	}
	return exec.Command(wrap[0], append(append(wrap[1:], name), arg...)...)
}

// elfMachine is the ELF machine of each GOARCH edgeheal is built for.
var elfMachine = map[string]elf.Machine{"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64}

// RequireBinaryFor skips t unless path is an ELF binary built for the
// test's GOARCH, naming build, the command that builds it (with GOARCH
// set under an emulator). A binary of another architecture is skipped,
// not run: it would test the wrong build.
func RequireBinaryFor(t testing.TB, path, build string) {
	t.Helper()
	if os.Getenv(ExecEnv) != "" {
		build = "GOARCH=" + runtime.GOARCH + " " + build
	}
	f, err := elf.Open(path)
	if err != nil {
		t.Skipf("needs the built binary %s (%v): run `%s` first", path, err, build)
	}
	defer f.Close()
	if want, ok := elfMachine[runtime.GOARCH]; ok && f.Machine != want {
		t.Skipf("%s is built for %v, this test for %s: run `%s` first", path, f.Machine, runtime.GOARCH, build)
	}
}

// StartLogged starts cmd with its output in the file logPath, killed with
// the test's process if that dies (Pdeathsig), and ends it by its PID when
// t ends: SIGTERM, then SIGKILL after 10 s. When t failed, the log is
// printed under name.
func StartLogged(t testing.TB, name, logPath string, cmd *exec.Cmd) {
	t.Helper()
	logf, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		logf.Close()
		t.Fatalf("starting %s: %v", name, err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
		logf.Close()
		if t.Failed() {
			out, _ := os.ReadFile(logPath)
			t.Logf("%s log:\n%s", name, out)
		}
	})
}
