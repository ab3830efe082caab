package probes

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"strings"
	"syscall"
	"time"

	"golang.org/x/net/icmp"
	"golang.org/x/net/ipv4"
	"golang.org/x/net/ipv6"
)

// ProbeResult is one active probe through a tunnel.
//
// OK=false with Err nil is a confirmed failure: the probe was sent and the
// network said no (timeout, refused, no route). Err non-nil means the
// observation could not be made (bad target, socket creation failed, the
// caller's context ended) and must never trigger a repair.
type ProbeResult struct {
	OK      bool
	Err     error  // the probe could not be made
	Class   string // "ok", "timeout", "refused", "no-route", "failed" (the words of Classify); "error" with Err
	Latency time.Duration
	// Answered reports that the far end answered through the tunnel, even
	// when OK is false: a TCP RST ("refused") proves the tunnel carried
	// packets both ways, and only the service behind it is down.
	Answered bool
	// Method is how the probe went out: "tcp", "icmp" (an unprivileged ICMP
	// datagram socket) or "icmp-raw" (a raw socket, needs CAP_NET_RAW).
	Method string
	Detail string // the error text of a failure
}

// ProbeTunnel sends one probe to target, "tcp://ip:port" (a TCP connect)
// or "icmp://ip" (one ICMP echo), and waits at most timeout. Targets are IP
// literals: a probe through a tunnel must not depend on DNS. It does not
// retry; the agent counts misses.
//
// ICMP first uses an unprivileged ICMP datagram socket ("ping socket"),
// allowed when the process's group is within net.ipv4.ping_group_range,
// and falls back to a raw socket, which needs CAP_NET_RAW. With neither,
// Err says so. Sockets are created in the calling thread's network
// namespace.
//
// A confirmed failure is OK=false with Err nil; Err non-nil means the
// observation could not be made and must never trigger a repair.
func ProbeTunnel(ctx context.Context, target string, timeout time.Duration) ProbeResult {
	scheme, addr, err := parseTunnelTarget(target)
	if err != nil {
		return ProbeResult{Class: "error", Err: err}
	}
	if timeout <= 0 {
		return ProbeResult{Class: "error", Err: fmt.Errorf("probing %s: timeout %s is not positive", target, timeout)}
	}
	if err := ctx.Err(); err != nil {
		return ProbeResult{Class: "error", Err: err}
	}
	pctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var r ProbeResult
	if scheme == "tcp" {
		r = probeTCP(pctx, addr)
	} else {
		r = probeICMP(pctx, addr.Addr())
	}
	// A probe cut short by the caller (the agent stopping) observed nothing.
	if !r.OK && r.Err == nil && ctx.Err() != nil {
		r.Err, r.Class = ctx.Err(), "error"
	}
	if r.Err != nil {
		r.Err = fmt.Errorf("probing %s: %w", target, r.Err)
		r.OK, r.Answered = false, false
	}
	return r
}

// parseTunnelTarget splits "tcp://ip:port" or "icmp://ip".
func parseTunnelTarget(target string) (string, netip.AddrPort, error) {
	scheme, rest, ok := strings.Cut(target, "://")
	if !ok {
		return "", netip.AddrPort{}, fmt.Errorf("probe target %q: want tcp://ip:port or icmp://ip", target)
	}
	switch scheme {
	case "tcp":
		ap, err := netip.ParseAddrPort(rest)
		if err != nil || ap.Port() == 0 {
			return "", netip.AddrPort{}, fmt.Errorf("probe target %q: want tcp://ip:port with an IP literal and a port", target)
		}
		return scheme, netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port()), nil
	case "icmp":
		a, err := netip.ParseAddr(strings.TrimSuffix(strings.TrimPrefix(rest, "["), "]"))
		if err != nil || a.Zone() != "" {
			return "", netip.AddrPort{}, fmt.Errorf("probe target %q: want icmp://ip with an IP literal", target)
		}
		return scheme, netip.AddrPortFrom(a.Unmap(), 0), nil
	}
	return "", netip.AddrPort{}, fmt.Errorf("probe target %q: unknown scheme %q (want tcp or icmp)", target, scheme)
}

func probeTCP(ctx context.Context, addr netip.AddrPort) ProbeResult {
	r := ProbeResult{Method: "tcp"}
	var d net.Dialer
	start := time.Now()
	c, err := d.DialContext(ctx, "tcp", addr.String())
	r.Latency = time.Since(start)
	if err == nil {
		c.Close()
		r.OK, r.Answered, r.Class = true, true, "ok"
		return r
	}
	if couldNotProbe(err) {
		r.Err, r.Class = err, "error"
		return r
	}
	r.Class = string(Classify(err))
	r.Answered = r.Class == string(ClassRefused)
	r.Detail = err.Error()
	return r
}

// couldNotProbe reports errors that say nothing about the network: the
// socket could not be made or bound.
func couldNotProbe(err error) bool {
	var se *os.SyscallError
	if errors.As(err, &se) && (se.Syscall == "socket" || se.Syscall == "bind" || se.Syscall == "setsockopt") {
		return true
	}
	return errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE) || errors.Is(err, syscall.ENOBUFS) ||
		errors.Is(err, syscall.EAFNOSUPPORT)
}

// maxForeignICMP bounds how many unrelated ICMP packets (a raw socket sees
// every one the host receives) a probe reads before giving up.
const maxForeignICMP = 1000

