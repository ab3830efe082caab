package probes

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"golang.org/x/sys/unix"
)

// podRoot makes a directory that stands for a pod's root file system.
func podRoot(t *testing.T) string {
	t.Helper()
	root := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, "etc"), 0o755); err != nil {
		t.Fatal(err)
	}
	return root
}

// requireOpenat2 skips t where openat2(2) is not implemented: Linux
// before 5.6, and qemu-user 7.2 (Debian 12's), which `make test-arm64`
// runs the tests under. podNameservers then fails with ENOSYS and
// ResolvePID leaves the workload's name servers unset
// (docs/operations/packages.md, "Architectures").
func requireOpenat2(t *testing.T) {
	t.Helper()
	fd, err := unix.Openat2(unix.AT_FDCWD, t.TempDir(), &unix.OpenHow{Flags: unix.O_PATH | unix.O_CLOEXEC})
	if errors.Is(err, unix.ENOSYS) {
		t.Skipf("openat2(2) is not implemented here (Linux before 5.6, or qemu-user 7.2): %v", err)
	}
	if err == nil {
		unix.Close(fd)
	}
}

func TestPodNameserversReadsTheWorkloadsFileSafely(t *testing.T) {
	requireOpenat2(t)
	t.Run("a regular file", func(t *testing.T) {
		root := podRoot(t)
		writeFile(t, filepath.Join(root, "etc", "resolv.conf"), "search factory.svc.cluster.local\nnameserver 10.43.0.10\nnameserver 10.43.0.11\n")
		got, err := podNameservers(root)
		if err != nil || !cmp.Equal(got, []string{"10.43.0.10", "10.43.0.11"}) {
			t.Errorf("got %v, %v", got, err)
		}
	})
	t.Run("an absolute symlink resolves inside the workload's root", func(t *testing.T) {
		root := podRoot(t)
		writeFile(t, filepath.Join(root, "etc", "resolv.pod"), "nameserver 10.43.0.99\n")
		if err := os.Symlink("/etc/resolv.pod", filepath.Join(root, "etc", "resolv.conf")); err != nil {
			t.Fatal(err)
		}
		got, err := podNameservers(root)
		if err != nil || !cmp.Equal(got, []string{"10.43.0.99"}) {
			t.Errorf("got %v, %v; want the pod's own file, not the agent's /etc/resolv.pod", got, err)
		}
	})
	t.Run("a symlink to the agent's files does not leave the root", func(t *testing.T) {
		root := podRoot(t)
		if err := os.Symlink("../../../../../../etc/hostname", filepath.Join(root, "etc", "resolv.conf")); err != nil {
			t.Fatal(err)
		}
		if got, err := podNameservers(root); err == nil {
			t.Errorf("got %v, nil; want the link to end inside the root, where there is no etc/hostname", got)
		}
	})
	t.Run("a FIFO is refused without blocking", func(t *testing.T) {
		root := podRoot(t)
		if err := syscall.Mkfifo(filepath.Join(root, "etc", "resolv.conf"), 0o644); err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { _, err := podNameservers(root); done <- err }()
		select {
		case err := <-done:
			if err == nil || !strings.Contains(err.Error(), "not a regular file") {
				t.Errorf("err = %v, want it refused as not a regular file", err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("reading a FIFO blocked") // the goroutine leaks with the test binary
		}
	})
	t.Run("only the first 64 KiB are read", func(t *testing.T) {
		root := podRoot(t)
		writeFile(t, filepath.Join(root, "etc", "resolv.conf"), "nameserver 10.43.0.10\n"+strings.Repeat("#\n", 40<<10)+"nameserver 10.66.6.6\n")
		got, err := podNameservers(root)
		if err != nil || !cmp.Equal(got, []string{"10.43.0.10"}) {
			t.Errorf("got %v, %v; want only what is in the first 64 KiB", got, err)
		}
	})
}

// snoop listens on addr and counts the bytes anyone sends it.
func snoop(t *testing.T, addr string) *atomic.Int64 {
	t.Helper()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	var n atomic.Int64
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				buf := make([]byte, 4096)
				for {
					k, err := c.Read(buf)
					n.Add(int64(k))
					if err != nil {
						return
					}
				}
			}()
		}
	}()
	t.Cleanup(func() { ln.Close() })
	return &n
}

// A pod whose resolver sends the broker's name elsewhere (here to
// 127.0.0.2, where something listens on the broker's port) never gets the
// workload's password: with credentials the name is resolved by the host.
func TestMQTTSendsCredentialsOnlyToAnAddressTheHostResolved(t *testing.T) {
	b := startMosquitto(t)
	_, port, _ := net.SplitHostPort(b.PlainAddr)
	rogue := snoop(t, "127.0.0.2:"+port)
	podDNS := startDNS(t, Netns{}, map[string][4]byte{"broker.test.": {127, 0, 0, 2}})
	pod := Netns{DNSServers: []string{podDNS}}
	cfg := MQTTConfig{Broker: "tcp://broker.test:" + port, Username: b.user, PasswordFile: b.passwd, Timeout: 2 * time.Second}

	orig := hostLookup
	t.Cleanup(func() { hostLookup = orig })
	hostLookup = func(ctx context.Context, host string) ([]netip.Addr, error) {
		if host == "broker.test" {
			return []netip.Addr{netip.MustParseAddr("127.0.0.1")}, nil
		}
		return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
	}
	r, err := MQTT(context.Background(), pod, cfg)
	if err != nil || r.Class != ClassOK {
		t.Errorf("with the host's answer: %+v, %v; want the real broker, ok", r, err)
	}

	hostLookup = func(ctx context.Context, host string) ([]netip.Addr, error) {
		return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
	}
	_, err = MQTT(context.Background(), pod, cfg)
	var dnsErr *net.DNSError
	if err == nil || !errors.As(err, &dnsErr) || !strings.Contains(err.Error(), "on the host") {
		t.Errorf("a name the host cannot resolve: %v, want an error (no probe), not the pod's answer", err)
	}
	time.Sleep(100 * time.Millisecond)
	if n := rogue.Load(); n != 0 {
		t.Fatalf("the address the pod's resolver chose received %d bytes", n)
	}

	// Without credentials the pod's resolver is what is probed.
	cfg.PasswordFile, cfg.Username = "", ""
	if _, err := MQTT(context.Background(), pod, cfg); err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond)
	if rogue.Load() == 0 {
		t.Error("without credentials the pod's resolver was not used: the test does not show what it should")
	}
}
