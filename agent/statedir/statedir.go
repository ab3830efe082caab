// Package statedir is how edgeheal keeps files in its state directory
// (report.state_dir, /var/lib/edgeheal): replaced atomically and durably,
// so that a crash or a power cut leaves either the old file or the new one,
// never a torn or empty one.
package statedir

import (
	"os"
	"path/filepath"

	"github.com/google/renameio/v2"
)

// WriteFile replaces path with data: a temporary file in the same
// directory, written and fsynced, renamed over path (renameio), then the
// directory fsynced so that the rename itself survives a power cut. The
// directory is created if missing.
func WriteFile(path string, data []byte, perm os.FileMode) error {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return err
	}
	if err := renameio.WriteFile(path, data, perm); err != nil {
		return err
	}
	return SyncDir(dir)
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
