package configs

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sync"

	"golang.org/x/sys/unix"
)

// renderedMode is the mode of every rendered file.
const renderedMode = 0o644

// WriteRendered writes the rendered files into dir (created if missing)
// and reports, for each file in the order given, whether it was written:
// a file dir already holds with the same bytes, as a regular file of mode
// 0644, is left alone (not even its modification time changes), so that
// re-rendering a fleet in which few nodes changed writes only those. It
// writes only the files given: render into an empty directory to ship
// exactly one inventory's files.
//
// A file is replaced atomically and durably, and all of them at one cost:
// every new content goes to a temporary file in dir first; then one
// syncfs(2) puts all of them on disk; then each is renamed over its file,
// and one fsync of dir makes the renames durable. At every moment, a crash
// included, each file is either its old or its new content, whole. If a
// temporary file cannot be written, no file is replaced and every
// temporary file is removed; if a rename fails, the files before it are
// replaced, the rest keep their old content, and no temporary file is
// left. google/renameio (agent/statedir) does the same per file, with an
// fsync each: 10,000 of them take seconds (docs/performance.md, "edgeheal
// render at fleet scale").
func WriteRendered(dir string, files []Rendered) (written []bool, err error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("creating output directory: %w", err)
	}
	st := newStaging(dir, len(files))
	// Reading and creating files is the kernel's work on a core (on this
	// project's build machine, allocating an inode is most of it), so
	// there is no use in more goroutines than cores.
	forEach(len(files), runtime.GOMAXPROCS(0), func(i int) {
		st.stage(i, files[i])
	})
	return st.commit(files)
}

// RenderInto is Render, then WriteRendered into dir, with each node's file
// staged (compared, and written to its temporary file) while the other
// nodes render: on two cores that takes a third off rendering 10,000
// nodes into an empty directory (docs/performance.md, "edgeheal render at
// fleet scale"). What ends up in dir is the same: when any node fails, no
// file is replaced (the temporary files are removed, and dir itself when
// this call made it), and the error is the *RenderError; otherwise as
// WriteRendered, whose errors it returns.
func (f *Fleet) RenderInto(inv *Inventory, dir string) ([]Rendered, []bool, error) {
	made := missingDirs(dir)
	mkErr := os.MkdirAll(dir, 0o755)
	st := newStaging(dir, len(inv.Nodes))
	type rendered struct {
		i int
		r Rendered
	}
	ready := make(chan rendered, len(inv.Nodes)) // never blocks a renderer
	var wg sync.WaitGroup
	wg.Go(func() {
		// One goroutine is enough: creating files in one directory is
		// serialised by the kernel, and the cores are rendering.
		failed := mkErr != nil
		for it := range ready {
			if !failed {
				st.stage(it.i, it.r)
				failed = st.errs[it.i] != nil // a full disk: stop trying
			}
		}
	})
	files, err := f.render(inv, newShapeCache(), func(i int, r Rendered) { ready <- rendered{i, r} })
	close(ready)
	wg.Wait()
	if err != nil {
		st.abort()
		for _, d := range made {
			os.Remove(d) // made by this call, now empty again
		}
		return nil, nil, err
	}
	if mkErr != nil {
		return nil, nil, fmt.Errorf("creating output directory: %w", mkErr)
	}
	written, err := st.commit(files)
	if err != nil {
		return nil, nil, err
	}
	return files, written, nil
}

// missingDirs lists dir and each of its parents that does not exist, dir
// first: what MkdirAll(dir) would make.
func missingDirs(dir string) []string {
	var missing []string
	for d := filepath.Clean(dir); ; d = filepath.Dir(d) {
		if _, err := os.Lstat(d); !errors.Is(err, fs.ErrNotExist) {
			return missing
		}
		missing = append(missing, d)
		if filepath.Dir(d) == d {
			return missing
		}
	}
}

// staging is one write of rendered files: the temporary files staged so
// far, by file index, and why any could not be.
type staging struct {
	dir  string
	tmps []string // "" for a file not staged (left alone, or not yet)
	errs []error
}

func newStaging(dir string, n int) *staging {
	return &staging{dir: dir, tmps: make([]string, n), errs: make([]error, n)}
}

// stage compares file i with its file in dir and writes it to a
// temporary file when they differ. Calls for different i may run at once.
func (st *staging) stage(i int, r Rendered) {
	st.tmps[i], st.errs[i] = stage(st.dir, r)
}

// abort removes every temporary file staged.
func (st *staging) abort() { removeAll(st.tmps) }

// commit replaces the files staged, once every file has been: one syncfs,
// the renames, one fsync of dir. It reports which files were written. On
// an error no temporary file is left.
func (st *staging) commit(files []Rendered) ([]bool, error) {
	dir, tmps := st.dir, st.tmps
	written := make([]bool, len(files))
	for i, tmp := range tmps {
		written[i] = tmp != ""
	}
	if err := firstError(st.errs); err != nil {
		st.abort()
		return nil, err
	}
	if !slices.Contains(written, true) {
		return written, nil // nothing to flush or rename
	}
	d, err := os.Open(dir)
	if err != nil {
		st.abort()
		return nil, fmt.Errorf("opening output directory: %w", err)
	}
	defer d.Close()
	if err := unix.Syncfs(int(d.Fd())); err != nil {
		st.abort()
		return nil, fmt.Errorf("flushing the rendered files to disk (syncfs %s): %w", dir, err)
	}
	for i, tmp := range tmps {
		if tmp == "" {
			continue
		}
		if err := os.Rename(tmp, filepath.Join(dir, files[i].File)); err != nil {
			removeAll(tmps[i:])
			return nil, fmt.Errorf("writing %s: %w", filepath.Join(dir, files[i].File), err)
		}
	}
	if err := d.Sync(); err != nil {
		return nil, fmt.Errorf("flushing output directory %s: %w", dir, err)
	}
	return written, nil
}

// stage compares r with its file in dir and, when they differ, writes r's
// content to a new temporary file next to it, whose name it returns.
// It returns "" when the file already is r.
func stage(dir string, r Rendered) (string, error) {
	path := filepath.Join(dir, r.File)
	same, err := holds(path, r.Data)
	if err != nil {
		return "", fmt.Errorf("writing %s: %w", path, err)
	}
	if same {
		return "", nil
	}
	tmp, err := os.CreateTemp(dir, "."+r.File+".*")
	if err != nil {
		return "", fmt.Errorf("writing %s: %w", path, err)
	}
	_, werr := tmp.Write(r.Data)
	if werr == nil {
		werr = tmp.Chmod(renderedMode)
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
	if !fi.Mode().IsRegular() || fi.Mode().Perm() != renderedMode || fi.Size() != int64(len(data)) {
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
