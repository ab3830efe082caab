package scalebench

// The simulated fleet. A node is one TCP connection to the broker with a
// CONNECT of its own (clean session, a Last Will {"state":"lost"} of its
// session with its identity, as the agent's), written with paho's packet
// encoder rather than a paho client per node, whose goroutines and
// buffers would make 10,000 clients cost the simulator gigabytes. What
// the view receives is byte for byte what agents send: the payloads are
// the wire package's types. Beyond ownConnections nodes (a machine's open
// files and loopback ports run out), only the nodes of the site that
// goes lost have their own connection and Will; the others publish
// through shared connections, which the view cannot tell apart.

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/eclipse/paho.mqtt.golang/packets"

	"github.com/edgeheal/edgeheal/wire"
)

const prefix = "edgeheal/v1"

// ownConnections is how many nodes get a connection each.
const ownConnections = 12000

// simConn is one MQTT connection.
type simConn struct {
	mu    sync.Mutex
	conn  net.Conn
	msgID uint16
	done  chan struct{} // closed when the reader ends (the connection is gone)
}

// simNode is one simulated agent.
type simNode struct {
	name, site string
	session    uint64
	own        atomic.Pointer[simConn] // its own connection, with its Will; nil: it publishes through shared
	shared     *simConn
}

// dial opens a connection with an optional Will and starts reading (and
// dropping) what the broker sends back: PUBACKs.
func dial(addr, clientID, willTopic string, will []byte) (*simConn, error) {
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		return nil, err
	}
	cp := packets.NewControlPacket(packets.Connect).(*packets.ConnectPacket)
	cp.ProtocolName, cp.ProtocolVersion, cp.CleanSession = "MQTT", 4, true
	cp.ClientIdentifier = clientID
	if will != nil {
		cp.WillFlag, cp.WillQos, cp.WillRetain = true, 1, true
		cp.WillTopic, cp.WillMessage = willTopic, will
	}
	if err := cp.Write(c); err != nil {
		c.Close()
		return nil, err
	}
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	p, err := packets.ReadPacket(c)
	if err != nil {
		c.Close()
		return nil, fmt.Errorf("%s: reading CONNACK: %w", clientID, err)
	}
	if ack, ok := p.(*packets.ConnackPacket); !ok || ack.ReturnCode != 0 {
		c.Close()
		return nil, fmt.Errorf("%s: CONNECT refused: %v", clientID, p)
	}
	_ = c.SetReadDeadline(time.Time{})
	sc := &simConn{conn: c, done: make(chan struct{})}
	go func() {
		defer close(sc.done)
		for {
			if _, err := packets.ReadPacket(c); err != nil {
				return
			}
		}
	}()
	return sc, nil
}

// connect opens the node's own connection with a Will of its session,
// which carries its identity as the agent's does.
func (n *simNode) connect(addr string) error {
	will, _ := json.Marshal(wire.Status{V: wire.Version, State: wire.StateLost, Session: n.session, Site: n.site, Version: "1.4.0", ConfigRevision: "3f9a1c2b7d40"})
	c, err := dial(addr, "sim-"+n.name, prefix+"/"+n.name+"/status", will)
	if err != nil {
		return err
	}
	n.own.Store(c)
	return nil
}

// publish sends one QoS 1 message; the PUBACK is read and dropped.
func (c *simConn) publish(topic string, retain bool, payload []byte) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.conn == nil {
		return fmt.Errorf("%s: not connected", topic)
	}
	c.msgID++
	if c.msgID == 0 {
		c.msgID = 1
	}
	p := packets.NewControlPacket(packets.Publish).(*packets.PublishPacket)
	p.TopicName, p.Qos, p.Retain, p.MessageID, p.Payload = topic, 1, retain, c.msgID, payload
	return p.Write(c.conn)
}

