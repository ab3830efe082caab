package configs

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// A layer that is not a file (a FIFO, a link to /dev/zero, a directory)
// or that is far too large is an error that names it, at once: Load never
// waits on a FIFO and never reads a device or a huge file into memory.
// The error matches ErrRead: the config could not be read, which is not
// the same as invalid.
func TestLoadRefusesLayersThatAreNotFilesAtOnce(t *testing.T) {
	for _, tc := range []struct {
		name string
		make func(t *testing.T, path string)
		says string
	}{
		{"a FIFO", func(t *testing.T, p string) {
			if err := syscall.Mkfifo(p, 0o644); err != nil {
				t.Fatal(err)
			}
		}, "is a named pipe (FIFO)"},
		{"a link to /dev/zero", func(t *testing.T, p string) {
			if err := os.Symlink("/dev/zero", p); err != nil {
				t.Fatal(err)
			}
		}, "is a character device"},
		{"a directory", func(t *testing.T, p string) {
			if err := os.Mkdir(p, 0o755); err != nil {
				t.Fatal(err)
			}
		}, "is a directory"},
		{"16 MiB of comments", func(t *testing.T, p string) {
			line := "# " + strings.Repeat("x", 61) + "\n"
			if err := os.WriteFile(p, []byte(strings.Repeat(line, 16<<20/len(line))), 0o644); err != nil {
				t.Fatal(err)
			}
		}, "is 16 MiB, more than the 512 KiB allowed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			main := writeTree(t, map[string]string{"config.yaml": "version: 1\nnode: {name: n1}\n"})
			dir := filepath.Dir(main)
			if err := os.MkdirAll(filepath.Join(dir, "config.d"), 0o755); err != nil {
				t.Fatal(err)
			}
			bad := filepath.Join(dir, "config.d", "50-bad.yaml")
			tc.make(t, bad)
			done := make(chan error, 1)
			go func() { _, err := Load(main); done <- err }()
			select {
			case err := <-done:
				if !errors.Is(err, ErrRead) || !strings.Contains(err.Error(), bad+" "+tc.says) {
					t.Errorf("Load = %v, want ErrRead naming %s: %q", err, bad, tc.says)
				}
			case <-time.After(5 * time.Second):
				t.Fatal("Load blocked")
			}
		})
	}
}

// The last good copy is read the same way.
func TestLoadLastGoodRefusesAFIFO(t *testing.T) {
	p := filepath.Join(t.TempDir(), "last-good-config.yaml")
	if err := syscall.Mkfifo(p, 0o600); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { _, err := LoadLastGood(p); done <- err }()
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), p+" is a named pipe") {
			t.Errorf("LoadLastGood = %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("LoadLastGood blocked")
	}
}

// The values all the layers may hold are bounded together: four drop-ins
// of 6,000 values each are refused, not kept.
func TestTheValueBudgetIsForAllLayersTogether(t *testing.T) {
	files := map[string]string{"config.yaml": "version: 1\nnode: {name: n1}\n"}
	var sb strings.Builder
	sb.WriteString("tunnels:\n  - {interface: wg0, peers: [")
	for i := range 6000 {
		if i > 0 {
			sb.WriteString(",")
		}
		sb.WriteString("a")
	}
	sb.WriteString("]}\n")
	for i := range 4 {
		files[filepath.Join("config.d", string(rune('a'+i))+".yaml")] = sb.String()
	}
	_, err := Load(writeTree(t, files))
	if err == nil || !strings.Contains(err.Error(), "more than 20000 values") {
		t.Errorf("Load = %v, want the budget spent", err)
	}
}
