// Package kubelab starts a real Kubernetes API server for tests: Debian's
// etcd (etcd-server) as its storage and a kube-apiserver built from the Go
// module proxy by scripts/build-kube-apiserver.sh (`make kube-apiserver`),
// cached in a fixed place keyed by version. Both listen on loopback ports
// of their own; the API server has a token file (an admin in
// system:masters), a service-account issuer and signing key, serving
// certificates from a CA of the lab's own (all made here in Go), and the
// Node and RBAC authorizers, as a K3s server has them.
//
// kubelab only touches what it made: its temporary directory and the two
// processes it started, ended by PID in t.Cleanup, also after a failure.
// How the API server was found to work (and kine not): docs/lab.md, "A
// real Kubernetes API server".
package kubelab

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/edgeheal/edgeheal/internal/testsupport"
	"github.com/vishvananda/netns"
	"k8s.io/client-go/rest"
)

// Version is the kube-apiserver the tests run; scripts/build-kube-apiserver.sh
// builds the same one by default (KUBE_VERSION).
const Version = "v1.37.2"

// BuildCommand builds and caches the API server; tests that need it skip
// with this command when it is absent.
const BuildCommand = "make kube-apiserver"

// Binary is where the API server of Version is cached: $KUBE_CACHE or
// /var/cache/edgeheal-lab, then kube-apiserver-<version>, exactly where
// scripts/build-kube-apiserver.sh puts it.
func Binary() string {
	dir := os.Getenv("KUBE_CACHE")
	if dir == "" {
		dir = "/var/cache/edgeheal-lab"
	}
	return filepath.Join(dir, "kube-apiserver-"+Version)
}

// AdminToken is the token of the lab's administrator (group system:masters).
const AdminToken = "edgeheal-lab-admin-token"

// Options say where the lab runs.
type Options struct {
	// Netns is a named network namespace (/var/run/netns/<name>, e.g. the
	// lab's edge: `ip netns exec` works) or the path of one
	// (/proc/<pid>/ns/net, e.g. a systemdlab's) to run etcd and the API
	// server in, on its loopback at the fixed ports 2379, 2380 and 6443 (a
	// K3s agent's kubeconfig points at its local load balancer on
	// 127.0.0.1 the same way); "" runs them on the host's loopback at free
	// ports.
	Netns string
}

// Lab is a running etcd and kube-apiserver.
type Lab struct {
	Dir    string // everything of the lab's lives here
	URL    string // https://127.0.0.1:<port>
	CAFile string // the CA of the API server's serving certificate (PEM)

	t       testing.TB
	netns   string
	etcd    *proc
	api     *proc
	apiArgs []string
}

type proc struct {
	name   string
	cmd    *exec.Cmd
	waited chan struct{}
	log    string
}

// Start starts etcd and the API server and waits until /readyz answers
// ok. It skips the test without root (the lab tests are root tests; the
// processes themselves would not need it), when etcd is not installed
// (apt-get install etcd-server) or when the API server is not built
// (BuildCommand), and fails it on any other problem.
func Start(t testing.TB) *Lab {
	t.Helper()
	return StartWith(t, Options{})
}

// StartWith is Start with options.
func StartWith(t testing.TB, o Options) *Lab {
	t.Helper()
	testsupport.RequireRoot(t, "a real etcd and kube-apiserver on loopback")
	if _, err := exec.LookPath("etcd"); err != nil {
		t.Skipf("etcd is not installed (apt-get install -y --no-install-recommends etcd-server, or make test-deps): %v", err)
	}
	bin := Binary()
	if _, err := os.Stat(bin); err != nil {
		t.Skipf("kube-apiserver %s is not built: run `%s` (about 5 minutes cold): %v", Version, BuildCommand, err)
	}
	dir, err := os.MkdirTemp("", "kubelab-")
	if err != nil {
		t.Fatal(err)
	}
	l := &Lab{Dir: dir, t: t, netns: o.Netns}
	t.Cleanup(l.cleanup)

	ports := []int{2379, 2380, 6443}
	if o.Netns == "" {
		ports = freePorts(t, 3)
	}
	start := time.Now()
	etcdURL := "http://127.0.0.1:" + strconv.Itoa(ports[0])
	l.etcd = l.start("etcd", "etcd", "--name", "kubelab", "--data-dir", filepath.Join(dir, "etcd"),
		"--listen-client-urls", etcdURL, "--advertise-client-urls", etcdURL,
		"--listen-peer-urls", "http://127.0.0.1:"+strconv.Itoa(ports[1]),
		"--initial-advertise-peer-urls", "http://127.0.0.1:"+strconv.Itoa(ports[1]),
		"--initial-cluster", "kubelab=http://127.0.0.1:"+strconv.Itoa(ports[1]))
	if err := l.writeSecrets(); err != nil {
		t.Fatal(err)
	}
	l.URL = "https://127.0.0.1:" + strconv.Itoa(ports[2])
	l.apiArgs = []string{
		"--etcd-servers=" + etcdURL,
		"--cert-dir=" + filepath.Join(dir, "certs"),
		"--tls-cert-file=" + filepath.Join(dir, "serving.crt"),
		"--tls-private-key-file=" + filepath.Join(dir, "serving.key"),
		// No reconciler: the advertised address is only what the
		// kubernetes Service would point at, and loopback is refused there.
		"--bind-address=127.0.0.1", "--advertise-address=198.51.100.1", "--endpoint-reconciler-type=none",
		"--secure-port=" + strconv.Itoa(ports[2]),
		"--service-cluster-ip-range=10.0.0.0/24",
		"--service-account-issuer=https://kubernetes.default.svc",
		"--service-account-key-file=" + filepath.Join(dir, "sa.pub"),
		"--service-account-signing-key-file=" + filepath.Join(dir, "sa.key"),
		"--token-auth-file=" + filepath.Join(dir, "tokens.csv"),
		"--authorization-mode=Node,RBAC",
		"--disable-admission-plugins=ServiceAccount",
	}
	if err := l.StartAPIServer(); err != nil {
		t.Fatal(err)
	}
	t.Logf("kubelab: etcd and kube-apiserver %s ready in %v at %s", Version, time.Since(start).Round(time.Millisecond), l.URL)
	return l
}

