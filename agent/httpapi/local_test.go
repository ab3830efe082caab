package httpapi

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/edgeheal/edgeheal/internal/testsupport"
	"github.com/edgeheal/edgeheal/localapi"
	"github.com/edgeheal/edgeheal/wire"
)

// The TCP listener, which anyone on the node could have bound first,
// serves metrics and health only; the status is the local API's.
func TestTheTCPListenerServesMetricsAndHealthOnly(t *testing.T) {
	opts := ServerOptions{State: &fakeAgent{ready: true}, Metrics: http.NotFoundHandler()}
	for _, tc := range []struct {
		srv  *Server
		path string
		want int
	}{
		{NewServer(opts), "/v1/status", http.StatusNotFound},
		{NewServer(opts), "/livez", http.StatusOK},
		{NewServer(opts), "/readyz", http.StatusOK},
		{NewLocal(opts), "/v1/status", http.StatusOK},
		{NewLocal(opts), "/livez", http.StatusOK},
	} {
		rec := httptest.NewRecorder()
		tc.srv.Handler().ServeHTTP(rec, httptest.NewRequest("GET", tc.path, nil))
		if rec.Code != tc.want {
			t.Errorf("%s on %s: %d, want %d", tc.path, tc.srv.Name(), rec.Code, tc.want)
		}
	}
}

// serveLocal runs the local API on a socket in a fresh directory and
// returns its path.
func serveLocal(t *testing.T, s *Server) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	testsupport.WaitFor(t, 5*time.Second, "the socket", func() bool { return s.Addr() != nil })
}

// The local API answers over its socket to localapi's client, with
// /v1/status in the wire format and any route added with Handle; the
// socket is the agent's alone (0600 without the edgeheal group).
func TestLocalAPIServesItsRoutesOnTheSocket(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "run", "edgeheal.sock")
	s := NewLocal(ServerOptions{Socket: sock, SocketGroup: "no-such-group-here", State: &fakeAgent{ready: true},
		Info: func() wire.NodeInfo { return wire.NodeInfo{Node: "edge-9"} }})
	s.Handle("GET /v1/extra", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprintln(w, `{"n":7}`) }))
	serveLocal(t, s)
	st, err := localapi.New(sock).Status(context.Background())
	if err != nil || st.Node != "edge-9" || !st.Ready {
		t.Fatalf("Status = %+v, %v", st, err)
	}
	var extra struct{ N int }
	if err := localapi.New(sock).Get(context.Background(), "/v1/extra", &extra); err != nil || extra.N != 7 {
		t.Errorf("a route added with Handle: %+v, %v", extra, err)
	}
	fi, err := os.Stat(sock)
	if err != nil || fi.Mode().Perm() != 0o600 || fi.Mode()&os.ModeSocket == 0 {
		t.Errorf("the socket: %v, %v; want a socket of mode 0600", fi.Mode(), err)
	}
}

// A socket path in a directory others can write is refused: a squatter
// could have put anything there.
func TestLocalAPIRefusesADirectoryOthersCanWrite(t *testing.T) {
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	s := NewLocal(ServerOptions{Socket: filepath.Join(dir, "edgeheal.sock"), State: &fakeAgent{}})
	err := s.Run(context.Background())
	if err == nil || !strings.Contains(err.Error(), "can be written by others (mode 0777)") {
		t.Errorf("Run = %v", err)
	}
}

// squatter runs the test binary as nobody (uid 65534), listening on what
// env says (TestHelperSquatter), until the test ends.
func squatter(t *testing.T, env string) {
	t.Helper()
	testsupport.RequireRoot(t, "a second user (nobody) to bind what the agent wants")
	dir := t.TempDir()
	for _, d := range []string{filepath.Dir(dir), dir} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	bin := filepath.Join(dir, "squatter")
	b, err := os.ReadFile(os.Args[0])
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bin, b, 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "-test.run=^TestHelperSquatter$", "-test.v")
	cmd.Env = append(os.Environ(), env)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		if strings.Contains(sc.Text(), "SQUATTING") {
			go func() {
				for sc.Scan() {
				}
			}()
			return
		}
	}
	t.Fatal("the squatter did not start")
}

// TestHelperSquatter is the squatter: it binds EDGEHEAL_SQUAT_TCP or
// EDGEHEAL_SQUAT_UNIX and answers every request with a forged status.
func TestHelperSquatter(t *testing.T) {
	var ln net.Listener
	var err error
	if a := os.Getenv("EDGEHEAL_SQUAT_TCP"); a != "" {
		ln, err = net.Listen("tcp", a)
	} else if p := os.Getenv("EDGEHEAL_SQUAT_UNIX"); p != "" {
		ln, err = net.Listen("unix", p)
		os.Chmod(p, 0o777)
	} else {
		return
	}
	if err != nil {
		t.Fatal(err)
	}
	fmt.Println("SQUATTING")
	http.Serve(ln, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintln(w, `{"v":1,"node":"\u001b]0;owned\u0007","state":"online","ready":true,"checks":[]}`)
	}))
}

// A second user that binds the metrics port first (at boot, or in the
// restart window) costs the agent its metrics and health listener alone:
// the error says the port is held, by whom, and where status is; the local
// API on the socket serves on.
func TestATakenPortIsAFailureOfTheTCPListenerAlone(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	squatter(t, "EDGEHEAL_SQUAT_TCP="+addr)

	sock := filepath.Join(t.TempDir(), "edgeheal.sock")
	opts := ServerOptions{Listen: addr, Socket: sock, State: &fakeAgent{ready: true}}
	err = NewServer(opts).Run(context.Background())
	if err == nil || !errors.Is(err, syscall.EADDRINUSE) || !strings.Contains(err.Error(), "held by another process (uid 65534") ||
		!strings.Contains(err.Error(), "status and control are on the local API's socket") {
		t.Errorf("the TCP listener on a taken port: %v", err)
	}
	serveLocal(t, NewLocal(opts))
	if st, err := localapi.New(sock).Status(context.Background()); err != nil || !st.Ready {
		t.Errorf("the local API with the port taken: %+v, %v", st, err)
	}
}

// A socket served by another user is not believed: the client checks
// who serves it and refuses, by uid.
func TestTheClientBelievesOnlyRoot(t *testing.T) {
	dir := t.TempDir()
	for _, d := range []string{filepath.Dir(dir), dir} {
		if err := os.Chmod(d, 0o777); err != nil {
			t.Fatal(err)
		}
	}
	sock := filepath.Join(dir, "edgeheal.sock")
	squatter(t, "EDGEHEAL_SQUAT_UNIX="+sock)
	_, err := localapi.New(sock).Status(context.Background())
	if !errors.Is(err, localapi.ErrUntrusted) || !strings.Contains(err.Error(), "served by uid 65534") {
		t.Errorf("Status from a socket nobody serves: %v, want refused naming uid 65534", err)
	}
}
