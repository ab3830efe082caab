package source_test

// The view against a real mosquitto (internal/testsupport/mosquitto) with
// TLS, client certificates, passwords and an ACL, fed by real agents: the
// agent's own MQTT publisher and outbox, in a child process (this test
// binary re-executed) so that it can be killed with kill -9.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"syscall"
	"testing"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"

	"github.com/edgeheal/edgeheal/agent/core"
	"github.com/edgeheal/edgeheal/agent/mqtt"
	"github.com/edgeheal/edgeheal/agent/outbox"
	"github.com/edgeheal/edgeheal/configs"
	"github.com/edgeheal/edgeheal/fleet"
	"github.com/edgeheal/edgeheal/fleet/source"
	"github.com/edgeheal/edgeheal/fleet/web"
	"github.com/edgeheal/edgeheal/internal/testsupport"
	"github.com/edgeheal/edgeheal/internal/testsupport/mosquitto"
	"github.com/edgeheal/edgeheal/wire"
)

const prefix = "edgeheal/v1"

// node is what the child agent runs.
type node struct {
	MQTT     configs.ReportMQTT
	Name     string
	StateDir string
	Events   []core.Event // appended to the outbox before the publisher starts
	Checks   []wire.Check
}

const nodeEnv = "EDGEHEAL_FLEET_TEST_NODE"