// StartAPIServer starts the API server (again, after StopAPIServer) with
// the same port, storage and keys, and waits until it is ready.
func (l *Lab) StartAPIServer() error {
	l.api = l.start("kube-apiserver", Binary(), l.apiArgs...)
	deadline := time.Now().Add(60 * time.Second)
	var last string
	for {
		code, body, err := l.Get("/readyz")
		if err == nil && code == http.StatusOK {
			return nil
		}
		last = fmt.Sprintf("%d %v %s", code, err, body)
		select {
		case <-l.api.waited:
			return fmt.Errorf("kube-apiserver exited at start; log:\n%s", tail(l.api.log))
		case <-l.etcd.waited:
			return fmt.Errorf("etcd exited; log:\n%s", tail(l.etcd.log))
		default:
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("kube-apiserver not ready after 60 s (last: %s); log:\n%s", last, tail(l.api.log))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// StopAPIServer ends the API server by its PID and waits for it; etcd
// keeps running, so StartAPIServer brings back the same cluster.
func (l *Lab) StopAPIServer() { l.stop(l.api) }

// Get asks the API server for path as the administrator.
func (l *Lab) Get(path string) (int, string, error) {
	ca, err := os.ReadFile(l.CAFile)
	if err != nil {
		return 0, "", err
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca)
	c := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}, DialContext: l.DialContext}}
	defer c.CloseIdleConnections()
	req, err := http.NewRequestWithContext(context.Background(), http.MethodGet, l.URL+path, nil)
	if err != nil {
		return 0, "", err
	}
	req.Header.Set("Authorization", "Bearer "+AdminToken)
	resp, err := c.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	var b strings.Builder
	buf := make([]byte, 4096)
	for b.Len() < 1<<16 {
		n, err := resp.Body.Read(buf)
		b.Write(buf[:n])
		if err != nil {
			break
		}
	}
	return resp.StatusCode, b.String(), nil
}

// DialContext dials addr from the lab's namespace (the host's without
// Options.Netns): the socket is made there, on a locked thread that is
// switched back before it is unlocked.
func (l *Lab) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	var d net.Dialer
	if l.netns == "" {
		return d.DialContext(ctx, network, addr)
	}
	get := netns.GetFromName
	if filepath.IsAbs(l.netns) {
		get = netns.GetFromPath
	}
	target, err := get(l.netns)
	if err != nil {
		return nil, err
	}
	defer target.Close()
	runtime.LockOSThread()
	orig, err := netns.Get()
	if err != nil {
		runtime.UnlockOSThread()
		return nil, err
	}
	defer orig.Close()
	if err := netns.Set(target); err != nil {
		runtime.UnlockOSThread()
		return nil, err
	}
	conn, err := d.DialContext(ctx, network, addr)
	if rerr := netns.Set(orig); rerr != nil {
		// Never unlock a thread left in a foreign namespace: it dies with
		// the goroutine instead.
		if conn != nil {
			conn.Close()
		}
		return nil, fmt.Errorf("switching back from %s: %w", l.netns, rerr)
	}
	runtime.UnlockOSThread()
	return conn, err
}

// AdminConfig is a client-go config of the administrator, dialling from
// the lab's namespace.
func (l *Lab) AdminConfig() *rest.Config {
	return &rest.Config{Host: l.URL, BearerToken: AdminToken,
		TLSClientConfig: rest.TLSClientConfig{CAFile: l.CAFile}, Dial: l.DialContext}
}

