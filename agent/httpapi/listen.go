package httpapi

import (
	"bufio"
	"errors"
	"fmt"
	"net"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// listenSocket listens on the Unix socket path: in a directory of the
// agent's own that no one else may write (made 0755 if missing), replacing
// a socket a previous run left, never a file of another kind. The socket
// is mode 0660 with group when that group exists, 0600 otherwise.
func listenSocket(path, group string) (net.Listener, error) {
	if path == "" || !filepath.IsAbs(path) {
		return nil, fmt.Errorf("the local API's socket %q is not an absolute path", path)
	}
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("the local API's directory: %w", err)
	}
	st, err := os.Stat(dir)
	if err != nil {
		return nil, fmt.Errorf("the local API's directory: %w", err)
	}
	sys, _ := st.Sys().(*syscall.Stat_t)
	switch {
	case !st.IsDir():
		return nil, fmt.Errorf("the local API's directory %s is not a directory", dir)
	case sys != nil && int(sys.Uid) != os.Geteuid():
		return nil, fmt.Errorf("the local API's directory %s belongs to uid %d, not to the agent (uid %d): refusing to serve there", dir, sys.Uid, os.Geteuid())
	case st.Mode().Perm()&0o022 != 0:
		return nil, fmt.Errorf("the local API's directory %s can be written by others (mode %04o): refusing to serve there", dir, st.Mode().Perm())
	}
	if fi, err := os.Lstat(path); err == nil {
		if fi.Mode()&os.ModeSocket == 0 {
			return nil, fmt.Errorf("%s exists and is not a socket: the local API will not replace it", path)
		}
		if c, err := net.Dial("unix", path); err == nil {
			c.Close()
			return nil, fmt.Errorf("%s is served by another process (a second agent?): the local API will not take it over", path)
		}
		if err := os.Remove(path); err != nil {
			return nil, fmt.Errorf("removing the socket a previous run left: %w", err)
		}
	}
	ln, err := net.Listen("unix", path)
	if err != nil {
		return nil, fmt.Errorf("listening for the local API on %s: %w", path, err)
	}
	mode := os.FileMode(0o600)
	if g, err := user.LookupGroup(group); err == nil {
		if gid, err := strconv.Atoi(g.Gid); err == nil && os.Chown(path, -1, gid) == nil {
			mode = 0o660
		}
	}
	if err := os.Chmod(path, mode); err != nil {
		ln.Close()
		return nil, fmt.Errorf("the local API's socket %s: %w", path, err)
	}
	return ln, nil
}

// takenBy says, for a listen error that is EADDRINUSE, whose the port is
// (the uid of the listening socket, from /proc/net/tcp and tcp6) and what
// it costs; "" for any other error.
func takenBy(addr string, err error) string {
	if !errors.Is(err, syscall.EADDRINUSE) {
		return ""
	}
	who := "another process"
	if _, port, perr := net.SplitHostPort(addr); perr == nil {
		if uid, ok := listenerUID(port); ok {
			who = fmt.Sprintf("another process (uid %d)", uid)
			if u, err := user.LookupId(strconv.Itoa(uid)); err == nil {
				who = fmt.Sprintf("another process (uid %d, %s)", uid, u.Username)
			}
		}
	}
	return fmt.Sprintf(" (the port is held by %s: metrics and health are off here until it is free, retried with backoff; status and control are on the local API's socket)", who)
}

// listenerUID is the uid of a socket listening on TCP port, as the
// kernel's /proc/net/tcp and tcp6 list it.
func listenerUID(port string) (int, bool) {
	p, err := strconv.Atoi(port)
	if err != nil {
		return 0, false
	}
	want := fmt.Sprintf(":%04X", p)
	for _, file := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		f, err := os.Open(file)
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			fs := strings.Fields(sc.Text())
			// sl local_address rem_address st tx:rx tr:when retrnsmt uid ...
			if len(fs) > 7 && strings.HasSuffix(fs[1], want) && fs[3] == "0A" {
				if uid, err := strconv.Atoi(fs[7]); err == nil {
					f.Close()
					return uid, true
				}
			}
		}
		f.Close()
	}
	return 0, false
}