// TestHelperNode is not a test: it is the child agent of the tests below.
// It queues its events, prints READY, and publishes until SIGTERM.
func TestHelperNode(t *testing.T) {
	raw := os.Getenv(nodeEnv)
	if raw == "" {
		return
	}
	var n node
	if err := json.Unmarshal([]byte(raw), &n); err != nil {
		t.Fatal(err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	ob, err := outbox.Open(n.StateDir, outbox.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range n.Events {
		if err := ob.Append(e); err != nil {
			t.Fatal(err)
		}
	}
	p, err := mqtt.NewPublisher(mqtt.Options{Config: n.MQTT, Node: configs.Node{Name: n.Name, Site: "plant-7"}, Version: "test-1.2.3",
		Outbox: ob, Session: mqtt.OpenSession(n.StateDir, nil), Logger: slog.New(slog.NewTextHandler(os.Stderr, nil)),
		DialTimeout: 3 * time.Second, MinBackoff: 100 * time.Millisecond, MaxBackoff: 500 * time.Millisecond, AckTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	p.SetChecks(n.Checks)
	fmt.Println("READY")
	if err := p.Run(ctx); err != nil {
		t.Fatal(err)
	}
	ob.Close()
}

// proc is a running child agent; done is closed once it exited and was
// waited for (by the one goroutine that calls Wait).
type proc struct {
	cmd  *exec.Cmd
	done chan struct{}
}

// startNode runs a child agent and returns it once it is publishing.
func startNode(t *testing.T, n node) *proc {
	t.Helper()
	raw, _ := json.Marshal(n)
	cmd := testsupport.Command(os.Args[0], "-test.run=^TestHelperNode$", "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), nodeEnv+"="+string(raw))
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	ready := make(chan struct{})
	go func() {
		s := bufio.NewScanner(out)
		for s.Scan() {
			if strings.TrimSpace(s.Text()) == "READY" {
				close(ready)
			}
		}
		cmd.Wait()
		close(done)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill() // by its PID; a no-op once it exited
		<-done
		if t.Failed() {
			t.Logf("node %s stderr:\n%s", n.Name, stderr.String())
		}
	})
	select {
	case <-ready:
	case <-done:
		t.Fatalf("node %s exited at start:\n%s", n.Name, stderr.String())
	case <-time.After(20 * time.Second):
		t.Fatalf("node %s not ready within 20s", n.Name)
	}
	return &proc{cmd: cmd, done: done}
}

func kill9(t *testing.T, p *proc) {
	t.Helper()
	if err := syscall.Kill(p.cmd.Process.Pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-p.done
}

// cloud is a broker with TLS and client certificates, where each node may
// write only its own topics and "fleet" may read them all.
type cloud struct {
	*mosquitto.Broker
}

func newCloud(t *testing.T, users ...string) *cloud {
	t.Helper()
	pw := map[string]string{"fleet": "fleet-pw"}
	for _, u := range users {
		pw[u] = u + "-pw"
	}
	acl := "user fleet\ntopic read " + prefix + "/#\n\npattern readwrite " + prefix + "/%u/#\n"
	return &cloud{mosquitto.Start(t, mosquitto.Options{Users: pw, TLS: true, RequireCertificate: true, ACL: acl})}
}

// config is the report.mqtt of user: its certificate and password file.
func (c *cloud) config(t *testing.T, user string) configs.ReportMQTT {
	t.Helper()
	cert, key := c.PKI.Issue(t, user, false)
	return configs.ReportMQTT{Broker: c.TLSURL(), TopicPrefix: prefix, ClientID: "client-" + user, Username: user,
		PasswordFile: c.PasswordFile(t, user, user+"-pw"),
		TLS:          configs.TLS{CA: c.PKI.CAFile, Cert: cert, Key: key, ServerName: "broker.test"}}
}

// view is a fleet view in this process, with its page and metrics on a
// test HTTP server.
type view struct {
	store *fleet.Store
	http  *httptest.Server
}

func startView(t *testing.T, c *cloud, share, clientID string) *view {
	t.Helper()
	cfg := c.config(t, "fleet")
	cfg.ClientID = clientID
	store := fleet.NewStore(prefix)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- source.Run(ctx, source.Options{MQTT: withShare(cfg, share), Store: store,
			DialTimeout: 3 * time.Second, MaxBackoff: time.Second})
	}()
	srv := httptest.NewServer(web.Handler(web.Options{Store: store, Version: "test", Auth: fleet.Auth{Disabled: true}}))
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("source.Run returned %v after its context ended, want nil", err)
		}
		srv.Close()
	})
	testsupport.WaitFor(t, 15*time.Second, "the view connects", func() bool { return store.Health(time.Now()).Connected })
	return &view{store: store, http: srv}
}

func (v *view) get(t *testing.T, path string) string {
	t.Helper()
	resp, err := http.Get(v.http.URL + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 {
		t.Fatalf("GET %s: %s: %s", path, resp.Status, b)
	}
	return string(b)
}

// waitMetric waits until /metrics has line (name{labels} value).
func (v *view) waitMetric(t *testing.T, line string) {
	t.Helper()
	testsupport.WaitFor(t, 20*time.Second, "/metrics shows "+line, func() bool {
		return strings.Contains(v.get(t, "/metrics"), "\n"+line+"\n")
	})
}

func peerDown() []wire.Check {
	return []wire.Check{
		{Kind: "uplink", Target: "wwan0", State: "ok", Healthy: true},
		{Kind: "peer", Target: "wg0/AbCd", State: "healing", Healthy: false, Detail: "probe 10.8.0.1 failed 3 times"},
	}
}

func TestTheViewShowsANodesStatusAndEventsThenItsWillAfterKill9(t *testing.T) {
	c := newCloud(t, "edge-1")
	v := startView(t, c, "", "edgeheal-fleet-test")
	ts := time.Now().UTC().Add(-time.Minute)
	n := node{MQTT: c.config(t, "edge-1"), Name: "edge-1", StateDir: t.TempDir(), Checks: peerDown(), Events: []wire.Event{
		{ID: "ev-1", Time: ts, Kind: "incident", Target: "wg0/AbCd", Result: "opened", Summary: "wg0/AbCd dark: probe missed: timeout"},
		{ID: "ev-2", Time: ts.Add(time.Second), Kind: "action", Target: "wg0/AbCd", Action: "handshake", Result: "changed", Summary: "handshake on wg0/AbCd changed"},
	}}
	cmd := startNode(t, n)

	v.waitMetric(t, `edgeheal_fleet_node_state{node="edge-1",site="plant-7",state="degraded"} 1`)
	v.waitMetric(t, `edgeheal_fleet_node_open_incidents{kind="peer",node="edge-1",site="plant-7",state="open"} 1`)
	v.waitMetric(t, `edgeheal_fleet_events_total{kind="action"} 1`)
	v.waitMetric(t, `edgeheal_fleet_nodes{site="plant-7",state="degraded"} 1`)
	v.waitMetric(t, `edgeheal_fleet_connected 1`)
	page := v.get(t, "/")
	for _, want := range []string{`<a href="/node/edge-1">edge-1</a>`, `<span class="state degraded">degraded</span>`, "peer wg0/AbCd", "handshake wg0/AbCd: changed"} {
		if !strings.Contains(page, want) {
			t.Errorf("the fleet page lacks %q", want)
		}
	}
	detail := v.get(t, "/node/edge-1")
	incident, action := strings.Index(detail, "wg0/AbCd dark: probe missed"), strings.LastIndex(detail, "handshake on wg0/AbCd changed")
	if incident < 0 || action < 0 || incident > action {
		t.Errorf("the node page does not show the incident, then the action (at %d, %d)", incident, action)
	}

	kill9(t, cmd)
	v.waitMetric(t, `edgeheal_fleet_node_state{node="edge-1",site="plant-7",state="lost"} 1`)
	d, _ := v.store.Detail("edge-1", time.Now())
	if d.State != fleet.StateLost || len(d.Incidents) != 1 {
		t.Errorf("after kill -9: state %s, incidents %v; want lost, with the incident still open", d.State, d.Incidents)
	}
}

func TestStaleMessagesOfTheOldSessionAreIgnoredAfterARestart(t *testing.T) {
	c := newCloud(t, "edge-2")
	v := startView(t, c, "", "edgeheal-fleet-test")
	n := node{MQTT: c.config(t, "edge-2"), Name: "edge-2", StateDir: t.TempDir(),
		Checks: []wire.Check{{Kind: "uplink", Target: "wwan0", State: "ok", Healthy: true}},
		Events: []wire.Event{{ID: "ev-old", Time: time.Now().UTC(), Kind: "action", Target: "wwan0", Action: "offload-off", Result: "changed"}}}
	first := startNode(t, n)
	v.waitMetric(t, `edgeheal_fleet_node_state{node="edge-2",site="plant-7",state="online"} 1`)
	d, _ := v.store.Detail("edge-2", time.Now())
	old := d.Session
	kill9(t, first)
	v.waitMetric(t, `edgeheal_fleet_node_state{node="edge-2",site="plant-7",state="lost"} 1`)

	n.Events = nil
	startNode(t, n) // the same state directory: a higher session
	v.waitMetric(t, `edgeheal_fleet_node_state{node="edge-2",site="plant-7",state="online"} 1`)
	d, _ = v.store.Detail("edge-2", time.Now())
	if d.Session <= old {
		t.Fatalf("session after the restart %d, want above %d", d.Session, old)
	}

	// What a late delivery of the old session looks like: its Will, its
	// online status, and its event again. The node's own credentials, as
	// the broker would have them from the old connection.
	pub := publisher(t, c, "edge-2")
	stale, _ := json.Marshal(wire.Status{V: 1, State: "online", Session: old, TS: time.Now().UTC(), Node: "edge-2"})
	for _, m := range []struct {
		topic   string
		payload []byte
	}{
		{prefix + "/edge-2/status", []byte(fmt.Sprintf(`{"v":1,"state":"lost","session":%d}`, old))},
		{prefix + "/edge-2/status", stale},
		{prefix + "/edge-2/event", []byte(`{"v":1,"node":"edge-2","id":"ev-old","ts":"2026-11-29T12:00:00Z","kind":"action","target":"wwan0"}`)},
	} {
		if tok := pub.Publish(m.topic, 1, false, m.payload); !tok.WaitTimeout(5*time.Second) || tok.Error() != nil {
			t.Fatalf("publishing to %s: %v", m.topic, tok.Error())
		}
	}
	v.waitMetric(t, `edgeheal_fleet_messages_total{result="stale",type="will"} 1`)
	v.waitMetric(t, `edgeheal_fleet_messages_total{result="stale",type="status"} 1`)
	v.waitMetric(t, `edgeheal_fleet_messages_total{result="duplicate",type="event"} 1`)
	d, _ = v.store.Detail("edge-2", time.Now())
	if d.State != fleet.StateOnline || d.Session <= old {
		t.Errorf("after the stale messages: %s session %d, want online with the new session", d.State, d.Session)
	}
}

// A second instance with the same share group: each sees every status,
// and the events are split between them, none seen twice.
func TestTwoInstancesShareTheEvents(t *testing.T) {
	c := newCloud(t, "edge-3")
	a := startView(t, c, "fleet", "edgeheal-fleet-a")
	b := startView(t, c, "fleet", "edgeheal-fleet-b")
	var events []core.Event
	for i := range 20 {
		events = append(events, wire.Event{ID: fmt.Sprintf("ev-%02d", i), Time: time.Now().UTC(), Kind: "action", Target: "wwan0", Action: "offload-off", Result: "changed"})
	}
	startNode(t, node{MQTT: c.config(t, "edge-3"), Name: "edge-3", StateDir: t.TempDir(), Events: events,
		Checks: []wire.Check{{Kind: "uplink", Target: "wwan0", State: "ok", Healthy: true}}})
	total := func() (int, int) {
		ha, hb := a.store.Health(time.Now()), b.store.Health(time.Now())
		return int(ha.Events["action"]), int(hb.Events["action"])
	}
	testsupport.WaitFor(t, 20*time.Second, "20 events between the two views", func() bool { x, y := total(); return x+y == 20 })
	x, y := total()
	if x == 0 || y == 0 {
		t.Errorf("events split %d/%d: want both instances to get a share", x, y)
	}
	for _, v := range []*view{a, b} {
		v.waitMetric(t, `edgeheal_fleet_node_state{node="edge-3",site="plant-7",state="online"} 1`)
	}
}

// The statuses and histories come on a connection of the view's own
// (<client id>-history): the retained ones when the view subscribes, new
// ones as they are published. A view whose persistent session still
// subscribes to them on its first connection, as a view of before left
// it, reads each once.
func TestTheViewReadsEveryStatusAndHistoryOnceOnAConnectionOfItsOwn(t *testing.T) {
	c := newCloud(t, "edge-4")
	pub := publisher(t, c, "edge-4")
	publish := func(topic string, retain bool, v any) {
		t.Helper()
		b, _ := json.Marshal(v)
		if tok := pub.Publish(prefix+"/edge-4/"+topic, 1, retain, b); !tok.WaitTimeout(5*time.Second) || tok.Error() != nil {
			t.Fatalf("publishing to %s: %v", topic, tok.Error())
		}
	}
	first := time.Now().UTC().Add(-time.Hour).Truncate(time.Second)
	publish(wire.TopicHistory, true, wire.History{V: 1, Node: "edge-4", Site: "plant-7", TS: first, Since: first.Add(-time.Hour)})

	old := paho.NewClient(viewOptions(t, c, "edgeheal-fleet-test").SetCleanSession(false))
	if tok := old.Connect(); !tok.WaitTimeout(5*time.Second) || tok.Error() != nil {
		t.Fatalf("connecting as the view of before: %v", tok.Error())
	}
	got := make(chan struct{}, 1)
	// At QoS 0, so that the session keeps the subscriptions and nothing in
	// flight: at QoS 1 the acknowledgement, which paho writes after the
	// handler returned, can be lost to the Disconnect below, and the broker
	// then rightly hands the first history again when the view resumes the
	// session (seen under qemu). The subscriptions are what this test is
	// about.
	filters := map[string]byte{prefix + "/+/history": 0, prefix + "/+/status": 0}
	if tok := old.SubscribeMultiple(filters, func(paho.Client, paho.Message) { got <- struct{}{} }); !tok.WaitTimeout(5*time.Second) || tok.Error() != nil {
		t.Fatalf("subscribing as the view of before: %v", tok.Error())
	}
	select {
	case <-got:
	case <-time.After(10 * time.Second):
		t.Fatal("the view of before was not given the retained history within 10s")
	}
	old.Disconnect(250)

	v := startView(t, c, "", "edgeheal-fleet-test")
	v.waitMetric(t, `edgeheal_fleet_messages_total{result="applied",type="history"} 1`)
	publish(wire.TopicHistory, true, wire.History{V: 1, Node: "edge-4", Site: "plant-7", TS: first.Add(time.Hour), Since: first.Add(-time.Hour)})
	publish(wire.TopicStatus, true, wire.Status{V: 1, State: "online", Session: 1, TS: time.Now().UTC(), Node: "edge-4", Site: "plant-7"})
	// The first connection hands out in order what it has: once this
	// event is applied, a copy of the history or the status on it would
	// have come too.
	publish(wire.TopicEvent, false, wire.EventMessage{V: 1, Node: "edge-4", Session: 1, Seq: 1, Event: wire.Event{ID: "after", Time: time.Now().UTC(), Kind: wire.EventAction, Target: "wwan0"}})
	v.waitMetric(t, `edgeheal_fleet_messages_total{result="applied",type="event"} 1`)
	v.waitMetric(t, `edgeheal_fleet_messages_total{result="applied",type="history"} 2`)
	v.waitMetric(t, `edgeheal_fleet_messages_total{result="applied",type="status"} 1`)
	// (A history may be stale: two workers apply the histories, and the
	// older can come last.)
	if h := v.store.Health(time.Now()); h.Messages["history/duplicate"] != 0 || h.Messages["status/duplicate"] != 0 {
		t.Errorf("messages %v: a history or a status read twice", h.Messages)
	}
}

// A node's statuses are applied in the order it sent them, also when
// they come faster than the view applies them: each node's go to one of
// the workers that decode them.
func TestANodesStatusesAreAppliedInTheirOrder(t *testing.T) {
	c := newCloud(t, "edge-4")
	pub := publisher(t, c, "edge-4")
	v := startView(t, c, "", "edgeheal-fleet-order")
	v.waitMetric(t, `edgeheal_fleet_connected 1`)
	start := time.Now().UTC()
	const n = 200
	var toks []paho.Token
	for i := range n {
		state := []string{wire.StateOnline, wire.StateDegraded}[i%2]
		b, _ := json.Marshal(wire.Status{V: 1, State: state, Session: 1, TS: start.Add(time.Duration(i) * time.Millisecond), Node: "edge-4", Site: "plant-7"})
		toks = append(toks, pub.Publish(prefix+"/edge-4/status", 0, true, b))
	}
	for _, tok := range toks {
		if !tok.WaitTimeout(5*time.Second) || tok.Error() != nil {
			t.Fatalf("publishing: %v", tok.Error())
		}
	}
	v.waitMetric(t, fmt.Sprintf(`edgeheal_fleet_messages_total{result="applied",type="status"} %d`, n))
	if d, _ := v.store.Detail("edge-4", time.Now()); d.State != wire.StateDegraded || !d.StatusTS.Equal(start.Add((n-1)*time.Millisecond)) {
		t.Errorf("after %d statuses: %s of %v; want the last, degraded of %v", n, d.State, d.StatusTS, start.Add((n-1)*time.Millisecond))
	}
}

// viewOptions are the view's credentials as a paho client's, under id.
func viewOptions(t *testing.T, c *cloud, id string) *paho.ClientOptions {
	t.Helper()
	cfg := c.config(t, "fleet")
	tc, err := cfg.TLS.ClientConfig("127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	return paho.NewClientOptions().AddBroker(c.TLSURL()).SetClientID(id).SetProtocolVersion(4).
		SetUsername("fleet").SetPassword("fleet-pw").SetTLSConfig(tc).SetConnectTimeout(3 * time.Second)
}

func publisher(t *testing.T, c *cloud, user string) paho.Client {
	t.Helper()
	cfg := c.config(t, user)
	tc, err := cfg.TLS.ClientConfig("127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	o := paho.NewClientOptions().AddBroker(c.TLSURL()).SetClientID("late-" + user).SetProtocolVersion(4).
		SetUsername(user).SetPassword(user + "-pw").SetTLSConfig(tc).SetConnectTimeout(3 * time.Second)
	cl := paho.NewClient(o)
	if tok := cl.Connect(); !tok.WaitTimeout(5*time.Second) || tok.Error() != nil {
		t.Fatalf("connecting as %s: %v", user, tok.Error())
	}
	t.Cleanup(func() { cl.Disconnect(100) })
	return cl
}

// withShare is the fleet view's connection for the same user, in a
// shared subscription group (none: "").
func withShare(m configs.ReportMQTT, share string) fleet.MQTT {
	return fleet.MQTT{Broker: m.Broker, ClientID: m.ClientID, TopicPrefix: m.TopicPrefix, Username: m.Username,
		PasswordFile: m.PasswordFile, TLS: m.TLS, Share: share}
}

// Statuses are read at QoS 0, events at QoS 1: while the view is away the
// broker queues only the events, and the status a node had meanwhile comes
// again, retained, when the view subscribes at its return.
func TestWhatHappenedWhileTheViewWasAwayIsSeenAtItsReturn(t *testing.T) {
	c := newCloud(t, "edge-4")
	cfg := c.config(t, "fleet")
	cfg.ClientID = "edgeheal-fleet-away"
	first := fleet.NewStore(prefix)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- source.Run(ctx, source.Options{MQTT: withShare(cfg, ""), Store: first, DialTimeout: 3 * time.Second, MaxBackoff: time.Second})
	}()
	stopped := false
	stop := func() {
		if !stopped {
			stopped = true
			cancel()
			if err := <-done; err != nil {
				t.Errorf("source.Run returned %v after its context ended, want nil", err)
			}
		}
	}
	t.Cleanup(stop)
	cmd := startNode(t, node{MQTT: c.config(t, "edge-4"), Name: "edge-4", StateDir: t.TempDir(),
		Checks: []wire.Check{{Kind: "uplink", Target: "wwan0", State: "ok", Healthy: true}}})
	testsupport.WaitFor(t, 20*time.Second, "the first view sees edge-4 online", func() bool {
		d, ok := first.Detail("edge-4", time.Now())
		return ok && d.State == fleet.StateOnline
	})
	stop()

	kill9(t, cmd) // its Will, retained, while no view is there
	pub := publisher(t, c, "edge-4")
	ev := []byte(`{"v":1,"node":"edge-4","id":"ev-away","ts":"2026-11-29T12:00:00Z","kind":"action","target":"wwan0","action":"offload-off","result":"changed"}`)
	if tok := pub.Publish(prefix+"/edge-4/event", 1, false, ev); !tok.WaitTimeout(5*time.Second) || tok.Error() != nil {
		t.Fatalf("publishing the event: %v", tok.Error())
	}
	v := startView(t, c, "", cfg.ClientID) // the same session, a new store
	v.waitMetric(t, `edgeheal_fleet_node_state{node="edge-4",site="plant-7",state="lost"} 1`)
	v.waitMetric(t, `edgeheal_fleet_events_total{kind="action"} 1`)
}

// runView runs source.Run on a store of its own until the test ends.
func runView(t *testing.T, o source.Options) *fleet.Store {
	t.Helper()
	o.Store = fleet.NewStore(prefix)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- source.Run(ctx, o) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("source.Run returned %v after its context ended, want nil", err)
			}
		case <-time.After(10 * time.Second):
			t.Error("source.Run did not return within 10s of its context's end")
		}
	})
	return o.Store
}

