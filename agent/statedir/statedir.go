// Package statedir is how edgeheal keeps files in its state directory
// (report.state_dir, /var/lib/edgeheal): replaced atomically and durably,
// so that a crash or a power cut leaves either the old file or the new one,
// never a torn or empty one.
package statedir

import (
	"errors"
	"os"
	"path/filepath"

	"github.com/google/renameio/v2"
)

// WriteFile replaces path with data: a temporary file in the same
// directory, written and fsynced, renamed over path (renameio), then the
// directory fsynced so that the rename itself survives a power cut. The
// directory is created if missing (EnsureDir).
func WriteFile(path string, data []byte, perm os.FileMode) error {
	dir := filepath.Dir(path)
	if err := EnsureDir(dir, 0o750); err != nil {
		return err
	}
	if err := renameio.WriteFile(path, data, perm); err != nil {
		return err
	}
	return SyncDir(dir)
}

// EnsureDir creates dir and any missing parents, like os.MkdirAll, and
// fsyncs the parent of every directory it created, so that the new
// directory survives a power cut with what is written into it. An
// existing directory is left alone.
func EnsureDir(dir string, perm os.FileMode) error {
	dir = filepath.Clean(dir)
	if st, err := os.Stat(dir); err == nil {
		if !st.IsDir() {
			return &os.PathError{Op: "mkdir", Path: dir, Err: errors.New("not a directory")}
		}
		return nil
	}
	parent := filepath.Dir(dir)
	if parent != dir {
		if err := EnsureDir(parent, perm); err != nil {
			return err
		}
	}
	if err := os.Mkdir(dir, perm); err != nil {
		if errors.Is(err, os.ErrExist) {
			return nil // made meanwhile by someone else
		}
		return err
	}
	return SyncDir(parent)
}

// SyncDir makes a rename or create in dir durable.
func SyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
