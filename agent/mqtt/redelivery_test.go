package mqtt

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"

	"github.com/edgeheal/edgeheal/agent/core"
	"github.com/edgeheal/edgeheal/configs"
	"github.com/edgeheal/edgeheal/internal/testsupport"
	"github.com/edgeheal/edgeheal/internal/testsupport/mosquitto"
	"github.com/edgeheal/edgeheal/probes"
	"github.com/edgeheal/edgeheal/wire"
)

// arrival is one event message as the cloud received it.
type arrival struct {
	msg wire.EventMessage
	at  time.Time
}

// nextEvents reads event messages until every id in want arrived (or 30 s
// passed) and a quiet 300 ms followed, and returns them in arrival order.
func (w *watcher) nextEvents(t testing.TB, want []string) []arrival {
	t.Helper()
	missing := map[string]bool{}
	for _, id := range want {
		missing[id] = true
	}
	var got []arrival
	deadline := time.After(30 * time.Second)
	for len(missing) > 0 {
		select {
		case msg := <-w.events:
			var e wire.EventMessage
			if err := json.Unmarshal(msg.Payload(), &e); err != nil {
				t.Fatalf("event payload: %v: %q", err, msg.Payload())
			}
			got = append(got, arrival{e, time.Now()})
			delete(missing, e.ID)
		case <-deadline:
			t.Fatalf("%d of %d events did not arrive within 30s; got %d messages", len(missing), len(want), len(got))
		}
	}
	for {
		select {
		case msg := <-w.events:
			var e wire.EventMessage
			json.Unmarshal(msg.Payload(), &e)
			got = append(got, arrival{e, time.Now()})
		case <-time.After(300 * time.Millisecond):
			return got
		}
	}
}

// firstArrivals keeps the first arrival of every id, in arrival order:
// what a consumer that deduplicates by id sees.
func firstArrivals(got []arrival) []arrival {
	seen := map[string]bool{}
	var out []arrival
	for _, a := range got {
		if !seen[a.msg.ID] {
			seen[a.msg.ID] = true
			out = append(out, a)
		}
	}
	return out
}

// checkInOrder fails t unless the first arrivals are exactly want, in that
// order, with sequence numbers that grow.
func checkInOrder(t *testing.T, got []arrival, want []string) {
	t.Helper()
	first := firstArrivals(got)
	var ids []string
	for i, a := range first {
		ids = append(ids, a.msg.ID)
		if a.msg.Seq == 0 {
			t.Errorf("event %s has no sequence number", a.msg.ID)
		}
		if i > 0 && a.msg.Seq <= first[i-1].msg.Seq {
			t.Errorf("event %s (seq %d) arrived after %s (seq %d)", a.msg.ID, a.msg.Seq, first[i-1].msg.ID, first[i-1].msg.Seq)
		}
	}
	if strings.Join(ids, ",") != strings.Join(want, ",") {
		t.Errorf("first arrivals\n got %v\nwant %v", ids, want)
	}
}

// The broker is stopped for 60 s and 20 events are raised meanwhile: after
// its return every one is delivered once, in order, with its sequence
// number. How soon after the return is measured by
// BenchmarkMQTTRedeliveryAfterTheBrokerReturns, not asserted here.
func TestMQTTDeliversEveryEventOnceInOrderAfterAMinuteOfBrokerOutage(t *testing.T) {
	if testing.Short() {
		t.Skip("a 60 s broker outage: skipped with -short")
	}
	m := newMosquitto(t, map[string]string{"node-o": "pw-o", "watcher": "pw-w"})
	m.Start()
	w := m.watch(t, "pw-w")
	stateDir := t.TempDir()
	ob := openOutbox(t, stateDir)
	cfg := m.nodeConfig(t, "node-o", "pw-o")
	cfg.Reconnect = configs.Reconnect{} // the defaults, as shipped
	p := newTestPublisher(t, cfg, "node-o", stateDir, ob, nil)
	defer runPublisher(t, context.Background(), p)()
	before := num(w.nextStatus(t, testPrefix+"/node-o/status", func(m map[string]any) bool { return m["state"] == wire.StateOnline }), "session")

	stopped := time.Now()
	m.Stop()
	want := eventIDs("outage", 20)
	for i, id := range want {
		if err := ob.Append(core.Event{ID: id, Kind: "incident", Target: fmt.Sprintf("wg0/%d", i)}); err != nil {
			t.Fatal(err)
		}
		time.Sleep(2500 * time.Millisecond) // spread over the outage
	}
	time.Sleep(time.Until(stopped.Add(60 * time.Second)))
	m.Start()
	back := time.Now()
	got := w.nextEvents(t, want)
	checkInOrder(t, got, want)
	if len(got) != len(want) {
		t.Errorf("%d messages for %d events, want each once", len(got), len(want))
	}
	// Each carries the session of the connection that delivered it, the
	// one after the outage, which the node's status names too.
	after := got[0].msg.Session
	for _, a := range got {
		if a.msg.Session != after || after <= before {
			t.Errorf("event %s carries session %d; want that of the connection after the outage (the first event's, %d, above %d before it)", a.msg.ID, a.msg.Session, after, before)
		}
	}
	w.nextStatus(t, testPrefix+"/node-o/status", func(m map[string]any) bool { return num(m, "session") == after })
	t.Logf("the last event arrived %.2f s after the broker was back (measured, not asserted)", got[len(got)-1].at.Sub(back).Seconds())
}