// A broker that stops answering (paused: its sockets stay open) is seen
// within one and a half keep-alive periods; when it answers again the
// view reconnects and reads every history again.
func TestTheViewReconnectsAfterItsBrokerStoppedAnswering(t *testing.T) {
	c := newCloud(t, "edge-4")
	pub := publisher(t, c, "edge-4")
	b, _ := json.Marshal(wire.History{V: 1, Node: "edge-4", Site: "plant-7", TS: time.Now().UTC().Truncate(time.Second), Since: time.Now().UTC().Add(-time.Hour)})
	if tok := pub.Publish(prefix+"/edge-4/"+wire.TopicHistory, 1, true, b); !tok.WaitTimeout(5*time.Second) || tok.Error() != nil {
		t.Fatalf("publishing the history: %v", tok.Error())
	}
	cfg := c.config(t, "fleet")
	cfg.ClientID = "view-wedged"
	store := runView(t, source.Options{MQTT: withShare(cfg, ""), DialTimeout: 3 * time.Second, KeepAlive: time.Second, MaxBackoff: time.Second})
	testsupport.WaitFor(t, 10*time.Second, "the view has the history", func() bool {
		return store.Health(time.Now()).Messages["history/applied"] == 1
	})
	c.Pause()
	resumed := false
	defer func() {
		if !resumed {
			c.Resume()
		}
	}()
	testsupport.WaitFor(t, 10*time.Second, "the view sees its broker gone quiet", func() bool { return !store.Health(time.Now()).Connected })
	c.Resume()
	resumed = true
	testsupport.WaitFor(t, 20*time.Second, "the view reconnected and read the history again", func() bool {
		h := store.Health(time.Now())
		return h.Connected && h.Messages["history/duplicate"] >= 1
	})
}

