package render

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"

	"golang.org/x/sys/unix"
)

// fileMode is the mode of every rendered file.
const fileMode = 0o644

// Write writes the rendered files into dir (created if missing) and
// reports, for each file in the order given, whether it was written: a
// file dir already holds with the same bytes, as a regular file of mode
// 0644, is left alone (not even its modification time changes), so that
// re-rendering a fleet in which few nodes changed writes only those. It
// writes only the files given and never removes one: render into an empty
// directory to ship exactly one inventory's files.
//
// A file is replaced atomically and durably, and all of them at one cost:
// every new content goes to a temporary file in dir first; then one
// syncfs(2) puts all of them on disk; then each is renamed over its file,
// and one fsync of dir makes the renames durable. At every moment, a crash
// included, each file is either its old or its new content, whole. If a
// temporary file cannot be written, no file is replaced and every
// temporary file is removed; if a rename fails, the files before it are
// replaced, the rest keep their old content, and no temporary file is
// left. An fsync per file would take seconds for 10,000 of them
// (docs/performance.md, "edgeheal-fleet render at fleet scale").
func Write(dir string, files []File) (written []bool, err error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("creating output directory: %w", err)
	}
	tmps := make([]string, len(files)) // "" for a file left alone
	errs := make([]error, len(files))
	// Comparing and creating files is the kernel's work on a core, so
	// there is no use in more goroutines than cores.
	parallel(len(files), func(i int) {
		tmps[i], errs[i] = stage(dir, files[i])
	})
	if err := firstError(errs); err != nil {
		removeAll(tmps)
		return nil, err
	}
	if err := commit(dir, files, tmps); err != nil {
		return nil, err
	}
	written = make([]bool, len(files))
	for i, tmp := range tmps {
		written[i] = tmp != ""
	}
	return written, nil
}

// commit replaces each file that has a temporary file in tmps: one
// syncfs, the renames, one fsync of dir. On an error no temporary file is
// left.
func commit(dir string, files []File, tmps []string) error {
	if !slices.ContainsFunc(tmps, func(tmp string) bool { return tmp != "" }) {
		return nil // nothing to flush or rename
	}
	d, err := os.Open(dir)
	if err != nil {
		removeAll(tmps)
		return fmt.Errorf("opening output directory: %w", err)
	}
	defer d.Close()
	if err := unix.Syncfs(int(d.Fd())); err != nil {
		removeAll(tmps)
		return fmt.Errorf("flushing the rendered files to disk (syncfs %s): %w", dir, err)
	}
	for i, tmp := range tmps {
		if tmp == "" {
			continue
		}
		path := filepath.Join(dir, files[i].Name)
		if err := os.Rename(tmp, path); err != nil {
			removeAll(tmps[i:])
			return fmt.Errorf("writing %s: %w", path, err)
		}
	}
	if err := d.Sync(); err != nil {
		return fmt.Errorf("flushing output directory %s: %w", dir, err)
	}
	return nil
}

// stage compares f with its file in dir and, when they differ, writes f's
// content to a new temporary file next to it, whose name it returns.
// It returns "" when the file already is f.
func stage(dir string, f File) (string, error) {
	path := filepath.Join(dir, f.Name)
	same, err := holds(path, f.Data)
	if err != nil {
		return "", fmt.Errorf("writing %s: %w", path, err)
	}
	if same {
		return "", nil
	}
	tmp, err := os.CreateTemp(dir, "."+f.Name+".*")
	if err != nil {
		return "", fmt.Errorf("writing %s: %w", path, err)
	}
	_, werr := tmp.Write(f.Data)
	if werr == nil {
		werr = tmp.Chmod(fileMode)
	}
	if cerr := tmp.Close(); werr == nil {
		werr = cerr
	}
	if werr != nil {
		os.Remove(tmp.Name())
		return "", fmt.Errorf("writing %s: %w", path, werr)
	}
	return tmp.Name(), nil
}

// holds reports whether path is a regular file of mode 0644 with exactly
// data. A missing file, a symbolic link, another mode or another size is
// simply not the same; only a file that cannot be read is an error.
func holds(path string, data []byte) (bool, error) {
	fi, err := os.Lstat(path)
	if errors.Is(err, os.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	if !fi.Mode().IsRegular() || fi.Mode().Perm() != fileMode || fi.Size() != int64(len(data)) {
		return false, nil
	}
	f, err := os.Open(path)
	if err != nil {
		return false, err
	}
	defer f.Close()
	have := make([]byte, len(data)+1) // one more: a file that grew since Lstat is not the same
	n, err := io.ReadFull(f, have)
	if err != nil && !errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, io.EOF) {
		return false, err
	}
	return bytes.Equal(have[:n], data), nil
}

// removeAll removes the temporary files named in tmps ("" is none).
func removeAll(tmps []string) {
	for _, tmp := range tmps {
		if tmp != "" {
			os.Remove(tmp)
		}
	}
}

// firstError is the first non-nil error of errs, in the order of the files.
func firstError(errs []error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}
