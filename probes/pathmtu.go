package probes

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"slices"
	"syscall"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/net/icmp"
	"golang.org/x/net/ipv4"
	"golang.org/x/net/ipv6"
	"golang.org/x/sys/unix"
)

// Path-MTU probes: ICMP echoes of given sizes with the Don't Fragment bit
// set, sent at once, each answered or not. A path that drops what is too
// big without an ICMP "fragmentation needed" (a path-MTU blackhole)
// answers the small ones and never the large ones; nothing else tells it
// from a healthy path, since every small packet passes.

// SizeProbe says what ProbeSizes sends.
type SizeProbe struct {
	// Sizes are the IP packet sizes to send, header included, one echo
	// each. The smallest is what says whether the target answers at all.
	Sizes []int
	// Timeout is the longest it waits for any answer.
	Timeout time.Duration
	// Settle is how long it waits for the rest once an echo was answered,
	// beyond twice the first answer's latency (a larger packet takes a
	// little longer, a lost one forever); each later answer extends it by
	// Settle again. Zero waits the whole Timeout for every echo not yet
	// answered.
	Settle time.Duration
}

// SizesResult is one ProbeSizes.
//
// Err set means the observation could not be made (no socket, bad target,
// the caller's context ended) and must never trigger a repair; otherwise
// each size was sent (or refused locally, LocalTooBig) and is answered or
// not.
type SizesResult struct {
	Err     error
	Method  string // "icmp" (a ping socket) or "icmp-raw"
	Answers []SizeAnswer
}

// SizeAnswer is the fate of one echo.
type SizeAnswer struct {
	Size     int
	Answered bool
	Latency  time.Duration // when answered
	// LocalTooBig: the host would not send it, the route's link MTU is
	// smaller (EMSGSIZE); it says nothing of the path.
	LocalTooBig bool
}

// Largest is the largest size answered (0: none).
func (r SizesResult) Largest() int {
	n := 0
	for _, a := range r.Answers {
		if a.Answered && a.Size > n {
			n = a.Size
		}
	}
	return n
}

// SmallestMissed is the smallest size sent and not answered (0: none).
func (r SizesResult) SmallestMissed() int {
	n := 0
	for _, a := range r.Answers {
		if !a.Answered && !a.LocalTooBig && (n == 0 || a.Size < n) {
			n = a.Size
		}
	}
	return n
}

// Answered reports whether any echo was answered.
func (r SizesResult) Answered() bool { return r.Largest() > 0 }

// Answer is the fate of the echo of size (ok false: not sent).
func (r SizesResult) Answer(size int) (SizeAnswer, bool) {
	for _, a := range r.Answers {
		if a.Size == size {
			return a, true
		}
	}
	return SizeAnswer{}, false
}

// echoOverhead is what an echo adds to its payload: the IP header and the
// ICMP echo header (8 bytes).
func echoOverhead(ip netip.Addr) int {
	if ip.Is6() {
		return 40 + 8
	}
	return 20 + 8
}

// nonceLen is the random part of every echo's payload.
const nonceLen = 16

// MinProbeSize is the smallest size ProbeSizes sends to an IPv4 target:
// the headers and the nonce that identifies the reply.
func MinProbeSize(ip netip.Addr) int { return echoOverhead(ip) + nonceLen }

// ProbeSizes sends one ICMP echo of each size to target with the Don't
// Fragment bit set (IP_PMTUDISC_PROBE: DF, and the route's learnt path
// MTU ignored, so that the path itself is measured), all at once, and
// waits for the answers as SizeProbe says. It does not retry. Sockets are
// made in the calling thread's network namespace: an unprivileged ping
// socket where net.ipv4.ping_group_range allows it, a raw one (needs
// CAP_NET_RAW) otherwise. A size larger than the local link's MTU is
// refused by the kernel and reported as LocalTooBig.
func ProbeSizes(ctx context.Context, target netip.Addr, p SizeProbe) SizesResult {
	target = target.Unmap()
	var r SizesResult
	if !target.IsValid() || target.Zone() != "" {
		r.Err = fmt.Errorf("path MTU probe: target %q is not an IP address", target)
		return r
	}
	if p.Timeout <= 0 {
		r.Err = fmt.Errorf("path MTU probe of %s: timeout %s is not positive", target, p.Timeout)
		return r
	}
	sizes := slices.Clone(p.Sizes)
	slices.Sort(sizes)
	sizes = slices.Compact(sizes)
	if len(sizes) == 0 || sizes[0] < MinProbeSize(target) || sizes[len(sizes)-1] > 65535 {
		r.Err = fmt.Errorf("path MTU probe of %s: sizes %v: want %d..65535", target, p.Sizes, MinProbeSize(target))
		return r
	}
	if err := ctx.Err(); err != nil {
		r.Err = err
		return r
	}
	sock, err := openDFEcho(target)
	r.Method = sock.method
	if err != nil {
		r.Err = fmt.Errorf("path MTU probe of %s: %w", target, err)
		return r
	}
	defer sock.conn.Close()
	r.Answers, err = sock.run(ctx, target, sizes, p)
	if err == nil && ctx.Err() != nil {
		err = ctx.Err() // cut short by the caller: observed nothing
	}
	if err != nil {
		r.Err = fmt.Errorf("path MTU probe of %s: %w", target, err)
		r.Answers = nil
	}
	return r
}

