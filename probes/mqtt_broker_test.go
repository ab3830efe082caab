package probes

import (
	"context"
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
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/net/dns/dnsmessage"
)

// mosquittoPath is the Debian package's broker (mosquitto 2.0.11 here).
const mosquittoPath = "/usr/sbin/mosquitto"

// broker is a mosquitto started by a test.
type broker struct {
	addr    string // 127.0.0.1:port, plain
	tlsAddr string // 127.0.0.1:port, TLS with the certificates in certs
	certs   testCerts
	user    string
	passwd  string // path of a file holding the right password
	cmd     *exec.Cmd
}

// startMosquitto runs mosquitto on two random loopback ports (plain and
// TLS) with one user, and stops it (by PID) when the test ends. The config
// says `user root` because mosquitto drops privileges and would then fail to
// read the files of the temporary directory; it has no pid_file for the
// same reason.
func startMosquitto(t *testing.T) *broker { return startMosquittoIn(t, Netns{}) }

// startMosquittoIn is startMosquitto inside ns (through nsenter, which
// execs mosquitto, so the PID is mosquitto's).
func startMosquittoIn(t testing.TB, ns Netns) *broker {
	t.Helper()
	if _, err := os.Stat(mosquittoPath); err != nil {
		t.Fatalf("mosquitto is needed: apt-get install -y --no-install-recommends mosquitto (%v)", err)
	}
	dir := t.TempDir()
	b := &broker{user: "probe", certs: makeCerts(t, dir)}
	b.passwd = filepath.Join(dir, "password")
	writeFile(t, b.passwd, "right-password\n")
	pwdb := filepath.Join(dir, "passwd.db")
	if out, err := exec.Command("mosquitto_passwd", "-b", "-c", pwdb, b.user, "right-password").CombinedOutput(); err != nil {
		t.Fatalf("mosquitto_passwd: %v: %s", err, out)
	}
	plain, tlsPort := freePort(t), freePort(t)
	b.addr = fmt.Sprintf("127.0.0.1:%d", plain)
	b.tlsAddr = fmt.Sprintf("127.0.0.1:%d", tlsPort)
	conf := filepath.Join(dir, "mosquitto.conf")
	writeFile(t, conf, fmt.Sprintf(`user root
persistence false
log_dest stderr
allow_anonymous false
password_file %s
listener %d 127.0.0.1
listener %d 127.0.0.1
cafile %s
certfile %s
keyfile %s
`, pwdb, plain, tlsPort, b.certs.ca, b.certs.serverCert, b.certs.serverKey))
	log, err := os.Create(filepath.Join(dir, "mosquitto.log"))
	if err != nil {
		t.Fatal(err)
	}
	b.cmd = exec.Command(mosquittoPath, "-c", conf)
	if ns.Path != "" {
		b.cmd = exec.Command("nsenter", "--net="+ns.Path, mosquittoPath, "-c", conf)
	}
	b.cmd.Stdout, b.cmd.Stderr = log, log
	b.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := b.cmd.Start(); err != nil {
		t.Fatalf("starting mosquitto: %v", err)
	}
	t.Cleanup(func() { b.stop(); log.Close() })
	waitListening(t, ns, b.addr, func() string { out, _ := os.ReadFile(log.Name()); return string(out) })
	waitListening(t, ns, b.tlsAddr, func() string { out, _ := os.ReadFile(log.Name()); return string(out) })
	return b
}

// stop ends mosquitto by its PID and waits for it; safe to call twice.
func (b *broker) stop() {
	if b.cmd.Process == nil || b.cmd.ProcessState != nil {
		return
	}
	_ = b.cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan struct{})
	go func() { _ = b.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		_ = b.cmd.Process.Kill()
		<-done
	}
}

func waitListening(t testing.TB, ns Netns, addr string, logs func() string) {
	t.Helper()
	for i := 0; i < 100; i++ {
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		c, err := ns.DialContext(ctx, "tcp", addr)
		cancel()
		if err == nil {
			c.Close()
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("nothing listens on %s after 5 s; log:\n%s", addr, logs())
}

// freePort returns a loopback TCP port that was free a moment ago.
func freePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

func writeFile(t testing.TB, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}

// testCerts are PEM files: a CA, a server certificate for 127.0.0.1 and
// "broker.test" signed by it, and an unrelated second CA.
type testCerts struct {
	ca, serverCert, serverKey, otherCA string
}

func makeCerts(t testing.TB, dir string) testCerts {
	t.Helper()
	caKey, caCert, caPEM := newCA(t, "edgeheal test ca")
	_, _, otherPEM := newCA(t, "edgeheal other ca")
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(3),
		Subject:      pkix.Name{CommonName: "broker.test"},
		DNSNames:     []string{"broker.test"},
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1)},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	c := testCerts{
		ca:         filepath.Join(dir, "ca.pem"),
		serverCert: filepath.Join(dir, "server.pem"),
		serverKey:  filepath.Join(dir, "server.key"),
		otherCA:    filepath.Join(dir, "other-ca.pem"),
	}
	writeFile(t, c.ca, caPEM)
	writeFile(t, c.otherCA, otherPEM)
	writeFile(t, c.serverCert, string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})))
	writeFile(t, c.serverKey, string(pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER})))
	return c
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

// startDNS answers A queries on a loopback UDP port from names (fully
// qualified, lower case) and NXDOMAIN for everything else, until the test
// ends. It returns its address.
func startDNS(t *testing.T, ns Netns, names map[string][4]byte) string {
	t.Helper()
	var pc net.PacketConn
	err := ns.Do(func() (err error) { pc, err = net.ListenPacket("udp", "127.0.0.1:0"); return err })
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	t.Cleanup(func() { pc.Close(); <-done })
	go func() {
		defer close(done)
		buf := make([]byte, 1500)
		for {
			n, from, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			var p dnsmessage.Parser
			h, err := p.Start(buf[:n])
			if err != nil {
				continue
			}
			q, err := p.Question()
			if err != nil {
				continue
			}
			resp := dnsmessage.Message{
				Header:    dnsmessage.Header{ID: h.ID, Response: true, Authoritative: true, RecursionDesired: h.RecursionDesired, RecursionAvailable: true},
				Questions: []dnsmessage.Question{q},
			}
			ip, ok := names[strings.ToLower(q.Name.String())]
			switch {
			case !ok:
				resp.RCode = dnsmessage.RCodeNameError
			case q.Type == dnsmessage.TypeA:
				resp.Answers = []dnsmessage.Resource{{
					Header: dnsmessage.ResourceHeader{Name: q.Name, Type: dnsmessage.TypeA, Class: dnsmessage.ClassINET, TTL: 5},
					Body:   &dnsmessage.AResource{A: ip},
				}}
			}
			out, err := resp.Pack()
			if err != nil {
				continue
			}
			_, _ = pc.WriteTo(out, from)
		}
	}()
	return pc.LocalAddr().String()
}

// silentListener accepts TCP connections and never answers, like a broker
// behind a path that drops everything after the handshake. It returns its
// address.
func silentListener(t *testing.T, ns Netns) string {
	t.Helper()
	var l net.Listener
	err := ns.Do(func() (err error) { l, err = net.Listen("tcp", "127.0.0.1:0"); return err })
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	var conns []net.Conn
	go func() {
		defer close(done)
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			conns = append(conns, c)
		}
	}()
	t.Cleanup(func() {
		l.Close()
		<-done
		for _, c := range conns {
			c.Close()
		}
	})
	return l.Addr().String()
}
