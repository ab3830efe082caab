package lab

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// Leftovers lists what exists of a lab with this prefix: namespaces under
// /var/run/netns, WireGuard UAPI sockets, /etc/netns directories, links in
// the caller's namespace, processes whose command line names the prefix
// (other than this one), and runDir if not empty. A closed lab has none.
func Leftovers(prefix, runDir string) []string {
	var out []string
	glob := func(pattern string) {
		m, _ := filepath.Glob(pattern)
		out = append(out, m...)
	}
	glob(filepath.Join(netnsDir, prefix+"-*"))
	glob(filepath.Join(wgSocketDir, prefix+"-*.sock"))
	glob(filepath.Join(etcNetnsDir, prefix+"-*"))
	if ifs, err := net.Interfaces(); err == nil {
		for _, i := range ifs {
			if strings.HasPrefix(i.Name, prefix+"-") {
				out = append(out, "link "+i.Name)
			}
		}
	}
	for _, pid := range processesNaming(prefix) {
		out = append(out, "process "+strconv.Itoa(pid))
	}
	if runDir != "" {
		if _, err := os.Lstat(runDir); err == nil {
			out = append(out, runDir)
		}
	}
	return out
}

// processesNaming returns the PIDs, other than this process, whose command
// line contains prefix+"-" (mosquitto's config path, `ip netns exec
// <prefix>-edge ...`) or whose network namespace is one of the lab's (an
// agent started there by any means).
func processesNaming(prefix string) []int {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	labNS := map[[2]uint64]bool{}
	nss, _ := filepath.Glob(filepath.Join(netnsDir, prefix+"-*"))
	for _, p := range nss {
		if ino, ok := inode(p); ok {
			labNS[ino] = true
		}
	}
	self := os.Getpid()
	needle := []byte(prefix + "-")
	var pids []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == self {
			continue
		}
		if ino, ok := inode(filepath.Join("/proc", e.Name(), "ns", "net")); ok && labNS[ino] {
			pids = append(pids, pid)
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil {
			continue
		}
		if bytes.Contains(b, needle) {
			pids = append(pids, pid)
		}
	}
	return pids
}

// inode is the device and inode number of path (after symlinks): for a namespace file
// or /proc/PID/ns/net, the namespace's identity. A bind-mounted namespace
// file that is not mounted (half-made) has a plain file's inode, which no
// process shares.
func inode(path string) ([2]uint64, bool) {
	var st syscall.Stat_t
	if err := syscall.Stat(path, &st); err != nil {
		return [2]uint64{}, false
	}
	return [2]uint64{st.Dev, st.Ino}, true
}

// Sweep removes everything Leftovers finds for prefix: it kills the
// processes (by PID, those whose command line names the prefix), removes
// the namespaces, UAPI sockets, /etc/netns directories and runDir. It is
// what Close does last, and what `edgeheal-lab down` does after a crash.
func Sweep(prefix, runDir string) error {
	if !prefixRE.MatchString(prefix) {
		return fmt.Errorf("sweeping: bad prefix %q", prefix)
	}
	var errs []error
	for _, pid := range processesNaming(prefix) {
		if err := syscall.Kill(pid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
			errs = append(errs, fmt.Errorf("killing %d: %w", pid, err))
		}
	}
	nss, _ := filepath.Glob(filepath.Join(netnsDir, prefix+"-*"))
	for _, p := range nss {
		errs = append(errs, removeNamedNS(filepath.Base(p)))
	}
	socks, _ := filepath.Glob(filepath.Join(wgSocketDir, prefix+"-*.sock"))
	for _, p := range socks {
		if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	etcs, _ := filepath.Glob(filepath.Join(etcNetnsDir, prefix+"-*"))
	for _, p := range etcs {
		errs = append(errs, os.RemoveAll(p))
	}
	_ = os.Remove(etcNetnsDir) // only when empty
	if runDir != "" {
		errs = append(errs, os.RemoveAll(runDir))
		// The shared parent goes only when empty (another lab may use it).
		if filepath.Dir(runDir) == DefaultRunRoot {
			_ = os.Remove(DefaultRunRoot)
		}
	}
	return errors.Join(errs...)
}

// Prefixes lists the prefixes of the labs that have namespaces on this
// machine (running or left behind), for `edgeheal-lab sweep`.
func Prefixes() []string {
	m, _ := filepath.Glob(filepath.Join(netnsDir, "*-edge"))
	var out []string
	for _, p := range m {
		pre := strings.TrimSuffix(filepath.Base(p), "-edge")
		if !prefixRE.MatchString(pre) {
			continue
		}
		if _, err := os.Stat(filepath.Join(netnsDir, pre+"-modem")); err != nil {
			continue // not a lab: a lab always has a modem
		}
		out = append(out, pre)
	}
	return out
}
