package source

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"time"

	"github.com/eclipse/paho.mqtt.golang/packets"

	"github.com/edgeheal/edgeheal/broker"
	"github.com/edgeheal/edgeheal/fleet"
)

// retainedConn is the retained connection, the statuses' and the
// histories': a clean session that subscribes once, at QoS 0, and then
// only reads. It reads its PUBLISH packets itself, each into one buffer
// whose tail is the payload, and the buffer is read into again once the
// message is applied, where paho allocates and copies every payload twice
// (the packet, then the payload out of it): at a 100,000-node start 1.6
// GB for the 800 MB of histories, which the collector then walks
// (docs/performance.md, "Where the 100,000-node start goes"). Every other
// packet is encoded and decoded by paho's packets package, and the view's
// own connection (events, QoS 1, a persistent session) stays a paho
// client.
type retainedConn struct {
	conn      net.Conn
	r         *bufio.Reader
	keepAlive time.Duration

	topics []string // to subscribe to, in order; set before read starts, never changed

	wmu    sync.Mutex // PINGREQ and DISCONNECT come from other goroutines than SUBSCRIBE
	closed chan struct{}
	once   sync.Once
}

// maxRetainedPacket is the largest packet the retained connection
// reads: a payload as large as the store reads, and room for its topic.
// A packet's length is the broker's say, and the view does not allocate
// whatever it says: a larger PUBLISH is skipped unread but for its topic
// (a node's history too large, which the store names as invalid); a
// larger packet of another type ends the connection, as a broker that
// breaks MQTT. Ending it on a PUBLISH would not do: the broker hands the
// same retained history out again at the next subscribe, and one node's
// history would keep the view from every other's.
const maxRetainedPacket = fleet.MaxPayload + 64<<10

// buffers hold the retained connection's packets: one is taken for a packet,
// handed with its message to the worker that decodes and applies it, and
// put back then (the store keeps nothing of a payload).
var buffers = sync.Pool{New: func() any { return new([]byte) }}

// buffer is a buffer of n bytes from buffers.
func buffer(n int) *[]byte {
	b := buffers.Get().(*[]byte)
	if cap(*b) < n {
		*b = make([]byte, n, max(n, 16<<10)) // a full history is about 8 KB
	}
	*b = (*b)[:n]
	return b
}

// subscribeID is the packet id of the connection's one SUBSCRIBE.
const subscribeID = 1

// connectRetained dials, sends CONNECT and reads the CONNACK, within
// the dial timeout; subscribe later subscribes to topics, in order.
func (r *runner) connectRetained(id string, topics ...string) (*retainedConn, error) {
	tc, password, err := r.credentials()
	if err != nil {
		return nil, err
	}
	c, err := r.dial(tc)
	if err != nil {
		return nil, fmt.Errorf("connecting to %s as %s: %w", r.opts.MQTT.Broker, id, err)
	}
	h := &retainedConn{conn: c, r: bufio.NewReaderSize(c, 64<<10), keepAlive: r.opts.KeepAlive, topics: topics, closed: make(chan struct{})}
	cp := packets.NewControlPacket(packets.Connect).(*packets.ConnectPacket)
	cp.ProtocolName, cp.ProtocolVersion, cp.CleanSession = "MQTT", 4, true
	cp.ClientIdentifier, cp.Keepalive = id, uint16(r.opts.KeepAlive/time.Second)
	if u := r.opts.MQTT.Username; u != "" {
		cp.UsernameFlag, cp.Username = true, u
	}
	if password != "" {
		cp.PasswordFlag, cp.Password = true, []byte(password)
	}
	c.SetDeadline(time.Now().Add(r.opts.DialTimeout))
	err = cp.Write(c)
	if err == nil {
		err = h.connack()
	}
	if err != nil {
		c.Close()
		return nil, fmt.Errorf("connecting to %s as %s: %w", r.opts.MQTT.Broker, id, err)
	}
	c.SetDeadline(time.Time{})
	go h.ping()
	return h, nil
}

