// Package testsupport is what tests across edgeheal share: the one gate
// for tests that need root, waiting for a condition within a bound, and
// starting a binary of the test's own build (also under an emulator:
// `make test-arm64`).
//
// Tests that need root (network namespaces, TUN, AF_PACKET, systemd as
// PID 1, containerd) are named TestLab* and start with RequireRoot: with
// -short, or without root, they skip and say the exact command that runs
// them. Nothing here is linked into a product binary.
package testsupport

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// RequireRoot skips t with -short, and without root, naming the command
// that runs it as root. why says what the test needs root for.
func RequireRoot(t testing.TB, why string) {
	t.Helper()
	sel := fmt.Sprintf("-run '^%s$'", topName(t))
	if _, ok := t.(*testing.B); ok {
		sel = fmt.Sprintf("-run '^$' -bench '^%s$'", topName(t))
	}
	cmd := fmt.Sprintf("sudo env PATH=$PATH go test -count=1 %s %s", sel, PackageDir())
	if testing.Short() {
		t.Skipf("needs root (%s): skipped with -short; run `%s`", why, cmd)
	}
	if os.Geteuid() != 0 {
		t.Skipf("needs root (%s): run `%s`", why, cmd)
	}
}

// topName is the name of the top-level test (a subtest's parent), which is
// what -run selects.
func topName(t testing.TB) string {
	name := t.Name()
	for i := range len(name) {
		if name[i] == '/' {
			return name[:i]
		}
	}
	return name
}

// PackageDir is the package of the running test as a ./relative path from
// the module root (go test runs a test binary in its package's directory).
func PackageDir() string {
	wd, err := os.Getwd()
	if err != nil {
		return "./..."
	}
	for d := wd; d != filepath.Dir(d); d = filepath.Dir(d) {
		if _, err := os.Stat(filepath.Join(d, "go.mod")); err == nil {
			rel, err := filepath.Rel(d, wd)
			if err != nil {
				return "./..."
			}
			return "./" + filepath.ToSlash(rel) + "/"
		}
	}
	return "./..."
}

// WaitFor polls ok every 20 ms until it returns true, and fails t if it
// has not within limit. It returns how long it took.
func WaitFor(t testing.TB, limit time.Duration, what string, ok func() bool) time.Duration {
	t.Helper()
	start := time.Now()
	for {
		if ok() {
			return time.Since(start)
		}
		if time.Since(start) > limit {
			t.Fatalf("%s: not within %s", what, limit)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