// dropAckProxy forwards TCP between a client and a broker and, on the
// first connection only, swallows the dropAt-th PUBACK the broker sends:
// the broker has the message, the client never hears so.
type dropAckProxy struct {
	*proxy
	dropAt int
}

func newDropAckProxy(t *testing.T, target string, dropAt int) *dropAckProxy {
	t.Helper()
	p := &dropAckProxy{dropAt: dropAt}
	p.proxy = newProxy(t, target, func(c, b net.Conn, n int32) { p.forward(c, b, n == 1) })
	return p
}

// forward copies MQTT packets from the broker b to the client c.
func (p *dropAckProxy) forward(c, b net.Conn, first bool) {
	pubacks := 0
	for {
		pkt, err := readPacket(b)
		if err != nil {
			return
		}
		if pkt[0]>>4 == 4 { // PUBACK
			pubacks++
			if first && pubacks == p.dropAt {
				continue
			}
		}
		if _, err := c.Write(pkt); err != nil {
			return
		}
	}
}

// readPacket reads one MQTT control packet: the fixed header with its
// variable-length remaining length, and the rest.
func readPacket(r io.Reader) ([]byte, error) {
	hdr := make([]byte, 1, 5)
	if _, err := io.ReadFull(r, hdr); err != nil {
		return nil, err
	}
	n, mult := 0, 1
	for {
		var b [1]byte
		if _, err := io.ReadFull(r, b[:]); err != nil {
			return nil, err
		}
		hdr = append(hdr, b[0])
		n += int(b[0]&0x7f) * mult
		if b[0]&0x80 == 0 {
			break
		}
		mult *= 128
	}
	body := make([]byte, n)
	if _, err := io.ReadFull(r, body); err != nil {
		return nil, err
	}
	return append(hdr, body...), nil
}