// A node whose history is larger than the view reads costs the view that
// history only: it is named as invalid, every other node's is read once,
// and the histories' connection stays up. (Ending it would not do: the
// broker hands the same retained history out again at every subscribe.)
func TestAHistoryTooLargeIsNamedAndTheOthersAreReadOnce(t *testing.T) {
	c := newCloud(t, "edge-big", "edge-5")
	now := time.Now().UTC().Truncate(time.Second)
	for node, size := range map[string]int{"edge-big": fleet.MaxPayload + 100<<10, "edge-5": 0} {
		h := wire.History{V: 1, Node: node, TS: now, Since: now.Add(-time.Hour)}
		for len(h.Incidents)*200 < size {
			h.Incidents = append(h.Incidents, wire.Incident{ID: fmt.Sprint(len(h.Incidents)), Kind: "peer", Target: "wg0", Start: now, Diagnosis: strings.Repeat("d", 150)})
		}
		b, _ := json.Marshal(h)
		if tok := publisher(t, c, node).Publish(prefix+"/"+node+"/"+wire.TopicHistory, 1, true, b); !tok.WaitTimeout(5*time.Second) || tok.Error() != nil {
			t.Fatalf("publishing %s's history: %v", node, tok.Error())
		}
	}
	cfg := c.config(t, "fleet")
	cfg.ClientID = "view-large"
	store := runView(t, source.Options{MQTT: withShare(cfg, ""), DialTimeout: 3 * time.Second, KeepAlive: time.Second, MaxBackoff: time.Second})
	testsupport.WaitFor(t, 10*time.Second, "the view has read both histories", func() bool {
		h := store.Health(time.Now())
		return h.Messages["history/applied"] == 1 && h.Messages["history/invalid"] == 1
	})
	// A connection ended on the large one would be made again within the
	// backoff (a second): the other history would come again, a duplicate.
	time.Sleep(3 * time.Second)
	h := store.Health(time.Now())
	if !h.Connected || h.Messages["history/duplicate"] != 0 || h.Messages["history/invalid"] != 1 || !strings.Contains(h.LastError, "edge-big: a history of") {
		t.Errorf("connected %v, messages %v, last error %q; want connected, nothing read twice, edge-big's named", h.Connected, h.Messages, h.LastError)
	}
}