// connack reads the broker's answer to CONNECT.
func (h *retainedConn) connack() error {
	first, buf, _, err := h.next()
	if err != nil {
		return err
	}
	defer buffers.Put(buf)
	switch body := *buf; {
	case first>>4 != packets.Connack || len(body) != 2:
		return &broker.PacketError{Type: first >> 4, Length: len(body), Reason: "the answer to CONNECT is no CONNACK"}
	case body[1] != packets.Accepted:
		if err := packets.ConnErrors[body[1]]; err != nil {
			return err
		}
		return fmt.Errorf("refused with return code %d", body[1])
	}
	return nil
}

// subscribe sends the connection's SUBSCRIBE, each of its topics at QoS
// 0, in order; read sees its SUBACK.
func (h *retainedConn) subscribe() error {
	sp := packets.NewControlPacket(packets.Subscribe).(*packets.SubscribePacket)
	sp.MessageID, sp.Topics, sp.Qoss = subscribeID, h.topics, make([]byte, len(h.topics))
	return h.write(sp)
}

func (h *retainedConn) write(p packets.ControlPacket) error {
	return h.writeWithin(p, h.keepAlive)
}

func (h *retainedConn) writeWithin(p packets.ControlPacket, limit time.Duration) error {
	h.wmu.Lock()
	defer h.wmu.Unlock()
	h.conn.SetWriteDeadline(time.Now().Add(limit))
	return p.Write(h.conn)
}

// read hands every PUBLISH to handle with the buffer its payload is in,
// which handle puts back into buffers once done with the payload, and the
// SUBACK's verdict to subscribed, until the connection ends: it
// was closed, the broker broke MQTT, or it sent nothing (not even the
// answer to a ping) for one and a half keep-alive periods.
func (h *retainedConn) read(subscribed chan<- error, handle func(fleet.Message, *[]byte), now func() time.Time) error {
	acked := false
	for {
		h.conn.SetReadDeadline(time.Now().Add(h.keepAlive * 3 / 2))
		first, buf, unread, err := h.next()
		if err != nil {
			return err
		}
		body := *buf
		switch first >> 4 {
		case packets.Publish:
			m, err := publish(first, body)
			if err != nil {
				return err
			}
			m.Received, m.Unread = now(), unread
			handle(m, buf)
			continue
		case packets.Suback:
			if acked || len(body) != 2+len(h.topics) || binary.BigEndian.Uint16(body) != subscribeID {
				return &broker.PacketError{Type: packets.Suback, Length: len(body), Reason: "a SUBACK that answers no SUBSCRIBE sent"}
			}
			acked = true
			subscribed <- refused(h.topics, body[2:])
		case packets.Pingresp:
		default:
			return &broker.PacketError{Type: first >> 4, Length: len(body), Reason: "a " + packets.PacketNames[first>>4] + " where a client subscribed at QoS 0 expects none"}
		}
		buffers.Put(buf)
	}
}

// refused names the filters a SUBACK's return codes refused, if any.
func refused(topics []string, codes []byte) error {
	var no []string
	for i, c := range codes {
		if c == 0x80 {
			no = append(no, topics[i])
		}
	}
	if len(no) == 0 {
		return nil
	}
	return fmt.Errorf("the broker refused %s (SUBACK return code 0x80: its ACL, or a topic it does not take)", strings.Join(no, " and "))
}

// publish is a PUBLISH packet's message; its payload is body's tail.
func publish(first byte, body []byte) (fleet.Message, error) {
	bad := func(why string) (fleet.Message, error) {
		return fleet.Message{}, &broker.PacketError{Type: packets.Publish, Length: len(body), Reason: why}
	}
	if first>>1&3 != 0 {
		return bad("a PUBLISH at a QoS above the one subscribed")
	}
	if len(body) < 2 {
		return bad("a PUBLISH without its topic")
	}
	n := int(binary.BigEndian.Uint16(body))
	if 2+n > len(body) {
		return bad("a PUBLISH shorter than its topic")
	}
	return fleet.Message{Topic: string(body[2 : 2+n]), Payload: body[2+n:], Retained: first&1 != 0}, nil
}

