package probes

// Reading what a workload's own files say about its network, from the
// agent's side: safely, because the files belong to the workload.

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// maxResolvConf is the most of a workload's resolv.conf that is read.
const maxResolvConf = 64 << 10

// podNameservers returns the name servers of etc/resolv.conf as a process
// whose root directory is root (/proc/<pid>/root) sees it. The file
// belongs to the workload, so it is opened without following any link out
// of root (openat2 RESOLVE_IN_ROOT: an absolute symlink resolves inside the
// workload's root, never to the agent's files) and without blocking: a
// FIFO, a device or anything else that is not a regular file is refused,
// and at most 64 KiB are read.
func podNameservers(root string) ([]string, error) {
	f, err := openInRoot(root, "etc/resolv.conf")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("reading the workload's resolv.conf: %w", err)
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("the workload's resolv.conf is not a regular file (%s): not read", st.Mode().Type())
	}
	var servers []string
	sc := bufio.NewScanner(io.LimitReader(f, maxResolvConf))
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) >= 2 && fields[0] == "nameserver" {
			servers = append(servers, fields[1])
		}
	}
	return servers, sc.Err()
}

// openInRoot opens name (relative) read-only and non-blocking, resolved
// with root as its root directory (openat2: Linux 5.6 and later).
func openInRoot(root, name string) (*os.File, error) {
	dir, err := unix.Open(root, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: root, Err: err}
	}
	defer unix.Close(dir)
	fd, err := unix.Openat2(dir, name, &unix.OpenHow{
		Flags:   unix.O_RDONLY | unix.O_NONBLOCK | unix.O_NOCTTY | unix.O_CLOEXEC,
		Resolve: unix.RESOLVE_IN_ROOT | unix.RESOLVE_NO_MAGICLINKS,
	})
	if err != nil {
		return nil, &os.PathError{Op: "openat2", Path: filepath.Join(root, name), Err: err}
	}
	return os.NewFile(uintptr(fd), filepath.Join(root, name)), nil
}

// hostLookup resolves a name the way the agent's own namespace does (its
// /etc/hosts and /etc/resolv.conf): the resolver a workload's credentials
// may trust. A variable, for tests.
var hostLookup = func(ctx context.Context, host string) ([]netip.Addr, error) {
	return Netns{}.Resolver().LookupNetIP(ctx, "ip", host)
}

// pickAddr prefers IPv4, as the pod networks edgeheal runs on are IPv4 first.
func pickAddr(ips []netip.Addr) (netip.Addr, error) {
	if len(ips) == 0 {
		return netip.Addr{}, errors.New("no address")
	}
	for _, a := range ips {
		if a.Unmap().Is4() {
			return a.Unmap(), nil
		}
	}
	return ips[0].Unmap(), nil
}
