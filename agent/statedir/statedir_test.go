package statedir

import (
	"os"
	"path/filepath"
	"testing"
)

func TestWriteFileReplacesAndLeavesNoTemporaryFile(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "state")
	path := filepath.Join(dir, "session")
	for _, content := range []string{"1\n", "2\n"} {
		if err := WriteFile(path, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(path)
		if err != nil || string(got) != content {
			t.Errorf("after writing %q: %q, %v", content, got, err)
		}
	}
	ents, err := os.ReadDir(dir)
	if err != nil || len(ents) != 1 {
		t.Errorf("the directory holds %v, %v; want the one file", ents, err)
	}
	if st, err := os.Stat(path); err != nil || st.Mode().Perm() != 0o600 {
		t.Errorf("mode %v, %v; want 0600", st.Mode(), err)
	}
}

func TestWriteFileIntoAReadOnlyDirectoryFails(t *testing.T) {
	if os.Geteuid() == 0 {
		// root writes into read-only directories: use a path under a file.
		f := filepath.Join(t.TempDir(), "file")
		if err := os.WriteFile(f, nil, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := WriteFile(filepath.Join(f, "x"), []byte("1"), 0o600); err == nil {
			t.Error("writing under a regular file succeeded")
		}
		return
	}
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o500); err != nil {
		t.Fatal(err)
	}
	if err := WriteFile(filepath.Join(dir, "x"), []byte("1"), 0o600); err == nil {
		t.Error("writing into a read-only directory succeeded")
	}
}

func TestEnsureDirCreatesEveryMissingParentAndLeavesAnExistingOneAlone(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, "a", "b", "c")
	if err := EnsureDir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{filepath.Join(root, "a"), filepath.Join(root, "a", "b"), dir} {
		if st, err := os.Stat(d); err != nil || !st.IsDir() || st.Mode().Perm() != 0o700 {
			t.Errorf("%s: %v, %v; want a directory with mode 0700", d, st, err)
		}
	}
	if err := EnsureDir(dir, 0o755); err != nil {
		t.Errorf("an existing directory: %v", err)
	}
	file := filepath.Join(root, "file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := EnsureDir(file, 0o700); err == nil {
		t.Error("EnsureDir on a regular file succeeded")
	}
	if err := EnsureDir(filepath.Join(file, "x"), 0o700); err == nil {
		t.Error("EnsureDir under a regular file succeeded")
	}
}
