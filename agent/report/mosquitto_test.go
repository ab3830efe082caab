package report

// A real mosquitto (the Debian package) for the publisher's tests: TLS with
// certificates made here, a password file made with mosquitto_passwd, and
// an ACL that lets each node write only under its own topic. Tested with
// mosquitto 2.0.11 (Debian 12), 2026-11.

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	mqtt "github.com/eclipse/paho.mqtt.golang"

	"github.com/edgeheal/edgeheal/configs"
)

const testPrefix = "edgeheal/v1"

// mosquittoBinary finds mosquitto or fails the test: CI installs it, so a
// missing broker is a broken setup, not a reason to skip.
func mosquittoBinary(t *testing.T) (broker, passwd string) {
	t.Helper()
	broker = "/usr/sbin/mosquitto"
	if _, err := os.Stat(broker); err != nil {
		p, lerr := exec.LookPath("mosquitto")
		if lerr != nil {
			t.Fatalf("mosquitto is not installed (needed by the MQTT tests): apt-get install -y --no-install-recommends mosquitto mosquitto-clients")
		}
		broker = p
	}
	passwd, err := exec.LookPath("mosquitto_passwd")
	if err != nil {
		t.Fatalf("mosquitto_passwd is not installed: apt-get install -y --no-install-recommends mosquitto")
	}
	return broker, passwd
}

// testPKI is a CA with a server certificate for 127.0.0.1 and client
// certificates, as PEM files in a directory.
type testPKI struct {
	dir    string
	ca     *x509.Certificate
	caKey  *ecdsa.PrivateKey
	CAFile string
	serial int64
	mu     sync.Mutex
}

func newPKI(t *testing.T, dir string) *testPKI {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "edgeheal test CA"},
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
	ca, _ := x509.ParseCertificate(der)
	p := &testPKI{dir: dir, ca: ca, caKey: key, CAFile: filepath.Join(dir, "ca.pem"), serial: 1}
	writePEM(t, p.CAFile, "CERTIFICATE", der)
	return p
}

// issue writes name.pem and name-key.pem; server certificates are valid for
// 127.0.0.1 and broker.test.
func (p *testPKI) issue(t *testing.T, name string, server bool) (cert, key string) {
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
	cert = filepath.Join(p.dir, name+".pem")
	key = filepath.Join(p.dir, name+"-key.pem")
	writePEM(t, cert, "CERTIFICATE", der)
	writePEM(t, key, "EC PRIVATE KEY", kder)
	return cert, key
}

func writePEM(t *testing.T, path, typ string, der []byte) {
	t.Helper()
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
}

// mosquitto is one broker process owned by a test.
type mosquitto struct {
	t      *testing.T
	bin    string
	dir    string
	conf   string
	Port   int
	PKI    *testPKI
	cmd    *exec.Cmd
	exited chan struct{}
	logf   *os.File
}