func (n *simNode) publish(kind string, retain bool, payload []byte) error {
	c := n.own.Load()
	if c == nil {
		c = n.shared
	}
	if c == nil {
		return fmt.Errorf("%s: not connected", n.name)
	}
	return c.publish(prefix+"/"+n.name+"/"+kind, retain, payload)
}

// status publishes the node's retained online status, as the agent's
// heartbeat does: every check, the agent's version and revision.
func (n *simNode) status() error {
	now := time.Now().UTC()
	b, _ := json.Marshal(wire.Status{V: wire.Version, State: wire.StateOnline, Session: n.session, TS: now,
		Node: n.name, Site: n.site, Version: "1.4.0", ConfigRevision: "3f9a1c2b7d40",
		Checks: &wire.ChecksSummary{Total: 4, Healthy: 4, Items: []wire.Check{
			{Kind: "component", Target: "mqtt", State: "ok", Healthy: true, Detail: "connected (session " + fmt.Sprint(n.session) + ")", Since: now},
			{Kind: "uplink", Target: "wwan0", State: "ok", Healthy: true, LastAction: "offload-off changed", Since: now},
			{Kind: "peer", Target: "flannel-wg/AbCdEfGh", State: "ok", Healthy: true, Since: now},
			{Kind: "workload", Target: "collector", State: "ok", Healthy: true, Since: now},
		}}})
	return n.publish(wire.TopicStatus, true, b)
}

// history publishes the node's retained history with every list at its
// bound (48 hours, 90 days, four targets, 20 incidents), as a node that
// has run for three months publishes it: the view's largest payload.
func (n *simNode) history() error {
	b, _ := json.Marshal(fullHistory(n.name, n.site, time.Now().UTC()))
	return n.publish(wire.TopicHistory, true, b)
}

func fullHistory(node, site string, now time.Time) wire.History {
	r := rand.New(rand.NewPCG(uint64(len(node)), uint64(node[len(node)-1])*7919+uint64(node[len(node)-2])))
	h := wire.History{V: wire.Version, Node: node, Site: site, TS: now, Since: now.Add(-90 * 24 * time.Hour)}
	fill := func(start time.Time, step, count, darkMax int) wire.Series {
		s := wire.Series{Start: start, Step: step}
		for range count {
			dark := r.IntN(darkMax + 1)
			s.Healthy, s.Dark, s.Degraded, s.Incidents = append(s.Healthy, step-dark), append(s.Dark, dark), append(s.Degraded, 0), append(s.Incidents, min(dark, 1+dark/60))
		}
		return s
	}
	h.Hours = fill(now.Truncate(time.Hour).Add(-47*time.Hour), 3600, 48, 30)
	h.Days = fill(now.Truncate(24*time.Hour).Add(-89*24*time.Hour), 86400, 90, 600)
	for _, t := range [][2]string{{"peer", "flannel-wg/AbCdEfGh"}, {"workload", "collector"}, {"uplink", "wwan0"}, {"component", "mqtt"}} {
		h.Targets = append(h.Targets, wire.TargetSummary{Kind: t[0], Target: t[1], HealthySeconds: 7700000, DarkSeconds: int64(r.IntN(20000)),
			Incidents: 20 + r.IntN(40), OutageP50Seconds: 12, OutageP95Seconds: 48, OutageMaxSeconds: 95, MTTRSeconds: 10 + 20*r.Float64(),
			Repairs: map[string]int{"handshake": 12, "itself": 10, "rebind": 2}})
	}
	for i := range wire.HistoryIncidents {
		start := now.Add(-time.Duration(i+1) * 3 * time.Hour)
		d := 5 + r.IntN(120)
		h.Incidents = append(h.Incidents, wire.Incident{ID: fmt.Sprintf("%012x%012x", r.Uint64()>>16, r.Uint64()>>16), Kind: "peer", Target: "flannel-wg/AbCdEfGh",
			Start: start, End: start.Add(time.Duration(d) * time.Second), DurationSeconds: float64(d), Diagnosis: "probe missed: timeout",
			Repairs: []string{"reassert", "handshake"}, HealedBy: "handshake"})
	}
	return h
}

