// Package mosquitto runs the real MQTT broker of the tests: Debian's
// mosquitto (2.0.11 on Debian 12, 2026-11), one process per test, with a
// test PKI (a CA, a server certificate for 127.0.0.1 and broker.test,
// client certificates on demand, and an unrelated CA), passwords made with
// mosquitto_passwd and an optional ACL. It can run inside a network
// namespace. The broker is ended by its PID when the test ends.
//
// The config says `user root` because mosquitto drops privileges and would
// then fail to read the test's temporary files, and it has no pid_file for
// the same reason (docs/lab.md, "MQTT brokers").
package mosquitto

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/vishvananda/netns"
)

// Binary is where Debian's package installs the broker.
const Binary = "/usr/sbin/mosquitto"

const install = "apt-get install -y --no-install-recommends mosquitto mosquitto-clients"

// PKI is a test CA with certificates as PEM files in Dir.
type PKI struct {
	Dir     string
	CAFile  string // the CA every certificate here is signed by
	OtherCA string // an unrelated CA: verifying with it must fail

	mu     sync.Mutex
	ca     *x509.Certificate
	caKey  *ecdsa.PrivateKey
	serial int64
}

// NewPKI makes a CA (and an unrelated one) in dir.
func NewPKI(t testing.TB, dir string) *PKI {
	t.Helper()
	key, ca, caPEM := newCA(t, "edgeheal test CA")
	_, _, otherPEM := newCA(t, "edgeheal other CA")
	p := &PKI{Dir: dir, CAFile: filepath.Join(dir, "ca.pem"), OtherCA: filepath.Join(dir, "other-ca.pem"), ca: ca, caKey: key, serial: 1}
	writeFile(t, p.CAFile, caPEM)
	writeFile(t, p.OtherCA, otherPEM)
	return p
}

func newCA(t testing.TB, name string) (*ecdsa.PrivateKey, *x509.Certificate, string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return key, cert, string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}))
}

// Issue writes name.pem and name-key.pem signed by the CA. Server
// certificates are valid for 127.0.0.1 and broker.test; the others are
// client certificates.
func (p *PKI) Issue(t testing.TB, name string, server bool) (cert, key string) {
	t.Helper()
	p.mu.Lock()
	p.serial++
	serial := p.serial
	p.mu.Unlock()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(serial),
		Subject:      pkix.Name{CommonName: name},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	if server {
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
		tmpl.IPAddresses = []net.IP{net.IPv4(127, 0, 0, 1)}
		tmpl.DNSNames = []string{"broker.test"}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, p.ca, &k.PublicKey, p.caKey)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(k)
	if err != nil {
		t.Fatal(err)
	}
	cert = filepath.Join(p.Dir, name+".pem")
	key = filepath.Join(p.Dir, name+"-key.pem")
	writeFile(t, cert, string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})))
	writeFile(t, key, string(pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder})))
	return cert, key
}

// Options say how the broker listens and whom it lets in.
type Options struct {
	// Users and their passwords; none lets anyone in anonymously.
	Users map[string]string
	// Plain adds a plain listener on 127.0.0.1, on PlainPort (0: a free
	// port).
	Plain     bool
	PlainPort int
	// TLS adds a TLS listener on 127.0.0.1 with the PKI's server certificate;
	// RequireCertificate makes it ask clients for a certificate of the PKI.
	TLS, RequireCertificate bool
	// ACL is the content of an acl_file; empty: no ACL.
	ACL string
	// Persistence keeps retained messages and sessions across restarts.
	Persistence bool
	// Netns is a network namespace file to run the broker in; empty: the
	// test's own namespace.
	Netns string
	// Extra is more configuration, appended as it is (e.g.
	// "max_queued_messages 0\n").
	Extra string
	// OpenFiles, if set, raises the broker's open-file limit to this (or
	// to the hard limit, if that is lower), for tests with thousands of
	// clients: each client is a file descriptor.
	OpenFiles int
}

// Broker is one mosquitto owned by a test.
type Broker struct {
	PKI       *PKI
	Dir       string
	PlainAddr string // 127.0.0.1:port, "" without Options.Plain
	TLSAddr   string // 127.0.0.1:port, "" without Options.TLS

	t      testing.TB
	opts   Options
	conf   string
	cmd    *exec.Cmd
	exited chan struct{}
	logf   *os.File
}