// A window whose PUBACKs stop in the middle (here the broker's ack of the
// third event never arrives): the publisher acks only the events before
// it, reconnects and sends everything from it on again, so a consumer that
// deduplicates by id sees every event in order.
func TestMQTTSendsAPartlyAcknowledgedWindowAgainFromItsFirstGap(t *testing.T) {
	b := mosquitto.Start(t, mosquitto.Options{Persistence: true})
	px := newDropAckProxy(t, b.PlainAddr, 4) // the first PUBACK is the status's
	w := plainWatcher(t, b.PlainURL())
	stateDir := t.TempDir()
	ob := openOutbox(t, stateDir)
	want := eventIDs("window", 10)
	for _, id := range want {
		if err := ob.Append(core.Event{ID: id, Kind: "incident", Target: "wg0"}); err != nil {
			t.Fatal(err)
		}
	}
	p, err := NewPublisher(Options{
		Config: configs.ReportMQTT{Broker: "tcp://" + px.ln.Addr().String(), TopicPrefix: testPrefix, Reconnect: fastReconnect},
		Node:   configs.Node{Name: "node-w"}, Outbox: ob, Session: OpenSession(stateDir, nil),
		DialTimeout: 3 * time.Second, AckTimeout: time.Second, Window: 16,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer runPublisher(t, context.Background(), p)()
	testsupport.WaitFor(t, 20*time.Second, "the outbox to empty", func() bool { return ob.Depth() == 0 })
	got := w.nextEvents(t, want)
	checkInOrder(t, got, want)
	count := map[string]int{}
	for _, a := range got {
		count[a.msg.ID]++
	}
	for i, id := range want {
		if wantN := 1 + btoi(i >= 2); count[id] != wantN {
			t.Errorf("event %s arrived %d times, want %d (everything from the unacknowledged one on is sent again)", id, count[id], wantN)
		}
	}
	if px.conns.Load() < 2 {
		t.Errorf("%d connections, want a reconnect after the missing PUBACK", px.conns.Load())
	}
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// plainWatcher subscribes to every event topic of a plain, anonymous broker.
func plainWatcher(t *testing.T, url string) *watcher {
	t.Helper()
	w := &watcher{status: make(chan paho.Message, 1000), events: make(chan paho.Message, 10000)}
	o := paho.NewClientOptions().AddBroker(url).SetClientID(fmt.Sprintf("watcher-%d", time.Now().UnixNano())).
		SetProtocolVersion(4).SetCleanSession(false).SetOrderMatters(true).SetConnectTimeout(5 * time.Second)
	o.SetDefaultPublishHandler(w.handle)
	w.c = paho.NewClient(o)
	if tok := w.c.Connect(); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		t.Fatalf("watcher connect: %v", tok.Error())
	}
	if tok := w.c.Subscribe(testPrefix+"/+/event", 1, w.handle); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		t.Fatalf("watcher subscribe: %v", tok.Error())
	}
	t.Cleanup(func() { w.c.Disconnect(100) })
	return w
}

// connectsOf returns when mosquitto logged a new client connection of
// user, from its log (mosquitto 2.0.11, 2026-12: "<unix seconds>: New
// client connected from <addr> as <id> (p2, c1, k30, u'<user>').").
func connectsOf(log, user string) []time.Time {
	re := regexp.MustCompile(`(?m)^(\d+): New client connected from .* u'` + regexp.QuoteMeta(user) + `'\)`)
	var out []time.Time
	for _, m := range re.FindAllStringSubmatch(log, -1) {
		var sec int64
		fmt.Sscan(m[1], &sec)
		out = append(out, time.Unix(sec, 0))
	}
	return out
}

// maxAttempts is the most full connects the reconnect policy allows in
// window when every connection is closed at once: the shortest waits
// (every draw at its lowest), attempts themselves taking no time.
func maxAttempts(cfg configs.Reconnect, window time.Duration) int {
	r := newRetry(withDefaults(cfg))
	now := time.Time{}
	n := 1
	for {
		r.ended(now, 0, 0)
		if r.next.Sub(time.Time{}) > window {
			return n
		}
		now = r.next
		n++
	}
}

// A second client takes over the agent's client id every time the agent
// connects (two nodes with the same node.name): the agent's connects,
// counted from the broker's log, stay within what its backoff allows, and
// it reports the condition.
func TestMQTTAgentWhoseClientIDIsTakenOverStaysWithinItsRateAndSaysSo(t *testing.T) {
	m := newMosquitto(t, map[string]string{"node-k": "pw-k", "taker": "pw-t", "watcher": "pw-w"})
	m.Start()
	stateDir := t.TempDir()
	ob := openOutbox(t, stateDir)
	cfg := m.nodeConfig(t, "node-k", "pw-k")
	cfg.Reconnect = configs.Reconnect{
		ProbeInterval: configs.Duration(200 * time.Millisecond),
		MinDelay:      configs.Duration(500 * time.Millisecond), MaxDelay: configs.Duration(4 * time.Second),
		StableAfter: configs.Duration(time.Minute),
	}
	var mu sync.Mutex
	var emitted []core.Event
	p, err := NewPublisher(Options{Config: cfg, Node: configs.Node{Name: "node-k"}, Outbox: ob,
		Session: OpenSession(stateDir, nil), DialTimeout: 3 * time.Second,
		Emit: func(e core.Event) { mu.Lock(); emitted = append(emitted, e); mu.Unlock() }})
	if err != nil {
		t.Fatal(err)
	}

	// The taker: whenever the broker closes its connection (the agent took
	// the id), it connects again at once, with the same client id.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	takerDone := make(chan struct{})
	go func() {
		defer close(takerDone)
		for ctx.Err() == nil {
			lost := make(chan struct{})
			tc := m.client(t, "edgeheal-node-k", "taker", "pw-t", func() { close(lost) })
			select {
			case <-lost:
			case <-ctx.Done():
				tc.Disconnect(0)
			}
		}
	}()
	time.Sleep(500 * time.Millisecond) // the taker holds the id first
	start := time.Now()
	stop := runPublisher(t, context.Background(), p)
	time.Sleep(20 * time.Second)
	window := time.Since(start)
	stop()
	cancel()
	<-takerDone

	connects := connectsOf(m.Log(), "node-k")
	bound := maxAttempts(cfg.Reconnect, window)
	t.Logf("%d connects by the agent in %.1f s (the policy allows at most %d)", len(connects), window.Seconds(), bound)
	if len(connects) < kickedAfter || len(connects) > bound {
		t.Errorf("%d connects by the agent in %.1f s, want between %d and %d", len(connects), window.Seconds(), kickedAfter, bound)
	}
	if h := p.Health(); !h.Degraded || !strings.Contains(h.Detail, "another client may be using client id edgeheal-node-k") {
		t.Errorf("health %+v, want degraded naming the client id", h)
	}
	mu.Lock()
	defer mu.Unlock()
	n := 0
	for _, e := range emitted {
		if e.Kind == "incident" && e.Target == "mqtt" && e.Result == "closed-after-connect" {
			n++
		}
	}
	if n != 1 {
		t.Errorf("%d closed-after-connect incidents emitted, want 1: %+v", n, emitted)
	}
}

// fakeLinks is a LinkWatcher whose events the test sends.
type fakeLinks struct{ events chan probes.LinkEvent }

func newFakeLinks() *fakeLinks { return &fakeLinks{events: make(chan probes.LinkEvent, 1)} }

func (f *fakeLinks) Subscribe(ctx context.Context) (<-chan probes.LinkEvent, error) {
	out := make(chan probes.LinkEvent)
	go func() {
		defer close(out)
		for {
			select {
			case <-ctx.Done():
				return
			case ev := <-f.events:
				select {
				case out <- ev:
				case <-ctx.Done():
					return
				}
			}
		}
	}()
	return out, nil
}

// send is a default route that came back.
func (f *fakeLinks) send() { f.events <- probes.LinkEvent{DefaultRoute: true} }

// A link change while disconnected makes the publisher check the broker at
// once rather than at its next check (here an hour away).
func TestMQTTChecksTheBrokerAtOnceOnALinkChange(t *testing.T) {
	m := newMosquitto(t, map[string]string{"node-l": "pw-l", "watcher": "pw-w"})
	stateDir := t.TempDir()
	ob := openOutbox(t, stateDir)
	cfg := m.nodeConfig(t, "node-l", "pw-l")
	cfg.Reconnect.ProbeInterval = configs.Duration(time.Hour)
	links := newFakeLinks()
	p, err := NewPublisher(Options{Config: cfg, Node: configs.Node{Name: "node-l"}, Outbox: ob,
		Session: OpenSession(stateDir, nil), DialTimeout: 3 * time.Second, Links: links})
	if err != nil {
		t.Fatal(err)
	}
	defer runPublisher(t, context.Background(), p)()
	// The broker is down: the first connect fails, the check after it too;
	// the next check would be an hour later.
	testsupport.WaitFor(t, 20*time.Second, "a failed first connect", func() bool { return p.Info().LastError != "" })
	time.Sleep(500 * time.Millisecond)
	m.Start()
	time.Sleep(time.Second)
	if p.Connected() {
		t.Fatal("connected before any reason to check: the test is broken")
	}
	links.send()
	testsupport.WaitFor(t, 20*time.Second, "a connect after the link change", p.Connected)
}

// client connects a paho client as user with clientID over TLS (with a
// client certificate of its own) and calls onLost when the broker closes
// its connection.
func (m *testBroker) client(t *testing.T, clientID, user, password string, onLost func()) paho.Client {
	t.Helper()
	cert, key := m.PKI.Issue(t, user, false)
	tc, err := configs.TLS{CA: m.PKI.CAFile, Cert: cert, Key: key, ServerName: "broker.test"}.ClientConfig("127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	o := paho.NewClientOptions().AddBroker(m.URL()).SetClientID(clientID).SetUsername(user).SetPassword(password).
		SetTLSConfig(tc).SetProtocolVersion(4).SetAutoReconnect(false).SetConnectTimeout(5 * time.Second).
		SetConnectionLostHandler(func(paho.Client, error) { onLost() })
	c := paho.NewClient(o)
	if tok := c.Connect(); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		onLost()
	}
	return c
}

// A publisher with a link watcher that cannot connect for want of a file
// still returns from Run (the supervisor retries it).
func TestPublisherWithLinksReturnsItsSetupError(t *testing.T) {
	dir := t.TempDir()
	ob := openOutbox(t, dir)
	p, err := NewPublisher(Options{Config: configs.ReportMQTT{Broker: "ssl://127.0.0.1:1", TLS: configs.TLS{CA: dir + "/missing-ca.pem"}},
		Node: configs.Node{Name: "n"}, Outbox: ob, Session: OpenSession(dir, nil), Links: newFakeLinks()})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- p.Run(context.Background()) }()
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "missing-ca.pem") {
			t.Errorf("Run = %v, want the missing CA", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("Run did not return its set-up error")
	}
}