// Kubeconfig writes a kubeconfig for token (the server, its CA, the token)
// into the lab's directory and returns its path.
func (l *Lab) Kubeconfig(name, token string) string {
	l.t.Helper()
	cfg := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: kubelab
  cluster: {server: %q, certificate-authority: %q}
users:
- name: %s
  user: {token: %q}
contexts:
- name: kubelab
  context: {cluster: kubelab, user: %s}
current-context: kubelab
`, l.URL, l.CAFile, name, token, name)
	path := filepath.Join(l.Dir, name+".kubeconfig")
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		l.t.Fatal(err)
	}
	return path
}

// APILog is the API server's log so far (of its latest start).
func (l *Lab) APILog() string {
	b, _ := os.ReadFile(l.api.log)
	return string(b)
}

func (l *Lab) start(name, bin string, args ...string) *proc {
	l.t.Helper()
	p := &proc{name: name, waited: make(chan struct{}), log: filepath.Join(l.Dir, name+".log")}
	logf, err := os.OpenFile(p.log, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
	if err != nil {
		l.t.Fatal(err)
	}
	switch {
	case filepath.IsAbs(l.netns):
		args = append([]string{"--net=" + l.netns, bin}, args...)
		bin = "nsenter"
	case l.netns != "":
		args = append([]string{"netns", "exec", l.netns, bin}, args...)
		bin = "ip"
	}
	p.cmd = exec.Command(bin, args...)
	p.cmd.Stdout, p.cmd.Stderr = logf, logf
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := p.cmd.Start(); err != nil {
		logf.Close()
		l.t.Fatalf("starting %s: %v", name, err)
	}
	go func() { _ = p.cmd.Wait(); logf.Close(); close(p.waited) }()
	return p
}

// stop ends p by its PID: SIGTERM, then SIGKILL after 10 s.
func (l *Lab) stop(p *proc) {
	if p == nil || p.cmd.Process == nil {
		return
	}
	select {
	case <-p.waited:
		return
	default:
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.waited:
	case <-time.After(10 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.waited
	}
}

func (l *Lab) cleanup() {
	l.stop(l.api)
	l.stop(l.etcd)
	if l.t.Failed() && l.api != nil {
		l.t.Logf("kube-apiserver log (tail):\n%s", tail(l.api.log))
	}
	_ = os.RemoveAll(l.Dir)
}

// writeSecrets makes the lab's CA and serving certificate, the
// service-account signing key and the token file.
func (l *Lab) writeSecrets() error {
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	now := time.Now()
	caTmpl := &x509.Certificate{
		SerialNumber: serial(), Subject: pkix.Name{CommonName: "kubelab-ca"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return err
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		return err
	}
	srvKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	srvTmpl := &x509.Certificate{
		SerialNumber: serial(), Subject: pkix.Name{CommonName: "kube-apiserver"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
		DNSNames: []string{"localhost", "kubernetes", "kubernetes.default.svc"}, IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1), net.IPv4(10, 0, 0, 1)},
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	srvDER, err := x509.CreateCertificate(rand.Reader, srvTmpl, ca, &srvKey.PublicKey, caKey)
	if err != nil {
		return err
	}
	saKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	l.CAFile = filepath.Join(l.Dir, "ca.crt")
	files := map[string][]byte{
		"ca.crt":      pemBlock("CERTIFICATE", caDER),
		"serving.crt": pemBlock("CERTIFICATE", srvDER),
		"tokens.csv":  []byte(AdminToken + ",kubelab-admin,kubelab-admin,\"system:masters\"\n"),
	}
	for name, key := range map[string]*ecdsa.PrivateKey{"serving.key": srvKey, "sa.key": saKey} {
		der, err := x509.MarshalECPrivateKey(key)
		if err != nil {
			return err
		}
		files[name] = pemBlock("EC PRIVATE KEY", der)
	}
	pub, err := x509.MarshalPKIXPublicKey(&saKey.PublicKey)
	if err != nil {
		return err
	}
	files["sa.pub"] = pemBlock("PUBLIC KEY", pub)
	for name, b := range files {
		if err := os.WriteFile(filepath.Join(l.Dir, name), b, 0o600); err != nil {
			return err
		}
	}
	return nil
}

func pemBlock(typ string, der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der})
}

func serial() *big.Int {
	n, _ := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	return n
}

// freePorts returns n distinct loopback ports that were free a moment ago.
func freePorts(t testing.TB, n int) []int {
	t.Helper()
	var out []int
	var lns []net.Listener
	for range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		lns = append(lns, ln)
		out = append(out, ln.Addr().(*net.TCPAddr).Port)
	}
	for _, ln := range lns {
		ln.Close()
	}
	return out
}

// tail is the last 40 lines of the file at path.
func tail(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > 40 {
		lines = lines[len(lines)-40:]
	}
	return strings.Join(lines, "\n")
}

// RandomName is a name unique enough for one run: prefix + 6 hex digits.
func RandomName(prefix string) string {
	var b [3]byte
	_, _ = rand.Read(b[:])
	return prefix + hex.EncodeToString(b[:])
}