// dfEcho is an ICMP socket that sends with DF set.
type dfEcho struct {
	conn        net.PacketConn
	dst         net.Addr
	method      string
	proto       int
	echo, reply icmp.Type
}

// openDFEcho opens an ICMP socket (ping socket, else raw) with
// IP_MTU_DISCOVER (IPV6_MTU_DISCOVER) set to PROBE.
func openDFEcho(ip netip.Addr) (dfEcho, error) {
	e := dfEcho{method: "icmp", proto: 1, echo: ipv4.ICMPTypeEcho, reply: ipv4.ICMPTypeEchoReply}
	family, level, opt := unix.AF_INET, unix.IPPROTO_IP, unix.IP_MTU_DISCOVER
	probe := unix.IP_PMTUDISC_PROBE
	if ip.Is6() {
		e.proto, e.echo, e.reply = 58, ipv6.ICMPTypeEchoRequest, ipv6.ICMPTypeEchoReply
		family, level, opt, probe = unix.AF_INET6, unix.IPPROTO_IPV6, unix.IPV6_MTU_DISCOVER, unix.IPV6_PMTUDISC_PROBE
	}
	fd, err := unix.Socket(family, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, e.proto)
	e.dst = &net.UDPAddr{IP: ip.AsSlice()}
	if err != nil && (errors.Is(err, unix.EACCES) || errors.Is(err, unix.EPERM) || errors.Is(err, unix.EPROTONOSUPPORT)) {
		fd, err = unix.Socket(family, unix.SOCK_RAW|unix.SOCK_CLOEXEC, e.proto)
		e.dst, e.method = &net.IPAddr{IP: ip.AsSlice()}, "icmp-raw"
	}
	if err != nil {
		return e, fmt.Errorf("opening an icmp socket (needs net.ipv4.ping_group_range to include the process's group, or CAP_NET_RAW): %w", os.NewSyscallError("socket", err))
	}
	if err := unix.SetsockoptInt(fd, level, opt, probe); err != nil {
		unix.Close(fd)
		return e, fmt.Errorf("setting the DF bit: %w", os.NewSyscallError("setsockopt", err))
	}
	if e.method == "icmp-raw" && ip.Is6() {
		// The kernel computes the ICMPv6 checksum of a raw socket only
		// when asked (offset 2 of the ICMPv6 header).
		if err := unix.SetsockoptInt(fd, unix.IPPROTO_RAW, unix.IPV6_CHECKSUM, 2); err != nil {
			unix.Close(fd)
			return e, fmt.Errorf("asking for ICMPv6 checksums: %w", os.NewSyscallError("setsockopt", err))
		}
	}
	f := os.NewFile(uintptr(fd), "icmp-df")
	e.conn, err = net.FilePacketConn(f)
	f.Close()
	if err != nil {
		return e, fmt.Errorf("wrapping the icmp socket: %w", err)
	}
	return e, nil
}