// New configures a broker (it does not start it) and ends it when the test
// ends. A missing mosquitto fails the test: the test set-up installs it,
// so its absence is a broken machine, not a reason to skip.
func New(t testing.TB, opts Options) *Broker {
	t.Helper()
	if _, err := os.Stat(Binary); err != nil {
		t.Fatalf("mosquitto is not installed (%v): %s", err, install)
	}
	if !opts.Plain && !opts.TLS {
		opts.Plain = true
	}
	dir := t.TempDir()
	b := &Broker{PKI: NewPKI(t, dir), Dir: dir, t: t, opts: opts}
	var conf strings.Builder
	fmt.Fprintf(&conf, "# written by an edgeheal test\nuser root\nper_listener_settings false\nlog_dest stderr\nlog_type all\n")
	if len(opts.Users) == 0 {
		conf.WriteString("allow_anonymous true\n")
	} else {
		fmt.Fprintf(&conf, "allow_anonymous false\npassword_file %s\n", b.passwords(t))
	}
	if opts.ACL != "" {
		acl := filepath.Join(dir, "acl")
		writeFile(t, acl, opts.ACL)
		fmt.Fprintf(&conf, "acl_file %s\n", acl)
	}
	if opts.Persistence {
		data := filepath.Join(dir, "data")
		if err := os.MkdirAll(data, 0o700); err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(&conf, "persistence true\npersistence_location %s/\n", data)
	} else {
		conf.WriteString("persistence false\n")
	}
	if opts.Plain {
		b.PlainAddr = b.freeAddr(t)
		if opts.PlainPort != 0 {
			b.PlainAddr = net.JoinHostPort("127.0.0.1", strconv.Itoa(opts.PlainPort))
		}
		fmt.Fprintf(&conf, "listener %s 127.0.0.1\n", port(b.PlainAddr))
	}
	if opts.TLS {
		cert, key := b.PKI.Issue(t, "broker", true)
		b.TLSAddr = b.freeAddr(t)
		fmt.Fprintf(&conf, "listener %s 127.0.0.1\ncafile %s\ncertfile %s\nkeyfile %s\ntls_version tlsv1.2\n",
			port(b.TLSAddr), b.PKI.CAFile, cert, key)
		if opts.RequireCertificate {
			conf.WriteString("require_certificate true\n")
		}
	}
	conf.WriteString(opts.Extra)
	b.conf = filepath.Join(dir, "mosquitto.conf")
	writeFile(t, b.conf, conf.String())
	t.Cleanup(b.Stop)
	return b
}

// Start is New followed by Start.
func Start(t testing.TB, opts Options) *Broker {
	t.Helper()
	b := New(t, opts)
	b.Start()
	return b
}

func (b *Broker) passwords(t testing.TB) string {
	t.Helper()
	passwd, err := exec.LookPath("mosquitto_passwd")
	if err != nil {
		t.Fatalf("mosquitto_passwd is not installed: %s", install)
	}
	file := filepath.Join(b.Dir, "passwd")
	args := []string{"-c"}
	for u, pw := range b.opts.Users {
		if out, err := exec.Command(passwd, append(args, "-b", file, u, pw)...).CombinedOutput(); err != nil {
			t.Fatalf("mosquitto_passwd: %v: %s", err, out)
		}
		args = nil
	}
	return file
}

// PasswordFile writes password (with a line end, as operators do) to a
// file of its own and returns its path.
func (b *Broker) PasswordFile(t testing.TB, name, password string) string {
	t.Helper()
	f := filepath.Join(b.Dir, name+".password")
	writeFile(t, f, password+"\n")
	return f
}

// freeAddr returns a loopback address whose port was free a moment ago, in
// the broker's namespace.
func (b *Broker) freeAddr(t testing.TB) string {
	t.Helper()
	var addr string
	err := b.inNetns(func() error {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return err
		}
		addr = l.Addr().String()
		return l.Close()
	})
	if err != nil {
		t.Fatal(err)
	}
	return addr
}

