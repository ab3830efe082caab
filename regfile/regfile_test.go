package regfile

import (
	"errors"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Every kind of path that is not a regular file is refused at once, by
// name, without reading from it: a FIFO without a writer (which a plain
// open would wait on forever), a link to /dev/zero (which a plain read
// would fill memory from), a directory, a socket.
func TestReadRefusesWhatIsNotARegularFileWithoutBlocking(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo.yaml")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	zero := filepath.Join(dir, "zero.yaml")
	if err := os.Symlink("/dev/zero", zero); err != nil {
		t.Fatal(err)
	}
	sub := filepath.Join(dir, "dir.yaml")
	if err := os.Mkdir(sub, 0o700); err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(dir, "sock.yaml")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	for _, tc := range []struct{ path, says string }{
		{fifo, "is a named pipe (FIFO)"},
		{zero, "is a character device"},
		{sub, "is a directory"},
		{sock, "is a socket"},
	} {
		t.Run(filepath.Base(tc.path), func(t *testing.T) {
			done := make(chan error, 1)
			go func() { _, err := Read(tc.path, ConfigLimit); done <- err }()
			select {
			case err := <-done:
				if !errors.Is(err, ErrNotRegular) || !strings.Contains(err.Error(), tc.path+" "+tc.says) {
					t.Errorf("Read = %v, want %q naming the file", err, tc.says)
				}
			case <-time.After(5 * time.Second):
				t.Fatal("Read blocked")
			}
		})
	}
}

// A FIFO that appears between the look at the path and the open is opened
// without waiting for a writer, and refused.
func TestOpenFileNeverWaitsOnAFIFO(t *testing.T) {
	fifo := filepath.Join(t.TempDir(), "p")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		f, err := os.OpenFile(fifo, os.O_RDONLY|syscall.O_NONBLOCK, 0)
		if err == nil {
			f.Close()
		}
		done <- err
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("a non-blocking open of a FIFO failed: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a non-blocking open of a FIFO blocked")
	}
}

func TestReadBoundsTheSize(t *testing.T) {
	dir := t.TempDir()
	small := filepath.Join(dir, "small")
	if err := os.WriteFile(small, []byte("hello\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if b, err := Read(small, 6); err != nil || string(b) != "hello\n" {
		t.Errorf("Read(small, 6) = %q, %v", b, err)
	}
	_, err := Read(small, 5)
	if !errors.Is(err, ErrTooLarge) || !strings.Contains(err.Error(), small+" is 6 bytes, more than the 5 bytes allowed") {
		t.Errorf("Read(small, 5) = %v, want too large, naming the file", err)
	}
	big := filepath.Join(dir, "big")
	if err := os.WriteFile(big, make([]byte, 16<<20), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err = Read(big, ConfigLimit)
	if !errors.Is(err, ErrTooLarge) || !strings.Contains(err.Error(), "is 16 MiB, more than the 512 KiB allowed") {
		t.Errorf("Read(big) = %v", err)
	}
	if _, err := Read(filepath.Join(dir, "missing"), 10); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Read(missing) = %v, want fs.ErrNotExist", err)
	}
	link := filepath.Join(dir, "link")
	if err := os.Symlink(small, link); err != nil {
		t.Fatal(err)
	}
	if b, err := Read(link, 100); err != nil || string(b) != "hello\n" {
		t.Errorf("a link to a regular file: %q, %v", b, err)
	}
}

func TestOpenFileCreatesAndWrites(t *testing.T) {
	p := filepath.Join(t.TempDir(), "log")
	f, err := OpenFile(p, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write([]byte("x")); err != nil {
		t.Fatal(err)
	}
	f.Close()
	if _, err := OpenFile(filepath.Join(t.TempDir(), "nope"), os.O_RDWR, 0); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("open without O_CREATE of a missing file: %v", err)
	}
}
