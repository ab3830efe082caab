package scalebench

// The simulated fleet: each node is one TCP connection to the broker with
// a CONNECT of its own (clean session, a Last Will {"state":"lost"} of its
// session, as the agent's), written with paho's packet encoder rather
// than a paho client per node, whose goroutines and buffers would make
// 10,000 clients cost the simulator gigabytes. What the view receives is
// byte for byte what agents send: the payloads are the agent's types.

import (
	"encoding/json"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/eclipse/paho.mqtt.golang/packets"

	"github.com/edgeheal/edgeheal/wire"
)

const prefix = "edgeheal/v1"

// simNode is one simulated agent.
type simNode struct {
	name, site string
	session    uint64

	mu    sync.Mutex
	conn  net.Conn
	msgID uint16
	done  chan struct{} // closed when the reader ends (the connection is gone)
}

// connect opens the node's connection with a Will of its session and
// starts reading (and dropping) what the broker sends back: PUBACKs.
func (n *simNode) connect(addr string) error {
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		return err
	}
	will, _ := json.Marshal(wire.Status{V: wire.Version, State: wire.StateLost, Session: n.session})
	cp := packets.NewControlPacket(packets.Connect).(*packets.ConnectPacket)
	cp.ProtocolName, cp.ProtocolVersion, cp.CleanSession = "MQTT", 4, true
	cp.ClientIdentifier = "sim-" + n.name
	cp.WillFlag, cp.WillQos, cp.WillRetain = true, 1, true
	cp.WillTopic, cp.WillMessage = prefix+"/"+n.name+"/status", will
	if err := cp.Write(c); err != nil {
		c.Close()
		return err
	}
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	p, err := packets.ReadPacket(c)
	if err != nil {
		c.Close()
		return fmt.Errorf("%s: reading CONNACK: %w", n.name, err)
	}
	if ack, ok := p.(*packets.ConnackPacket); !ok || ack.ReturnCode != 0 {
		c.Close()
		return fmt.Errorf("%s: CONNECT refused: %v", n.name, p)
	}
	_ = c.SetReadDeadline(time.Time{})
	n.mu.Lock()
	n.conn, n.done = c, make(chan struct{})
	done := n.done
	n.mu.Unlock()
	go func() {
		defer close(done)
		for {
			if _, err := packets.ReadPacket(c); err != nil {
				return
			}
		}
	}()
	return nil
}

// publish sends one QoS 1 message; the PUBACK is read and dropped.
func (n *simNode) publish(topic string, retain bool, payload []byte) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.conn == nil {
		return fmt.Errorf("%s: not connected", n.name)
	}
	n.msgID++
	if n.msgID == 0 {
		n.msgID = 1
	}
	p := packets.NewControlPacket(packets.Publish).(*packets.PublishPacket)
	p.TopicName, p.Qos, p.Retain, p.MessageID, p.Payload = topic, 1, retain, n.msgID, payload
	return p.Write(n.conn)
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
	return n.publish(prefix+"/"+n.name+"/status", true, b)
}

var eventSeq atomic.Uint64

// event publishes one event as the agent's outbox would.
func (n *simNode) event(kind string) error {
	id := eventSeq.Add(1)
	b, _ := json.Marshal(wire.EventMessage{V: wire.Version, Node: n.name, Site: n.site, Event: wire.Event{
		ID: fmt.Sprintf("%s-%d", n.name, id), Time: time.Now().UTC(), Kind: kind, Target: "flannel-wg/AbCdEfGh",
		Action: "handshake", Result: "changed", Duration: 0.004, Summary: "handshake on flannel-wg/AbCdEfGh changed",
		Evidence: map[string]any{"reason": "probe missed 3 times"}}})
	return n.publish(prefix+"/"+n.name+"/event", false, b)
}

// drop closes the connection without a DISCONNECT, so the broker
// publishes the Will, as it does for a node killed or cut off.
func (n *simNode) drop() {
	n.mu.Lock()
	c, done := n.conn, n.done
	n.conn = nil
	n.mu.Unlock()
	if c != nil {
		c.Close()
		<-done
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