// next reads one packet: its first byte and its body, in a buffer from
// buffers. Of a PUBLISH larger than maxRetainedPacket the body holds its
// topic only, and unread is the size of the payload skipped.
func (h *retainedConn) next() (first byte, body *[]byte, unread int, err error) {
	if first, err = h.r.ReadByte(); err != nil {
		return 0, nil, 0, err
	}
	n := 0
	for i := 0; ; i++ {
		b, err := h.r.ReadByte()
		if err != nil {
			return 0, nil, 0, err
		}
		n |= int(b&0x7f) << (7 * i)
		if b&0x80 == 0 {
			break
		}
		if i == 3 {
			return 0, nil, 0, &broker.PacketError{Type: first >> 4, Length: -1, Reason: "a remaining length longer than 4 bytes"}
		}
	}
	switch {
	case n > maxRetainedPacket && first>>4 == packets.Publish:
		return h.skip(first, n)
	case n > maxRetainedPacket:
		return 0, nil, 0, &broker.PacketError{Type: first >> 4, Length: n,
			Reason: fmt.Sprintf("a %s of %d bytes, more than the %d the view reads", packets.PacketNames[first>>4], n, maxRetainedPacket)}
	}
	body = buffer(n)
	if _, err := io.ReadFull(h.r, *body); err != nil {
		return 0, nil, 0, err
	}
	return first, body, 0, nil
}

// skip reads a PUBLISH of n bytes, too large to read, but for its topic
// (its length and itself, at most 64 KiB): the rest is read and dropped
// a buffer at a time, each within the read deadline, so that a large
// one on a slow link is not taken for a broker gone quiet.
func (h *retainedConn) skip(first byte, n int) (byte, *[]byte, int, error) {
	var size [2]byte
	if _, err := io.ReadFull(h.r, size[:]); err != nil {
		return 0, nil, 0, err
	}
	topic := 2 + int(binary.BigEndian.Uint16(size[:])) // less than n: n > maxRetainedPacket
	body := buffer(topic)
	copy(*body, size[:])
	if _, err := io.ReadFull(h.r, (*body)[2:]); err != nil {
		buffers.Put(body)
		return 0, nil, 0, err
	}
	for rest := n - topic; rest > 0; {
		h.conn.SetReadDeadline(time.Now().Add(h.keepAlive * 3 / 2))
		k, err := h.r.Discard(min(rest, h.r.Size()))
		if err != nil {
			buffers.Put(body)
			return 0, nil, 0, err
		}
		rest -= k
	}
	return first, body, n - topic, nil
}

// ping sends a PINGREQ every keep-alive period until the connection is
// closed: the broker's PINGRESP keeps read's deadline from passing on a
// quiet connection, and the PINGREQ keeps the broker from dropping it.
func (h *retainedConn) ping() {
	t := time.NewTicker(h.keepAlive)
	defer t.Stop()
	for {
		select {
		case <-h.closed:
			return
		case <-t.C:
			if h.write(packets.NewControlPacket(packets.Pingreq)) != nil {
				return
			}
		}
	}
}

// close sends DISCONNECT (so that the broker does not wait for the
// keep-alive to end the session), waiting at most a quarter of a second
// for a broker that stopped reading, as paho's Disconnect(250) does, and
// closes the connection, which ends read.
func (h *retainedConn) close() {
	h.once.Do(func() {
		close(h.closed)
		h.writeWithin(packets.NewControlPacket(packets.Disconnect), 250*time.Millisecond)
		h.conn.Close()
	})
}
