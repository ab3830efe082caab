// Package regfile opens and reads the files edgeheal is pointed at (its
// configuration and drop-ins, password files, CA, certificate and key
// files, its own state files) the one way each of them must be read: a
// path that names anything but a regular file (a FIFO, a device such as
// /dev/zero, a socket, a directory) is refused without blocking and
// without reading from it, and a file larger than the caller's limit is
// refused before it is read. Every error names the file and says what is
// wrong with it. Symbolic links are followed: what counts is the file at
// the end (a Kubernetes secret or a certificate manager's links are
// fine).
//
// It is standard library only and imports nothing of ours, so that every
// program (the agent, edgeheal-kube, the fleet view) can link it.
package regfile

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"syscall"
)

// ErrNotRegular matches (errors.Is) the error for a path that is not a
// regular file.
var ErrNotRegular = errors.New("not a regular file")

// ErrTooLarge matches (errors.Is) the error for a file over its limit.
var ErrTooLarge = errors.New("larger than allowed")

// Limits of the files the agent reads, each well above what a real one
// holds and low enough that reading it costs the agent little.
const (
	// ConfigLimit bounds the config's layers (the main file and its
	// drop-ins, together) and the last good copy: a 5,000-peer hub that
	// lists every peer's key takes about 260 KiB, and YAML at its densest
	// costs about 50 times its size to parse (docs/performance.md,
	// "Hostile inputs").
	ConfigLimit = 512 << 10
	// PEMLimit bounds a CA bundle, a certificate chain or a key (the
	// whole Debian CA bundle is about 220 KiB).
	PEMLimit = 1 << 20
	// SecretLimit bounds a password file.
	SecretLimit = 4 << 10
	// StateLimit bounds a small state file of the agent's own (a session
	// counter, the policy ledger).
	StateLimit = 4 << 20
)

// kind names what a file mode is, for an error message.
func kind(m fs.FileMode) string {
	switch {
	case m&fs.ModeNamedPipe != 0:
		return "a named pipe (FIFO)"
	case m&fs.ModeCharDevice != 0:
		return "a character device"
	case m&fs.ModeDevice != 0:
		return "a block device"
	case m&fs.ModeSocket != 0:
		return "a socket"
	case m.IsDir():
		return "a directory"
	case m&fs.ModeSymlink != 0:
		return "a symbolic link"
	}
	return "not a regular file"
}

func notRegular(path string, m fs.FileMode) error {
	return fmt.Errorf("%s is %s: %w", path, kind(m), ErrNotRegular)
}

func tooLarge(path string, size, limit int64) error {
	return fmt.Errorf("%s is %s, more than the %s allowed: %w", path, bytesText(size), bytesText(limit), ErrTooLarge)
}

// bytesText is n as a person reads it: 512 bytes, 64 KiB, 16.0 MiB.
func bytesText(n int64) string {
	switch {
	case n < 1<<10:
		return fmt.Sprintf("%d bytes", n)
	case n < 1<<20 && n%(1<<10) == 0:
		return fmt.Sprintf("%d KiB", n>>10)
	case n < 1<<20:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	case n%(1<<20) == 0:
		return fmt.Sprintf("%d MiB", n>>20)
	}
	return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
}

// OpenFile is os.OpenFile for a file that must be regular: a path that
// exists and is not a regular file is refused before it is opened (opening
// some devices does something), and the open itself never blocks (O_NONBLOCK:
// a FIFO that appeared in between is opened without waiting for a writer,
// then refused). The file returned is in blocking mode again.
func OpenFile(path string, flag int, perm fs.FileMode) (*os.File, error) {
	if st, err := os.Stat(path); err == nil && !st.Mode().IsRegular() {
		return nil, notRegular(path, st.Mode())
	} else if err != nil && !(errors.Is(err, fs.ErrNotExist) && flag&os.O_CREATE != 0) {
		return nil, err
	}
	f, err := os.OpenFile(path, flag|syscall.O_NONBLOCK|syscall.O_NOCTTY, perm)
	if err != nil {
		return nil, err
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, err
	}
	if !st.Mode().IsRegular() {
		f.Close()
		return nil, notRegular(path, st.Mode())
	}
	// O_NONBLOCK means nothing to a regular file; cleared all the same, so
	// the file behaves as any other.
	if err := clearNonblock(f); err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

func clearNonblock(f *os.File) error {
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	var serr error
	if err := rc.Control(func(fd uintptr) { serr = syscall.SetNonblock(int(fd), false) }); err != nil {
		return err
	}
	if serr != nil {
		return fmt.Errorf("%s: %w", f.Name(), serr)
	}
	return nil
}

// ReadFrom reads all of f, a file OpenFile opened, refusing it when it
// holds more than limit bytes (also when it grew past the limit while it
// was read).
func ReadFrom(f *os.File, limit int64) ([]byte, error) {
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if st.Size() > limit {
		return nil, tooLarge(f.Name(), st.Size(), limit)
	}
	b, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", f.Name(), err)
	}
	if int64(len(b)) > limit {
		return nil, tooLarge(f.Name(), int64(len(b)), limit)
	}
	return b, nil
}

// Read reads the regular file at path, of at most limit bytes: see
// OpenFile and ReadFrom. A missing file's error matches fs.ErrNotExist.
func Read(path string, limit int64) ([]byte, error) {
	f, err := OpenFile(path, os.O_RDONLY, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return ReadFrom(f, limit)
}
