package lab

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/edgeheal/edgeheal/internal/testsupport"
)

// A lab namespace is mounted in a directory that is a shared mount point
// of its own, so that ip netns add or containerd, run later, do not bind
// the directory over it (docs/lab.md, "Kernel and tools"); and it is
// removed again, file and mount.
func TestLabNamespaceLivesInASharedNetnsMountPoint(t *testing.T) {
	testsupport.RequireRoot(t, "named network namespaces")
	name := fmt.Sprintf("ehlt%d-ns", os.Getpid()%100000)
	ns, err := createNamedNS(name)
	if err != nil {
		t.Fatalf("createNamedNS: %v", err)
	}
	ns.Close()
	removed := false
	t.Cleanup(func() {
		if !removed {
			_ = removeNamedNS(name)
		}
	})
	dir, err := filepath.EvalSymlinks(netnsDir)
	if err != nil {
		t.Fatal(err)
	}
	opts, ok := mountOptional(t, dir)
	if !ok {
		t.Fatalf("%s is not a mount point after creating a namespace", dir)
	}
	if !strings.Contains(opts, "shared:") {
		t.Errorf("%s is a mount point without shared propagation (optional fields %q)", dir, opts)
	}
	if _, ok := mountOptional(t, filepath.Join(dir, name)); !ok {
		t.Errorf("namespace %s is not mounted", name)
	}
	if err := removeNamedNS(name); err != nil {
		t.Fatalf("removeNamedNS: %v", err)
	}
	removed = true
	if _, err := os.Lstat(filepath.Join(dir, name)); !os.IsNotExist(err) {
		t.Errorf("namespace file still there after removal: %v", err)
	}
}

// mountOptional returns the optional fields (propagation) of the topmost
// mount at path, and whether there is one.
func mountOptional(t *testing.T, path string) (string, bool) {
	t.Helper()
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var opts string
	found := false
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// id parent major:minor root mountpoint options optional... - fstype ...
		fields := strings.Fields(sc.Text())
		if len(fields) < 7 || fields[4] != path {
			continue
		}
		var optional []string
		for _, f := range fields[6:] {
			if f == "-" {
				break
			}
			optional = append(optional, f)
		}
		opts, found = strings.Join(optional, " "), true // a later line is a mount on top
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return opts, found
}
