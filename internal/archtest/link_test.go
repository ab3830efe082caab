package archtest

import (
	"bufio"
	"bytes"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

// TestTheDaemonKeepsDeadMethodElimination links the daemon the way `make
// build` does and reads the linker's dependency dump: no reachable
// function may call reflect's Method or MethodByName with a name known
// only at run time (the linker marks it <ReflectMethod>). One such call
// makes the linker keep every exported method of every type; through
// text/template that was 2.8 MB of a 15.9 MB daemon (docs/performance.md,
// "Binary size"). A new dependency that does this shows up here by name.
func TestTheDaemonKeepsDeadMethodElimination(t *testing.T) {
	if testing.Short() {
		t.Skip("links the daemon (about 30 s on two cores); run without -short")
	}
	root := moduleRoot(t)
	cmd := exec.Command("go", "build", "-trimpath", "-ldflags=-s -w -dumpdep", "-o", filepath.Join(t.TempDir(), "edgeheal"), "./cmd/edgeheal")
	cmd.Dir = root
	cmd.Env = append(cmd.Environ(), "CGO_ENABLED=0")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("go build -ldflags=-dumpdep ./cmd/edgeheal: %v\n%s", err, tail(stderr.String()))
	}
	seen := map[string]bool{}
	s := bufio.NewScanner(&stderr)
	s.Buffer(make([]byte, 64<<10), 1<<20)
	for s.Scan() {
		// "caller <ReflectMethod> -> reflect.Value.MethodByName"
		if caller, _, ok := strings.Cut(s.Text(), " <ReflectMethod>"); ok && !strings.HasPrefix(caller, "reflect.") {
			seen[caller] = true
		}
	}
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
	var bad []string
	for c := range seen {
		bad = append(bad, c)
	}
	sort.Strings(bad)
	if len(bad) > 0 {
		t.Errorf("the daemon calls reflect's Method/MethodByName with a run-time name, so the linker keeps every exported method:\n  %s", strings.Join(bad, "\n  "))
	}
}

func tail(s string) string {
	if len(s) > 4000 {
		return "..." + s[len(s)-4000:]
	}
	return s
}
