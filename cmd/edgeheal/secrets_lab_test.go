package main

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	mqtt "github.com/eclipse/paho.mqtt.golang"

	"github.com/edgeheal/edgeheal/configs"
	"github.com/edgeheal/edgeheal/internal/testsupport"
	"github.com/edgeheal/edgeheal/internal/testsupport/mosquitto"
	"github.com/edgeheal/edgeheal/localapi"
)

// The daemon, reporting over TLS with a client key and a password, and
// probing a workload's broker with the workload's own (here wrong)
// password until an incident opens, never shows a secret: the log (at
// debug level), /v1/status, /metrics, the evidence bundles and every MQTT
// payload are searched for both passwords and for the client key's
// material, and hold none of them.
func TestLabDaemonNeverShowsItsSecrets(t *testing.T) {
	testsupport.RequireRoot(t, "the workload probe enters a network namespace")
	const reportPassword, workloadPassword = "rep0rt-Pa55word-x7", "w0rkl0ad-Pa55word-q9"
	b := mosquitto.Start(t, mosquitto.Options{
		Users: map[string]string{"node-s": reportPassword, "telemetry": "the-right-one", "watcher": "pw-w"},
		Plain: true, TLS: true, RequireCertificate: true,
		ACL: "user watcher\ntopic read edgeheal/v1/#\n\npattern readwrite edgeheal/v1/%u/#\n",
	})
	dir := t.TempDir()
	cert, key := b.PKI.Issue(t, "node-s", false)
	reportPW := filepath.Join(dir, "report.password")
	workloadPW := filepath.Join(dir, "workload.password")
	writeSecret(t, reportPW, reportPassword+"\n")
	writeSecret(t, workloadPW, workloadPassword+"\n")
	listen := freeLoopback(t)
	state := filepath.Join(dir, "state")
	cfg := filepath.Join(dir, "config.yaml")
	writeFile(t, cfg, fmt.Sprintf(`version: 1
node: {name: node-s}
interval: 200ms
workloads:
  - name: telemetry
    pid: %d
    interval: 500ms
    misses: 2
    mqtt: {broker: "%s", timeout: 400ms, username: telemetry, password_file: %s}
report:
  mqtt:
    broker: "%s"
    username: node-s
    password_file: %s
    tls: {ca: %s, cert: %s, key: %s, server_name: broker.test}
  http: {listen: "%s", socket: %s/edgeheal.sock}
  state_dir: %s
`, os.Getpid(), b.PlainURL(), workloadPW, b.TLSURL(), reportPW, b.PKI.CAFile, cert, key, listen, state, state))

	payloads := cloudPayloads(t, b)
	bin := buildBinary(t)
	d := startDaemon(t, bin, "--config", cfg, "--state-dir", state, "--log-level", "debug")
	var logMu sync.Mutex
	var logs strings.Builder
	logsDone := make(chan struct{})
	go func() {
		defer close(logsDone)
		for l := range d.lines {
			logMu.Lock()
			logs.WriteString(l + "\n")
			logMu.Unlock()
		}
	}()
	testsupport.WaitFor(t, 60*time.Second, "the workload's incident at the cloud", func() bool {
		return strings.Contains(payloads.text(), `"kind":"incident","target":"telemetry"`)
	})
	status := socketGet(t, filepath.Join(state, "edgeheal.sock"), localapi.StatusPath)
	metrics := httpGet(t, "http://"+listen+"/metrics")
	bundles, _ := filepath.Glob(filepath.Join(state, "evidence", "*.json"))
	var evidence strings.Builder
	for _, f := range bundles {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		evidence.Write(b)
	}
	if err := syscall.Kill(d.cmd.Process.Pid, syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	<-logsDone

	sources := map[string]string{"the log": logs.String(), "/v1/status": status, "/metrics": metrics,
		"the evidence bundles": evidence.String(), "the MQTT payloads": payloads.text()}
	for what, text := range sources {
		if len(text) < 100 {
			t.Errorf("%s holds only %d bytes: nothing was searched", what, len(text))
		}
	}
	if len(bundles) == 0 || !strings.Contains(status, `"mqtt"`) || !strings.Contains(metrics, "edgeheal_") {
		t.Fatalf("%d bundles; status %q...; the test saw too little", len(bundles), status[:min(len(status), 200)])
	}
	secrets := append([]string{reportPassword, workloadPassword}, keyMaterial(t, key)...)
	for what, text := range sources {
		for _, s := range secrets {
			if strings.Contains(text, s) {
				t.Errorf("%s shows the secret %q", what, s)
			}
		}
	}
}

func writeSecret(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}

// keyMaterial is the base64 lines of a PEM key file.
func keyMaterial(t *testing.T, path string) []string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, l := range strings.Split(string(b), "\n") {
		if l != "" && !strings.HasPrefix(l, "-----") {
			out = append(out, l)
		}
	}
	if len(out) == 0 {
		t.Fatalf("no key material in %s", path)
	}
	return out
}

func freeLoopback(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// socketGet is the raw answer of a local API route.
func socketGet(t *testing.T, sock, path string) string {
	t.Helper()
	var raw json.RawMessage
	if err := localapi.New(sock).Get(context.Background(), path, &raw); err != nil {
		t.Fatal(err)
	}
	return string(raw)
}

func httpGet(t *testing.T, url string) string {
	t.Helper()
	var body []byte
	testsupport.WaitFor(t, 10*time.Second, "GET "+url, func() bool {
		resp, err := http.Get(url)
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		body, err = io.ReadAll(resp.Body)
		return err == nil
	})
	return string(body)
}

// payloadLog is every MQTT payload the cloud received.
type payloadLog struct {
	mu sync.Mutex
	b  strings.Builder
}

func (p *payloadLog) text() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.b.String()
}

// cloudPayloads subscribes, as the cloud does, to everything under
// edgeheal/v1/ and keeps every payload.
func cloudPayloads(t *testing.T, b *mosquitto.Broker) *payloadLog {
	t.Helper()
	cert, key := b.PKI.Issue(t, "watcher", false)
	tc, err := configs.TLS{CA: b.PKI.CAFile, Cert: cert, Key: key, ServerName: "broker.test"}.ClientConfig("127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	return subscribeAll(t, b.TLSURL(), tc)
}

func subscribeAll(t *testing.T, url string, tc *tls.Config) *payloadLog {
	t.Helper()
	p := &payloadLog{}
	o := mqtt.NewClientOptions().AddBroker(url).SetClientID(fmt.Sprintf("cloud-%d", time.Now().UnixNano())).
		SetUsername("watcher").SetPassword("pw-w").SetTLSConfig(tc).SetProtocolVersion(4).
		SetConnectTimeout(5 * time.Second)
	c := mqtt.NewClient(o)
	if tok := c.Connect(); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		t.Fatalf("cloud subscriber: %v", tok.Error())
	}
	tok := c.Subscribe("edgeheal/v1/#", 1, func(_ mqtt.Client, m mqtt.Message) {
		p.mu.Lock()
		p.b.WriteString(m.Topic() + " " + string(m.Payload()) + "\n")
		p.mu.Unlock()
	})
	if !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		t.Fatalf("cloud subscribe: %v", tok.Error())
	}
	t.Cleanup(func() { c.Disconnect(100) })
	return p
}