// run sends the echoes and collects the answers.
func (e dfEcho) run(ctx context.Context, ip netip.Addr, sizes []int, p SizeProbe) ([]SizeAnswer, error) {
	var nonce [nonceLen]byte
	_, _ = rand.Read(nonce[:])
	id := int(binary.BigEndian.Uint16(nonce[0:2]))
	seq0 := int(binary.BigEndian.Uint16(nonce[2:4]))
	start := time.Now()
	limit := start.Add(p.Timeout)
	if dl, ok := ctx.Deadline(); ok && dl.Before(limit) {
		limit = dl
	}
	deadline, first := limit, true
	stop := context.AfterFunc(ctx, func() { e.conn.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	answers, bySeq, err := e.send(ctx, ip, sizes, id, seq0, nonce[:])
	if err != nil {
		return nil, err
	}
	pending := len(bySeq)
	buf := make([]byte, 65536)
	for pending > 0 {
		if err := e.conn.SetReadDeadline(deadline); err != nil {
			return nil, err
		}
		n, from, err := e.conn.ReadFrom(buf)
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				break
			}
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			return nil, err
		}
		at := time.Since(start)
		m, err := icmp.ParseMessage(e.proto, buf[:n])
		if err != nil || m.Type != e.reply {
			continue
		}
		echo, ok := m.Body.(*icmp.Echo)
		if !ok || len(echo.Data) < nonceLen || string(echo.Data[:nonceLen]) != string(nonce[:]) {
			continue
		}
		if e.method == "icmp-raw" && (echo.ID != id || !sameIP(from, ip)) {
			continue
		}
		i, ok := bySeq[echo.Seq]
		if !ok || answers[i].Answered || len(echo.Data)+echoOverhead(ip) != answers[i].Size {
			continue
		}
		answers[i].Answered, answers[i].Latency = true, at
		pending--
		if p.Settle > 0 {
			// The rest get twice the first answer's latency and Settle,
			// and Settle beyond every later answer: later is lost, not
			// slow.
			until := start.Add(at + p.Settle)
			if first {
				until, first = start.Add(2*at+p.Settle), false
			} else if until.Before(deadline) {
				until = deadline
			}
			deadline = minTime(until, limit)
		}
	}
	return answers, nil
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

// RouteLink is the link a route leads out of, and the MTU packets on that
// route get: the route's own mtu metric when it has one, else the link's.
type RouteLink struct {
	Link string
	MTU  int
}

// RouteTo reads which link carries packets to ip (RTM_GETROUTE, as `ip
// route get` does) and the MTU packets on that route get.
func (n *Netlink) RouteTo(ip netip.Addr) (RouteLink, error) {
	rs, err := n.h.RouteGet(ip.Unmap().AsSlice())
	if err != nil {
		return RouteLink{}, fmt.Errorf("finding the route to %s: %w", ip, err)
	}
	if len(rs) == 0 || rs[0].LinkIndex <= 0 {
		return RouteLink{}, fmt.Errorf("finding the route to %s: no link carries it", ip)
	}
	l, err := n.h.LinkByIndex(rs[0].LinkIndex)
	if err != nil {
		return RouteLink{}, fmt.Errorf("finding the link of the route to %s: %w", ip, err)
	}
	rl := RouteLink{Link: l.Attrs().Name, MTU: l.Attrs().MTU}
	if rs[0].MTU > 0 && rs[0].MTU < rl.MTU {
		rl.MTU = rs[0].MTU
	}
	return rl, nil
}

// LinkMTU reads one link's MTU; a missing link matches os.ErrNotExist.
func (n *Netlink) LinkMTU(name string) (int, error) {
	l, err := n.h.LinkByName(name)
	if err != nil {
		var lnf netlink.LinkNotFoundError
		if errors.As(err, &lnf) || errors.Is(err, unix.ENODEV) {
			return 0, fmt.Errorf("reading the MTU of %s: %w: %w", name, os.ErrNotExist, err)
		}
		return 0, fmt.Errorf("reading the MTU of %s: %w", name, err)
	}
	return l.Attrs().MTU, nil
}

// send sends one echo of each size; bySeq maps the sequence number of
// each echo sent to its index in answers.
func (e dfEcho) send(ctx context.Context, ip netip.Addr, sizes []int, id, seq0 int, nonce []byte) ([]SizeAnswer, map[int]int, error) {
	answers := make([]SizeAnswer, len(sizes))
	bySeq := map[int]int{}
	for i, size := range sizes {
		answers[i].Size = size
		seq := (seq0 + i) & 0xffff
		data := make([]byte, size-echoOverhead(ip))
		copy(data, nonce)
		b, err := (&icmp.Message{Type: e.echo, Body: &icmp.Echo{ID: id, Seq: seq, Data: data}}).Marshal(nil)
		if err != nil {
			return nil, nil, err
		}
		if _, err := e.conn.WriteTo(b, e.dst); err != nil {
			if errors.Is(err, syscall.EMSGSIZE) {
				answers[i].LocalTooBig = true
				continue
			}
			if couldNotProbe(err) || ctx.Err() != nil {
				return nil, nil, err
			}
			continue // the network said no (no route...): not answered
		}
		bySeq[seq] = i
	}
	return answers, bySeq, nil
}