// newMosquitto configures (does not start) a broker with TLS (client
// certificates required), the users and passwords given, and an ACL: every
// user may write only edgeheal/v1/<its username>/#, and "watcher" may read
// everything under edgeheal/v1.
func newMosquitto(t *testing.T, users map[string]string) *mosquitto {
	t.Helper()
	bin, passwd := mosquittoBinary(t)
	dir := t.TempDir()
	m := &mosquitto{t: t, bin: bin, dir: dir, Port: freePort(t), PKI: newPKI(t, dir)}
	cert, key := m.PKI.issue(t, "broker", true)
	pwfile := filepath.Join(dir, "passwd")
	first := true
	for u, pw := range users {
		args := []string{"-b", pwfile, u, pw}
		if first {
			args = []string{"-c", "-b", pwfile, u, pw}
			first = false
		}
		if out, err := exec.Command(passwd, args...).CombinedOutput(); err != nil {
			t.Fatalf("mosquitto_passwd: %v: %s", err, out)
		}
	}
	acl := filepath.Join(dir, "acl")
	aclText := "user watcher\ntopic read " + testPrefix + "/#\n\npattern readwrite " + testPrefix + "/%u/#\n"
	if err := os.WriteFile(acl, []byte(aclText), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(dir, "data"), 0o700); err != nil {
		t.Fatal(err)
	}
	m.conf = filepath.Join(dir, "mosquitto.conf")
	conf := fmt.Sprintf(`# written by the edgeheal report tests
user root
per_listener_settings false
allow_anonymous false
password_file %s
acl_file %s
persistence true
persistence_location %s/
log_dest stderr
log_type all
listener %d 127.0.0.1
cafile %s
certfile %s
keyfile %s
require_certificate true
tls_version tlsv1.2
`, pwfile, acl, filepath.Join(dir, "data"), m.Port, m.PKI.CAFile, cert, key)
	if err := os.WriteFile(m.conf, []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.Stop)
	return m
}

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// Start runs the broker and waits until it accepts connections.
func (m *mosquitto) Start() {
	m.t.Helper()
	if m.cmd != nil {
		m.t.Fatal("mosquitto already running")
	}
	logf, err := os.OpenFile(filepath.Join(m.dir, "mosquitto.log"), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		m.t.Fatal(err)
	}
	cmd := exec.Command(m.bin, "-c", m.conf)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		m.t.Fatalf("starting mosquitto: %v", err)
	}
	m.cmd, m.logf, m.exited = cmd, logf, make(chan struct{})
	go func() { cmd.Wait(); close(m.exited) }()
	deadline := time.Now().Add(10 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", m.Addr(), 200*time.Millisecond)
		if err == nil {
			c.Close()
			return
		}
		select {
		case <-m.exited:
			m.t.Fatalf("mosquitto exited at start:\n%s", m.Log())
		default:
		}
		if time.Now().After(deadline) {
			m.t.Fatalf("mosquitto did not listen on %s within 10s:\n%s", m.Addr(), m.Log())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Stop ends the broker by its PID (SIGTERM, so it saves its persistence
// file; SIGKILL after 5 s) and waits for it.
func (m *mosquitto) Stop() {
	if m.cmd == nil {
		return
	}
	m.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-m.exited:
	case <-time.After(5 * time.Second):
		m.cmd.Process.Kill()
		<-m.exited
	}
	m.logf.Close()
	m.cmd = nil
}

func (m *mosquitto) Addr() string { return "127.0.0.1:" + strconv.Itoa(m.Port) }
func (m *mosquitto) URL() string  { return "ssl://" + m.Addr() }
func (m *mosquitto) Log() string {
	b, _ := os.ReadFile(filepath.Join(m.dir, "mosquitto.log"))
	return string(b)
}

// nodeConfig is the report.mqtt config of node, with its own client
// certificate and password file.
func (m *mosquitto) nodeConfig(t *testing.T, node, password string) configs.ReportMQTT {
	t.Helper()
	cert, key := m.PKI.issue(t, node, false)
	pwf := filepath.Join(m.dir, node+".password")
	if err := os.WriteFile(pwf, []byte(password+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return configs.ReportMQTT{
		Broker:       m.URL(),
		TopicPrefix:  testPrefix,
		Username:     node,
		PasswordFile: pwf,
		TLS:          configs.TLS{CA: m.PKI.CAFile, Cert: cert, Key: key, ServerName: "broker.test"},
	}
}

// watcher is the cloud side: a persistent-session subscriber to every
// status and event topic, which survives broker restarts.
type watcher struct {
	c      mqtt.Client
	status chan mqtt.Message
	events chan mqtt.Message
}

func (w *watcher) handle(_ mqtt.Client, msg mqtt.Message) {
	if strings.HasSuffix(msg.Topic(), "/event") {
		w.events <- msg
		return
	}
	w.status <- msg
}

func (m *mosquitto) watch(t *testing.T, password string) *watcher {
	t.Helper()
	cert, key := m.PKI.issue(t, "watcher", false)
	tc, err := tlsConfig(configs.TLS{CA: m.PKI.CAFile, Cert: cert, Key: key, ServerName: "broker.test"})
	if err != nil {
		t.Fatal(err)
	}
	return m.watchTLS(t, password, tc)
}

func (m *mosquitto) watchTLS(t *testing.T, password string, tc *tls.Config) *watcher {
	t.Helper()
	w := &watcher{status: make(chan mqtt.Message, 1000), events: make(chan mqtt.Message, 10000)}
	o := mqtt.NewClientOptions().AddBroker(m.URL()).
		SetClientID(fmt.Sprintf("watcher-%d", time.Now().UnixNano())).
		SetUsername("watcher").SetPassword(password).
		SetTLSConfig(tc).SetProtocolVersion(4).
		SetCleanSession(false).SetAutoReconnect(true).SetMaxReconnectInterval(500 * time.Millisecond).
		SetConnectTimeout(5 * time.Second).SetOrderMatters(false)
	o.SetDefaultPublishHandler(w.handle)
	w.c = mqtt.NewClient(o)
	if tok := w.c.Connect(); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		t.Fatalf("watcher connect: %v\n%s", tok.Error(), m.Log())
	}
	tok := w.c.SubscribeMultiple(map[string]byte{testPrefix + "/+/status": 1, testPrefix + "/+/event": 1},
		w.handle)
	if !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		t.Fatalf("watcher subscribe: %v", tok.Error())
	}
	t.Cleanup(func() { w.c.Disconnect(100) })
	return w
}

// nextStatus returns the next status message on topic that satisfies ok,
// within 20 s.
func (w *watcher) nextStatus(t *testing.T, topic string, ok func(m map[string]any) bool) map[string]any {
	t.Helper()
	deadline := time.After(20 * time.Second)
	for {
		select {
		case msg := <-w.status:
			if msg.Topic() != topic {
				continue
			}
			var m map[string]any
			if err := json.Unmarshal(msg.Payload(), &m); err != nil {
				t.Fatalf("payload on %s is not JSON: %q", topic, msg.Payload())
			}
			if ok(m) {
				return m
			}
		case <-deadline:
			t.Fatalf("no matching message on %s within 20s", topic)
		}
	}
}
