package mqtt

// The publisher's tests run against the real mosquitto of
// internal/testsupport/mosquitto.

import (
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"

	"github.com/edgeheal/edgeheal/agent/outbox"
	"github.com/edgeheal/edgeheal/configs"
	"github.com/edgeheal/edgeheal/internal/testsupport/mosquitto"
)

const testPrefix = "edgeheal/v1"

// testBroker is the tests' mosquitto: TLS with client certificates
// required, the users given, and an ACL by which every user may write only
// under edgeheal/v1/<its username>/ and "watcher" may read everything.
type testBroker struct {
	*mosquitto.Broker
}

func newMosquitto(t testing.TB, users map[string]string) *testBroker {
	t.Helper()
	acl := "user watcher\ntopic read " + testPrefix + "/#\n\npattern readwrite " + testPrefix + "/%u/#\n"
	return &testBroker{mosquitto.New(t, mosquitto.Options{Users: users, TLS: true, RequireCertificate: true, ACL: acl, Persistence: true})}
}

func (m *testBroker) Addr() string { return m.TLSAddr }
func (m *testBroker) URL() string  { return m.TLSURL() }

// nodeConfig is the report.mqtt config of node, with its own client
// certificate and password file.
func (m *testBroker) nodeConfig(t testing.TB, node, password string) configs.ReportMQTT {
	t.Helper()
	cert, key := m.PKI.Issue(t, node, false)
	pwf := m.PasswordFile(t, node, password)
	return configs.ReportMQTT{
		Broker:       m.URL(),
		TopicPrefix:  testPrefix,
		Username:     node,
		PasswordFile: pwf,
		TLS:          configs.TLS{CA: m.PKI.CAFile, Cert: cert, Key: key, ServerName: "broker.test"},
		Reconnect:    fastReconnect,
	}
}

// proxy forwards TCP from its listener to target: what the client sends
// as it is, what the broker sends through back (given the connection's
// number, from 1), which returns when either side is done.
type proxy struct {
	ln    net.Listener
	conns atomic.Int32
	wg    sync.WaitGroup
}

func newProxy(t *testing.T, target string, back func(client, broker net.Conn, n int32)) *proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &proxy{ln: ln}
	p.wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			b, err := net.Dial("tcp", target)
			if err != nil {
				c.Close()
				continue
			}
			n := p.conns.Add(1)
			p.wg.Go(func() { io.Copy(b, c); b.Close(); c.Close() })
			p.wg.Go(func() { back(c, b, n); b.Close(); c.Close() })
		}
	})
	t.Cleanup(func() { ln.Close(); p.wg.Wait() })
	return p
}

// openOutbox opens an outbox in dir, closed when the test ends.
func openOutbox(t testing.TB, dir string) *outbox.Outbox {
	t.Helper()
	ob, err := outbox.Open(dir, outbox.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ob.Close() })
	return ob
}

// fastReconnect are reconnect limits for tests that are not about them:
// quick checks and short backoffs, no start delay.
var fastReconnect = configs.Reconnect{
	ProbeInterval: configs.Duration(200 * time.Millisecond),
	MinDelay:      configs.Duration(100 * time.Millisecond),
	MaxDelay:      configs.Duration(500 * time.Millisecond),
}

// watcher is the cloud side: a persistent-session subscriber to every
// status and event topic, which survives broker restarts.
type watcher struct {
	c      paho.Client
	status chan paho.Message
	events chan paho.Message
}

func (w *watcher) handle(_ paho.Client, msg paho.Message) {
	if strings.HasSuffix(msg.Topic(), "/event") {
		w.events <- msg
		return
	}
	w.status <- msg
}

func (m *testBroker) watch(t testing.TB, password string) *watcher {
	t.Helper()
	cert, key := m.PKI.Issue(t, "watcher", false)
	tc, err := configs.TLS{CA: m.PKI.CAFile, Cert: cert, Key: key, ServerName: "broker.test"}.ClientConfig("127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	return m.watchTLS(t, password, tc)
}

func (m *testBroker) watchTLS(t testing.TB, password string, tc *tls.Config) *watcher {
	t.Helper()
	return m.watchWith(t, password, tc, func(*paho.ClientOptions) {})
}

// watchWith is watchTLS with changes to the client's options.
func (m *testBroker) watchWith(t testing.TB, password string, tc *tls.Config, opt func(*paho.ClientOptions)) *watcher {
	t.Helper()
	w := &watcher{status: make(chan paho.Message, 1000), events: make(chan paho.Message, 10000)}
	o := paho.NewClientOptions().AddBroker(m.URL()).
		SetClientID(fmt.Sprintf("watcher-%d", time.Now().UnixNano())).
		SetUsername("watcher").SetPassword(password).
		SetTLSConfig(tc).SetProtocolVersion(4).
		SetCleanSession(false).SetAutoReconnect(true).SetMaxReconnectInterval(500 * time.Millisecond).
		// In order: the tests check the order events arrive in.
		SetConnectTimeout(5 * time.Second).SetOrderMatters(true)
	o.SetDefaultPublishHandler(w.handle)
	opt(o)
	w.c = paho.NewClient(o)
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
