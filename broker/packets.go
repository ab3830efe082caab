package broker

import (
	"fmt"
	"net"
	"sync"
)

// A broker is not trusted with the agent's memory: a packet's remaining
// length is the broker's say, and an MQTT client that allocates it (paho
// does) can be made to allocate 256 MiB by five bytes. LimitPackets reads
// every packet's fixed header as it arrives, before the client allocates
// anything, and closes the connection on a packet that MQTT 3.1.1 forbids
// a server to send or that is larger than the caller allows.

// PacketError is a packet from the broker that breaks MQTT 3.1.1 or the
// size the client allows: the broker's fault, never the network's. The
// connection it came on is closed.
type PacketError struct {
	Type   byte   // the packet type, 1..15; 0 when the type byte was not read yet
	Length int    // the remaining length the broker announced; -1 if not known
	Reason string // what is wrong, in words
}

func (e *PacketError) Error() string {
	return "the broker broke MQTT: " + e.Reason + "; connection closed"
}

// packetNames are MQTT's control packet types by number.
var packetNames = [16]string{"reserved type 0", "CONNECT", "CONNACK", "PUBLISH", "PUBACK", "PUBREC", "PUBREL",
	"PUBCOMP", "SUBSCRIBE", "SUBACK", "UNSUBSCRIBE", "UNSUBACK", "PINGREQ", "PINGRESP", "DISCONNECT", "reserved type 15"}

// PacketLimits is what a client takes from its broker.
type PacketLimits struct {
	// Max is the largest remaining length of a PUBLISH or SUBACK; every
	// other packet a server sends has a fixed length.
	Max int
	// CleanSession: the client asked for a clean session, so a CONNACK
	// that says a session is present is malformed [MQTT-3.2.2-1].
	CleanSession bool
}

// LimitedConn is a net.Conn whose reads are checked packet by packet
// (LimitPackets).
type LimitedConn struct {
	net.Conn
	lim PacketLimits

	mu       sync.Mutex
	err      *PacketError
	packets  int  // packets whose fixed header was read
	typ      byte // the current packet's first byte
	inHeader bool // reading the remaining length
	length   int
	mult     int
	lenBytes int
	body     int     // bytes of the current body still to come
	connack  [2]byte // a CONNACK's body, checked when complete
	got      int     // bytes of the current body read
}

// LimitPackets wraps c: a read that would hand the client a packet over
// lim, a packet a server never sends (CONNECT, SUBSCRIBE, a reserved
// type), a first packet that is not CONNACK, a malformed CONNACK or
// acknowledgement, or a remaining length of more than four bytes closes c
// and fails with a *PacketError (also in Err).
func LimitPackets(c net.Conn, lim PacketLimits) *LimitedConn {
	return &LimitedConn{Conn: c, lim: lim}
}

// Err is the violation that closed the connection, or nil.
func (c *LimitedConn) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err == nil {
		return nil
	}
	return c.err
}

// Read implements net.Conn.
func (c *LimitedConn) Read(p []byte) (int, error) {
	c.mu.Lock()
	if c.err != nil {
		err := c.err
		c.mu.Unlock()
		return 0, err
	}
	c.mu.Unlock()
	n, err := c.Conn.Read(p)
	c.mu.Lock()
	defer c.mu.Unlock()
	for i := 0; i < n; i++ {
		if perr := c.step(p[i]); perr != nil {
			c.err = perr
			c.Conn.Close()
			return i, perr
		}
	}
	return n, err
}

// step feeds one byte of the stream through the packet framing.
func (c *LimitedConn) step(b byte) *PacketError {
	switch {
	case c.body > 0:
		if c.typ>>4 == 2 && c.got < 2 {
			c.connack[c.got] = b
		}
		c.got++
		c.body--
		if c.body == 0 && c.typ>>4 == 2 {
			return c.checkConnack()
		}
		return nil
	case !c.inHeader:
		c.typ, c.inHeader, c.length, c.mult, c.lenBytes, c.got = b, true, 0, 1, 0, 0
		return nil
	}
	c.length += int(b&0x7f) * c.mult
	c.mult *= 128
	c.lenBytes++
	if b&0x80 != 0 {
		if c.lenBytes == 4 {
			return &PacketError{Type: c.typ >> 4, Length: -1, Reason: "a remaining length of more than four bytes"}
		}
		return nil
	}
	c.inHeader = false
	c.packets++
	if err := c.checkHeader(); err != nil {
		return err
	}
	c.body = c.length
	return nil
}

// fixedPackets are the packets a server sends whose flags and length MQTT
// 3.1.1 fixes: CONNACK, PUBACK, PUBREC, PUBREL, PUBCOMP, UNSUBACK and
// PINGRESP.
var fixedPackets = map[byte]struct {
	flags byte
	n     int
}{2: {0, 2}, 4: {0, 2}, 5: {0, 2}, 6: {2, 2}, 7: {0, 2}, 11: {0, 2}, 13: {0, 0}}

// checkHeader checks a complete fixed header against what a server may
// send and the limits.
func (c *LimitedConn) checkHeader() *PacketError {
	t, flags := c.typ>>4, c.typ&0x0f
	bad := func(format string, args ...any) *PacketError {
		return &PacketError{Type: t, Length: c.length, Reason: fmt.Sprintf(format, args...)}
	}
	if c.packets == 1 && t != 2 {
		return bad("its first packet is a %s, not a CONNACK", packetNames[t])
	}
	switch f, ok := fixedPackets[t]; {
	case ok && (flags != f.flags || c.length != f.n):
		return bad("a %s of %d bytes with flags %#x (an MQTT 3.1.1 %s is %d bytes, flags %#x)",
			packetNames[t], c.length, flags, packetNames[t], f.n, f.flags)
	case ok:
		return nil
	case t == 3 && flags&0x06 == 0x06:
		return bad("a PUBLISH with QoS 3")
	case t == 9 && flags != 0:
		return bad("a SUBACK with flags %#x", flags)
	case t == 3 || t == 9:
		if c.length > c.lim.Max {
			return bad("a %s of %d bytes, more than the %d this client takes", packetNames[t], c.length, c.lim.Max)
		}
		return nil
	}
	return bad("a %s, which a server never sends", packetNames[t])
}

// checkConnack checks a CONNACK's two bytes: acknowledge flags with only
// session present (and that only without a clean session), and a return
// code MQTT 3.1.1 defines.
func (c *LimitedConn) checkConnack() *PacketError {
	flags, rc := c.connack[0], c.connack[1]
	bad := func(format string, args ...any) *PacketError {
		return &PacketError{Type: 2, Length: 2, Reason: fmt.Sprintf(format, args...)}
	}
	switch {
	case flags&0xfe != 0:
		return bad("a CONNACK with reserved flags set (%#x)", flags)
	case flags == 1 && rc != 0:
		return bad("a CONNACK that refuses (return code %d) with a session present", rc)
	case flags == 1 && c.lim.CleanSession:
		return bad("a CONNACK with a session present for a clean session")
	case rc > 5:
		return bad("a CONNACK with return code %d, which MQTT 3.1.1 does not define", rc)
	}
	return nil
}
