// Package localapi is the client of the agent's local API: HTTP over the
// Unix socket the agent serves on its node (report.http.socket, by default
// DefaultSocket), which only root, and the members of the group the
// package creates, can open, as tailscaled, containerd and Docker do. The
// TCP listener (report.http.listen) serves metrics and health only:
// anything a process reads to act on (`edgeheal status`, edgeheal-kube's
// node condition and taint) comes over the socket.
//
// The client believes only an agent run by root or by the user running the
// client: the socket's peer credentials are checked on every connection,
// so a process that managed to bind the path (a stale socket in a
// directory that was writable, a test's path) is refused, by uid.
//
// The API is one route per resource under /v1/, each a GET answering JSON
// of package wire: /v1/status (wire.LocalStatus) and /v1/history
// (wire.History). A new route is a
// path constant here and a handler on the agent's local server
// (agent/httpapi); Get reads any of them.
package localapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"syscall"
	"time"

	"github.com/edgeheal/edgeheal/wire"
)

// DefaultSocket is where the packaged agent serves its local API
// (systemd's RuntimeDirectory=edgeheal).
const DefaultSocket = "/run/edgeheal/edgeheal.sock"

// Group is the group the package creates: its members may use the local
// API (the socket is root's and this group's, mode 0660).
const Group = "edgeheal"

// Routes of the local API.
const (
	StatusPath  = "/v1/status"  // wire.LocalStatus
	HistoryPath = "/v1/history" // wire.History: every incident the node keeps and every target
)

// MaxResponse bounds what the client reads of one answer.
const MaxResponse = 8 << 20

// ErrNoAgent matches (errors.Is) the error of a request when no agent
// listens on the socket: it is missing, or nothing accepts on it.
var ErrNoAgent = errors.New("no edgeheal agent is answering")

// ErrUntrusted matches (errors.Is) the error of a request whose socket is
// served by a process of another user than root or the client's own.
var ErrUntrusted = errors.New("not served by root")

// Client reads the local API on one socket.
type Client struct {
	socket string
	hc     *http.Client
}

// New returns a client of the agent serving on socket (DefaultSocket if
// empty).
func New(socket string) *Client {
	if socket == "" {
		socket = DefaultSocket
	}
	c := &Client{socket: socket}
	tr := &http.Transport{
		DialContext:           func(ctx context.Context, _, _ string) (net.Conn, error) { return c.dial(ctx) },
		MaxIdleConns:          1,
		IdleConnTimeout:       30 * time.Second,
		ResponseHeaderTimeout: 10 * time.Second,
		DisableCompression:    true,
	}
	c.hc = &http.Client{Transport: tr}
	return c
}

// Socket is the path the client connects to.
func (c *Client) Socket() string { return c.socket }

// dial connects to the socket and checks who serves it.
func (c *Client) dial(ctx context.Context) (net.Conn, error) {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "unix", c.socket)
	if err != nil {
		if errors.Is(err, syscall.ENOENT) || errors.Is(err, syscall.ECONNREFUSED) {
			return nil, fmt.Errorf("%w on %s: is the agent running? (systemctl status edgeheal; report.http.socket names the socket)", ErrNoAgent, c.socket)
		}
		return nil, err
	}
	if err := trust(conn.(*net.UnixConn), c.socket); err != nil {
		conn.Close()
		return nil, err
	}
	return conn, nil
}

// trust checks the peer credentials of conn: its server must run as root
// or as the client's own user.
func trust(conn *net.UnixConn, path string) error {
	rc, err := conn.SyscallConn()
	if err != nil {
		return err
	}
	var cred *syscall.Ucred
	var cerr error
	if err := rc.Control(func(fd uintptr) {
		cred, cerr = syscall.GetsockoptUcred(int(fd), syscall.SOL_SOCKET, syscall.SO_PEERCRED)
	}); err != nil {
		return err
	}
	if cerr != nil {
		return fmt.Errorf("reading who serves %s: %w", path, cerr)
	}
	if cred.Uid != 0 && int(cred.Uid) != os.Getuid() {
		return fmt.Errorf("%s is served by uid %d (pid %d), %w or by you: refusing to believe it", path, cred.Uid, cred.Pid, ErrUntrusted)
	}
	return nil
}

// Get reads the JSON route path into v. A status other than 200 is an
// error with the first line of the answer.
func (c *Client) Get(ctx context.Context, path string, v any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://edgeheal"+path, nil)
	if err != nil {
		return err
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) && (errors.Is(err, ErrNoAgent) || errors.Is(err, ErrUntrusted)) {
			return ue.Err // says it all: no "Get http://edgeheal/..." before it
		}
		return fmt.Errorf("reading %s on %s: %w", path, c.socket, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		first, _, _ := strings.Cut(strings.TrimSpace(string(b)), "\n")
		return fmt.Errorf("reading %s on %s: %s: %s", path, c.socket, resp.Status, first)
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, MaxResponse)).Decode(v); err != nil {
		return fmt.Errorf("decoding %s on %s: %w", path, c.socket, err)
	}
	return nil
}

// Status reads /v1/status.
func (c *Client) Status(ctx context.Context) (wire.LocalStatus, error) {
	var s wire.LocalStatus
	err := c.Get(ctx, StatusPath, &s)
	return s, err
}

// History reads /v1/history: the node's own account of its availability.
func (c *Client) History(ctx context.Context) (wire.History, error) {
	var h wire.History
	err := c.Get(ctx, HistoryPath, &h)
	return h, err
}