var eventSeq atomic.Uint64

// event publishes one event as the agent's outbox would.
func (n *simNode) event(kind string) error {
	id := eventSeq.Add(1)
	b, _ := json.Marshal(wire.EventMessage{V: wire.Version, Node: n.name, Site: n.site, Event: wire.Event{
		ID: fmt.Sprintf("%s-%d", n.name, id), Time: time.Now().UTC(), Kind: kind, Target: "flannel-wg/AbCdEfGh",
		Action: "handshake", Result: "changed", Duration: 0.004, Summary: "handshake on flannel-wg/AbCdEfGh changed",
		Evidence: map[string]any{"reason": "probe missed 3 times"}}})
	return n.publish(wire.TopicEvent, false, b)
}

// drop closes the node's own connection without a DISCONNECT, so the
// broker publishes the Will, as it does for a node killed or cut off.
func (n *simNode) drop() {
	if c := n.own.Swap(nil); c != nil {
		c.close()
	}
}

func (c *simConn) close() {
	c.mu.Lock()
	conn := c.conn
	c.conn = nil
	c.mu.Unlock()
	if conn != nil {
		conn.Close()
		<-c.done
	}
}

// parallel runs fn for every node, at most width at a time, and returns
// the first error.
func parallel(nodes []*simNode, width int, fn func(*simNode) error) error {
	var first atomic.Value
	sem := make(chan struct{}, width)
	var wg sync.WaitGroup
	for _, n := range nodes {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			if err := fn(n); err != nil {
				first.CompareAndSwap(nil, err)
			}
		})
	}
	wg.Wait()
	if err, ok := first.Load().(error); ok {
		return err
	}
	return nil
}

// drain is the broker's part of a view's start, alone: a bare client
// that subscribes as the view does, acknowledges each message and does
// nothing else, until it has received want statuses and histories. Its
// time is the floor under the view's. Every one counts, retained or not:
// the simulator does not wait for its PUBACKs, and a message the broker
// stored only after the drain subscribed comes to it live (one run at
// 100,000 nodes waited 5 minutes for 25 such messages as retained).
func drain(addr string, want int) (time.Duration, error) {
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		return 0, err
	}
	defer c.Close()
	cp := packets.NewControlPacket(packets.Connect).(*packets.ConnectPacket)
	cp.ProtocolName, cp.ProtocolVersion, cp.CleanSession, cp.ClientIdentifier = "MQTT", 4, true, "drain"
	if err := cp.Write(c); err != nil {
		return 0, err
	}
	if _, err := packets.ReadPacket(c); err != nil {
		return 0, err
	}
	start := time.Now()
	sp := packets.NewControlPacket(packets.Subscribe).(*packets.SubscribePacket)
	sp.MessageID, sp.Topics, sp.Qoss = 1, []string{prefix + "/+/status", prefix + "/+/history"}, []byte{1, 1}
	if err := sp.Write(c); err != nil {
		return 0, err
	}
	_ = c.SetDeadline(time.Now().Add(5 * time.Minute))
	for got := 0; got < want; {
		p, err := packets.ReadPacket(c)
		if err != nil {
			return 0, fmt.Errorf("after %d of %d: %w", got, want, err)
		}
		pub, ok := p.(*packets.PublishPacket)
		if !ok {
			continue
		}
		got++
		// Every QoS 1 message is acknowledged, the live ones too: one left
		// unacknowledged holds a place of the broker's window for good,
		// and enough of them stall the drain.
		if pub.Qos > 0 {
			ack := packets.NewControlPacket(packets.Puback).(*packets.PubackPacket)
			ack.MessageID = pub.MessageID
			if err := ack.Write(c); err != nil {
				return 0, err
			}
		}
	}
	return time.Since(start), nil
}
