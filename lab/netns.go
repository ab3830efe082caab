package lab

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"sync"

	"github.com/edgeheal/edgeheal/probes"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// netnsDir is where named namespaces are bind-mounted, as iproute2 does, so
// that `ip netns exec NAME` and separate processes find them.
const netnsDir = "/var/run/netns"

// etcNetnsDir holds per-namespace files that `ip netns exec` bind-mounts over
// /etc (hosts, resolv.conf).
const etcNetnsDir = "/etc/netns"

// createNamedNS creates a new network namespace bind-mounted at
// /var/run/netns/name and returns an open handle to it. The calling thread
// is back in its own namespace when it returns; if it could not get back,
// the thread stays locked so that the runtime discards it.
func createNamedNS(name string) (netns.NsHandle, error) {
	if err := ensureNetnsDir(); err != nil {
		return netns.None(), fmt.Errorf("creating namespace %s: %w", name, err)
	}
	if _, err := os.Stat(filepath.Join(netnsDir, name)); err == nil {
		return netns.None(), fmt.Errorf("creating namespace %s: %w", name, os.ErrExist)
	}
	runtime.LockOSThread()
	orig, err := netns.Get()
	if err != nil {
		runtime.UnlockOSThread()
		return netns.None(), fmt.Errorf("reading own namespace: %w", err)
	}
	defer orig.Close()
	ns, err := netns.NewNamed(name)
	if serr := netns.Set(orig); serr != nil {
		// Never unlock a thread left in a foreign namespace.
		if ns.IsOpen() {
			ns.Close()
		}
		return netns.None(), fmt.Errorf("returning to own namespace: %w", serr)
	}
	runtime.UnlockOSThread()
	if err != nil {
		// NewNamed may have created the file before failing.
		_ = removeNamedNS(name)
		return netns.None(), fmt.Errorf("creating namespace %s: %w", name, err)
	}
	return ns, nil
}

// netnsDirMu serialises ensureNetnsDir: two labs starting at once must
// not both bind the directory onto itself.
var netnsDirMu sync.Mutex

// ensureNetnsDir makes netnsDir a mount point with shared propagation
// before a namespace is mounted in it, as iproute2 and containerd do. A
// tool that finds the directory not yet a mount point binds it onto
// itself; namespaces mounted in it before that are then hidden under the
// new mount and can no longer be removed (docs/lab.md, "Kernel and
// tools").
func ensureNetnsDir() error {
	netnsDirMu.Lock()
	defer netnsDirMu.Unlock()
	if err := os.MkdirAll(netnsDir, 0o755); err != nil {
		return fmt.Errorf("creating %s: %w", netnsDir, err)
	}
	err := unix.Mount("", netnsDir, "none", unix.MS_SHARED|unix.MS_REC, "")
	if err == nil {
		return nil
	}
	if !errors.Is(err, unix.EINVAL) { // EINVAL: not a mount point yet
		return fmt.Errorf("making %s shared: %w", netnsDir, err)
	}
	// Recursive, so that namespaces already mounted in it are carried over.
	if err := unix.Mount(netnsDir, netnsDir, "none", unix.MS_BIND|unix.MS_REC, ""); err != nil {
		return fmt.Errorf("making %s a mount point: %w", netnsDir, err)
	}
	if err := unix.Mount("", netnsDir, "none", unix.MS_SHARED|unix.MS_REC, ""); err != nil {
		return fmt.Errorf("making %s shared: %w", netnsDir, err)
	}
	return nil
}

// removeNamedNS unmounts and removes /var/run/netns/name. A missing
// namespace is not an error.
func removeNamedNS(name string) error {
	p := filepath.Join(netnsDir, name)
	if _, err := os.Lstat(p); errors.Is(err, os.ErrNotExist) {
		return nil
	}
	err := netns.DeleteNamed(name)
	if err == nil || errors.Is(err, os.ErrNotExist) {
		return nil
	}
	// Not mounted (a half-made namespace): just remove the file.
	if rerr := os.Remove(p); rerr == nil || errors.Is(rerr, os.ErrNotExist) {
		return nil
	}
	return fmt.Errorf("removing namespace %s: %w", name, err)
}

// doIn runs fn on a locked OS thread switched into ns, then switches back
// (see probes.DoIn). fn must not start goroutines that expect to inherit
// the namespace.
func doIn(ns netns.NsHandle, fn func() error) error {
	return probes.DoIn(ns, fn)
}

// writeSysctl writes value to /proc/sys/<key> (key with slashes) inside ns.
func writeSysctl(ns netns.NsHandle, key, value string) error {
	return doIn(ns, func() error {
		p := filepath.Join("/proc/sys", key)
		if err := os.WriteFile(p, []byte(value), 0o644); err != nil {
			return fmt.Errorf("writing %s: %w", p, err)
		}
		return nil
	})
}