func probeICMP(ctx context.Context, ip netip.Addr) ProbeResult {
	r := ProbeResult{Method: "icmp"}
	sock, err := openICMP(ip)
	r.Method = sock.method
	if err != nil {
		r.Class, r.Err = "error", err
		return r
	}
	defer sock.conn.Close()
	if dl, ok := ctx.Deadline(); ok {
		if err := sock.conn.SetDeadline(dl); err != nil {
			r.Class, r.Err = "error", err
			return r
		}
	}
	// A datagram socket's echo id is its port, set by the kernel, which
	// also hands it only its own replies; a raw socket sees every ICMP
	// packet, so id, sequence and a random payload identify ours.
	var nonce [16]byte
	_, _ = rand.Read(nonce[:])
	e := echoID{id: int(binary.BigEndian.Uint16(nonce[0:2])), seq: int(binary.BigEndian.Uint16(nonce[2:4])), nonce: nonce[:]}
	msg := icmp.Message{Type: sock.echo, Body: &icmp.Echo{ID: e.id, Seq: e.seq, Data: e.nonce}}
	b, err := msg.Marshal(nil)
	if err != nil {
		r.Class, r.Err = "error", err
		return r
	}
	// Cancelling ctx (not only its deadline) must end the read too.
	stop := context.AfterFunc(ctx, func() { sock.conn.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	start := time.Now()
	if _, err := sock.conn.WriteTo(b, sock.dst); err != nil {
		r.Latency = time.Since(start)
		if couldNotProbe(err) {
			r.Class, r.Err = "error", err
			return r
		}
		r.Class, r.Detail = string(Classify(err)), err.Error()
		return r
	}
	return sock.await(ctx, r, ip, e, start)
}

// icmpSocket is an ICMP socket for one echo, and how it speaks.
type icmpSocket struct {
	conn        *icmp.PacketConn
	dst         net.Addr
	method      string // "icmp" or "icmp-raw"
	proto       int
	echo, reply icmp.Type
}

// echoID is what identifies our echo and its reply.
type echoID struct {
	id, seq int
	nonce   []byte
}

// openICMP opens an unprivileged ICMP datagram socket ("ping socket"),
// allowed when the process's group is within net.ipv4.ping_group_range,
// and falls back to a raw socket, which needs CAP_NET_RAW.
func openICMP(ip netip.Addr) (icmpSocket, error) {
	s := icmpSocket{method: "icmp", proto: 1, echo: ipv4.ICMPTypeEcho, reply: ipv4.ICMPTypeEchoReply}
	dgram, raw, listen := "udp4", "ip4:icmp", "0.0.0.0"
	if ip.Is6() {
		dgram, raw, listen = "udp6", "ip6:ipv6-icmp", "::"
		s.proto, s.echo, s.reply = 58, ipv6.ICMPTypeEchoRequest, ipv6.ICMPTypeEchoReply
	}
	conn, err := icmp.ListenPacket(dgram, listen)
	s.dst = &net.UDPAddr{IP: ip.AsSlice()}
	if err != nil && (errors.Is(err, syscall.EACCES) || errors.Is(err, syscall.EPERM) || errors.Is(err, syscall.EPROTONOSUPPORT)) {
		// Not in ping_group_range: a raw socket, if we hold CAP_NET_RAW.
		conn, err = icmp.ListenPacket(raw, listen)
		s.dst, s.method = &net.IPAddr{IP: ip.AsSlice()}, "icmp-raw"
	}
	if err != nil {
		return s, fmt.Errorf("opening an icmp socket (needs net.ipv4.ping_group_range to include the process's group, or CAP_NET_RAW): %w", err)
	}
	s.conn = conn
	return s, nil
}

// await reads until our echo's reply, an error about it, or the deadline.
func (s icmpSocket) await(ctx context.Context, r ProbeResult, ip netip.Addr, e echoID, start time.Time) ProbeResult {
	buf := make([]byte, 1500)
	for range maxForeignICMP {
		n, from, err := s.conn.ReadFrom(buf)
		r.Latency = time.Since(start)
		if err != nil {
			r.Class, r.Detail = string(Classify(err)), err.Error()
			if ctx.Err() != nil {
				r.Class = string(ClassTimeout)
			}
			return r
		}
		m, err := icmp.ParseMessage(s.proto, buf[:n])
		if err != nil {
			continue
		}
		switch body := m.Body.(type) {
		case *icmp.Echo:
			if m.Type != s.reply || body.Seq != e.seq || !bytes.Equal(body.Data, e.nonce) {
				continue
			}
			if s.method == "icmp-raw" && (body.ID != e.id || !sameIP(from, ip)) {
				continue
			}
			r.OK, r.Answered, r.Class = true, true, "ok"
			return r
		case *icmp.DstUnreach:
			if quotesOurEcho(body.Data, s.proto, e.id, e.seq) {
				r.Class = string(ClassNoRoute)
				r.Detail = fmt.Sprintf("icmp destination unreachable (code %d) from %s", m.Code, from)
				return r
			}
		}
	}
	r.Class, r.Detail = string(ClassTimeout), "too many unrelated icmp packets before the reply"
	return r
}

func sameIP(a net.Addr, ip netip.Addr) bool {
	var got net.IP
	switch a := a.(type) {
	case *net.IPAddr:
		got = a.IP
	case *net.UDPAddr:
		got = a.IP
	}
	g, ok := netip.AddrFromSlice(got)
	return ok && g.Unmap() == ip
}

// quotesOurEcho reports whether the quoted packet in an ICMP error (the
// original IP header and at least 8 bytes of what followed) is our echo.
func quotesOurEcho(quoted []byte, proto, id, seq int) bool {
	var hl int
	switch {
	case proto == 1 && len(quoted) >= 20:
		hl = int(quoted[0]&0x0f) * 4
	case proto == 58 && len(quoted) >= 40:
		hl = 40
	default:
		return false
	}
	if len(quoted) < hl+8 {
		return false
	}
	e := quoted[hl:]
	return int(binary.BigEndian.Uint16(e[4:6])) == id && int(binary.BigEndian.Uint16(e[6:8])) == seq
}