// Start runs the broker and waits until every listener accepts.
func (b *Broker) Start() {
	b.t.Helper()
	if b.cmd != nil {
		b.t.Fatal("mosquitto already running")
	}
	logf, err := os.OpenFile(filepath.Join(b.Dir, "mosquitto.log"), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		b.t.Fatal(err)
	}
	args := []string{Binary, "-c", b.conf}
	if b.opts.Netns != "" {
		// nsenter execs mosquitto, so the PID is mosquitto's.
		args = append([]string{"nsenter", "--net=" + b.opts.Netns}, args...)
	}
	if n := b.openFiles(); n > 0 {
		// prlimit execs its command too.
		args = append([]string{"prlimit", fmt.Sprintf("--nofile=%d:%d", n, n)}, args...)
	}
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		b.t.Fatalf("starting mosquitto: %v", err)
	}
	b.cmd, b.logf, b.exited = cmd, logf, make(chan struct{})
	go func() { _ = cmd.Wait(); close(b.exited) }()
	for _, addr := range []string{b.PlainAddr, b.TLSAddr} {
		if addr != "" {
			b.waitListening(addr)
		}
	}
}

// openFiles is the open-file limit to give the broker: Options.OpenFiles,
// at most the hard limit; 0 leaves the inherited one.
func (b *Broker) openFiles() int {
	if b.opts.OpenFiles == 0 {
		return 0
	}
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return 0
	}
	return int(min(uint64(b.opts.OpenFiles), lim.Max))
}

func (b *Broker) waitListening(addr string) {
	b.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		err := b.inNetns(func() error {
			c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
			if err == nil {
				c.Close()
			}
			return err
		})
		if err == nil {
			return
		}
		select {
		case <-b.exited:
			b.t.Fatalf("mosquitto exited at start:\n%s", b.Log())
		default:
		}
		if time.Now().After(deadline) {
			b.t.Fatalf("mosquitto did not listen on %s within 10s:\n%s", addr, b.Log())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// PID is the running broker's process id (0 when it is not running).
func (b *Broker) PID() int {
	if b.cmd == nil || b.cmd.Process == nil {
		return 0
	}
	return b.cmd.Process.Pid
}

// Pause stops the broker by its PID (SIGSTOP): its connections stay
// open and it answers nothing, as a wedged broker does. Resume or Stop
// ends the pause.
func (b *Broker) Pause() { b.signal(syscall.SIGSTOP, "pausing") }

// Resume lets a paused broker go on (SIGCONT).
func (b *Broker) Resume() { b.signal(syscall.SIGCONT, "resuming") }

func (b *Broker) signal(sig syscall.Signal, what string) {
	b.t.Helper()
	if b.cmd == nil {
		b.t.Fatalf("%s mosquitto: it is not running", what)
	}
	if err := b.cmd.Process.Signal(sig); err != nil {
		b.t.Fatalf("%s mosquitto: %v", what, err)
	}
}

// Stop ends the broker by its PID (SIGTERM, so it saves its persistence
// file; SIGKILL after 5 s) and waits for it, paused or not. Safe to call
// twice.
func (b *Broker) Stop() {
	if b.cmd == nil {
		return
	}
	_ = b.cmd.Process.Signal(syscall.SIGCONT)
	_ = b.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-b.exited:
	case <-time.After(5 * time.Second):
		_ = b.cmd.Process.Kill()
		<-b.exited
	}
	b.logf.Close()
	b.cmd = nil
}

// PlainURL is tcp://PlainAddr; TLSURL is ssl://TLSAddr.
func (b *Broker) PlainURL() string { return "tcp://" + b.PlainAddr }

// TLSURL is ssl://TLSAddr.
func (b *Broker) TLSURL() string { return "ssl://" + b.TLSAddr }

// Log is what the broker wrote so far.
func (b *Broker) Log() string {
	out, _ := os.ReadFile(filepath.Join(b.Dir, "mosquitto.log"))
	return string(out)
}

// inNetns runs fn on a locked thread inside the broker's namespace (or
// where the test runs). A thread that cannot switch back stays locked, so
// it ends with its goroutine.
func (b *Broker) inNetns(fn func() error) error {
	if b.opts.Netns == "" {
		return fn()
	}
	done := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		orig, err := netns.Get()
		if err != nil {
			runtime.UnlockOSThread()
			done <- err
			return
		}
		defer orig.Close()
		target, err := netns.GetFromPath(b.opts.Netns)
		if err != nil {
			runtime.UnlockOSThread()
			done <- err
			return
		}
		defer target.Close()
		if err := netns.Set(target); err != nil {
			runtime.UnlockOSThread()
			done <- err
			return
		}
		ferr := fn()
		if err := netns.Set(orig); err != nil {
			done <- err
			return
		}
		runtime.UnlockOSThread()
		done <- ferr
	}()
	return <-done
}

func port(addr string) string {
	_, p, _ := net.SplitHostPort(addr)
	return p
}

func writeFile(t testing.TB, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}
