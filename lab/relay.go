package lab

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// FaultKind names what the modem does to frames.
type FaultKind string

// The faults the modem relay injects, in both directions.
const (
	FaultPass      FaultKind = "pass"      // copy every frame verbatim
	FaultBlackhole FaultKind = "blackhole" // drop every IP frame
	FaultLoss      FaultKind = "loss"      // drop each IP frame with probability LossPct/100
	FaultDelay     FaultKind = "delay"     // hold each IP frame Delay ± Jitter
	// FaultMTU drops every IP packet longer than MTU bytes, both ways and
	// silently: a carrier path with a smaller MTU that sends no ICMP
	// "fragmentation needed" back (a path-MTU blackhole).
	FaultMTU FaultKind = "mtu"
)

// Fault is the modem's behaviour. The zero value is Pass.
type Fault struct {
	Kind    FaultKind     `json:"kind"`
	LossPct float64       `json:"loss_pct,omitempty"`
	Delay   time.Duration `json:"delay,omitempty"`
	Jitter  time.Duration `json:"jitter,omitempty"`
	// MTU is the largest IP packet (header included) FaultMTU lets through.
	MTU int `json:"mtu,omitempty"`
}

// The IP packet sizes a FaultMTU may be set to: IPv4's minimum MTU up to
// the largest IP packet.
const (
	MinFaultMTU = 68
	MaxFaultMTU = 65535
)

// Validate reports whether f can be applied.
func (f Fault) Validate() error {
	switch f.Kind {
	case "", FaultPass, FaultBlackhole:
		return nil
	case FaultLoss:
		if f.LossPct < 0 || f.LossPct > 100 {
			return fmt.Errorf("loss %v%% is outside 0..100", f.LossPct)
		}
		return nil
	case FaultDelay:
		if f.Delay < 0 || f.Jitter < 0 || f.Jitter > f.Delay {
			return fmt.Errorf("delay %v jitter %v: want 0 <= jitter <= delay", f.Delay, f.Jitter)
		}
		return nil
	case FaultMTU:
		if f.MTU < MinFaultMTU || f.MTU > MaxFaultMTU {
			return fmt.Errorf("mtu %d is outside %d..%d", f.MTU, MinFaultMTU, MaxFaultMTU)
		}
		return nil
	}
	return fmt.Errorf("unknown fault %q", f.Kind)
}

func (f Fault) String() string {
	switch f.Kind {
	case FaultLoss:
		return fmt.Sprintf("loss %g%%", f.LossPct)
	case FaultDelay:
		return fmt.Sprintf("delay %v jitter %v", f.Delay, f.Jitter)
	case FaultMTU:
		return fmt.Sprintf("mtu %d (larger IP packets dropped, no ICMP)", f.MTU)
	case "":
		return string(FaultPass)
	}
	return string(f.Kind)
}

// relay copies Ethernet frames verbatim between two links of the modem
// namespace on AF_PACKET sockets. Like a NIC that mishandles offloaded
// checksums, it never completes a checksum the sender left to offload: the
// frame leaves with the partial checksum it came with.
//
// Like a carrier-grade NAT, it lets UDP reach the edge (link a) only from
// an address and port the edge has sent UDP to: a cloud that changes its
// address cannot reach the edge from the new one (WireGuard would roam to
// it) until the edge itself sends there.
type relay struct {
	ns   netns.NsHandle
	a, b string // link names inside ns

	mu    sync.Mutex // guards fault
	fault Fault

	// sockMu guards the sockets: readers and writers hold it shared for
	// the length of one call, so rebind never closes a descriptor in use
	// (whose number could be reused by an unrelated file).
	sockMu sync.RWMutex
	fa, fb int // current sockets; -1 while closed

	nat map[[6]byte]struct{} // remote ip:port the edge sent UDP to; guarded by mu

	stop     chan struct{}
	wg       sync.WaitGroup
	frames   atomic.Uint64 // forwarded
	dropped  atomic.Uint64 // dropped by a fault or a failed write
	filtered atomic.Uint64 // UDP to the edge from an address it never sent to
}

// udpRemote returns the remote (non-edge) IPv4 address and port of a UDP
// frame: the destination of an outgoing one (fromEdge), the source of an
// incoming one.
func udpRemote(frame []byte, fromEdge bool) (key [6]byte, ok bool) {
	const eth = 14
	if len(frame) < eth+20 || frame[12] != 0x08 || frame[13] != 0x00 {
		return key, false
	}
	ihl := int(frame[eth]&0x0f) * 4
	if frame[eth+9] != unix.IPPROTO_UDP || ihl < 20 || len(frame) < eth+ihl+8 {
		return key, false
	}
	udp := frame[eth+ihl:]
	if fromEdge {
		copy(key[:4], frame[eth+16:eth+20]) // destination address
		copy(key[4:], udp[2:4])             // destination port
	} else {
		copy(key[:4], frame[eth+12:eth+16]) // source address
		copy(key[4:], udp[0:2])             // source port
	}
	return key, true
}

// ipPacketLen is the length of the IP packet in an Ethernet frame, from its
// own header (IPv4 total length, IPv6 payload length plus the fixed
// header), or the frame's payload for anything else. The lab's links run
// without TSO and GRO on the modem path (offload off, the scenarios'
// default), so a frame is one packet as a carrier would see it; a TSO
// super-frame (offload on) is judged whole.
func ipPacketLen(frame []byte) int {
	const eth = 14
	if len(frame) < eth {
		return 0
	}
	switch {
	case frame[12] == 0x08 && frame[13] == 0x00 && len(frame) >= eth+4:
		return int(binary.BigEndian.Uint16(frame[eth+2 : eth+4]))
	case frame[12] == 0x86 && frame[13] == 0xdd && len(frame) >= eth+6:
		return 40 + int(binary.BigEndian.Uint16(frame[eth+4:eth+6]))
	}
	return len(frame) - eth
}

// isARP reports whether frame is an ARP frame (EtherType 0x0806).
func isARP(frame []byte) bool {
	return len(frame) >= 14 && frame[12] == 0x08 && frame[13] == 0x06
}

// startRelay opens the sockets and starts one goroutine per direction.
func startRelay(ns netns.NsHandle, a, b string) (*relay, error) {
	r := &relay{ns: ns, a: a, b: b, fa: -1, fb: -1, stop: make(chan struct{}), nat: map[[6]byte]struct{}{}}
	if err := r.rebind(); err != nil {
		return nil, err
	}
	r.wg.Add(2)
	go r.pump(true)
	go r.pump(false)
	return r, nil
}

// rebind closes the current sockets and opens new ones on the links as they
// are now (after a re-plug the link is a new one with the same name).
func (r *relay) rebind() error {
	var fa, fb int
	err := doIn(r.ns, func() error {
		var err error
		if fa, err = packetSocket(r.a); err != nil {
			return err
		}
		if fb, err = packetSocket(r.b); err != nil {
			unix.Close(fa)
			return err
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("binding relay: %w", err)
	}
	r.sockMu.Lock()
	closeFD(r.fa)
	closeFD(r.fb)
	r.fa, r.fb = fa, fb
	r.sockMu.Unlock()
	return nil
}

func closeFD(fd int) {
	if fd >= 0 {
		unix.Close(fd)
	}
}

func htons(v uint16) uint16 { return v<<8 | v>>8 }

// packetSocket opens a raw AF_PACKET socket bound to link, with a short
// receive timeout so that the pump notices stop and rebind.
func packetSocket(link string) (int, error) {
	ifi, err := net.InterfaceByName(link)
	if err != nil {
		return -1, fmt.Errorf("finding %s: %w", link, err)
	}
	fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, int(htons(unix.ETH_P_ALL)))
	if err != nil {
		return -1, fmt.Errorf("opening packet socket: %w", err)
	}
	sa := &unix.SockaddrLinklayer{Protocol: htons(unix.ETH_P_ALL), Ifindex: ifi.Index}
	if err := unix.Bind(fd, sa); err != nil {
		unix.Close(fd)
		return -1, fmt.Errorf("binding packet socket to %s: %w", link, err)
	}
	tv := unix.NsecToTimeval((50 * time.Millisecond).Nanoseconds())
	if err := unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
		unix.Close(fd)
		return -1, fmt.Errorf("setting receive timeout: %w", err)
	}
	return fd, nil
}

// pump forwards frames from a to b (aToB) or from b to a until stop.
func (r *relay) pump(aToB bool) {
	defer r.wg.Done()
	buf := make([]byte, 65536)
	for {
		select {
		case <-r.stop:
			return
		default:
		}
		r.sockMu.RLock()
		in := r.fb
		if aToB {
			in = r.fa
		}
		if in < 0 {
			r.sockMu.RUnlock()
			time.Sleep(10 * time.Millisecond)
			continue
		}
		n, from, err := unix.Recvfrom(in, buf, 0)
		r.sockMu.RUnlock()
		if err != nil {
			if errors.Is(err, unix.EAGAIN) || errors.Is(err, unix.EINTR) {
				continue
			}
			// The link went away (re-plug) or the socket was closed by
			// rebind: wait for the new socket.
			time.Sleep(10 * time.Millisecond)
			continue
		}
		if ll, ok := from.(*unix.SockaddrLinklayer); ok && ll.Pkttype == unix.PACKET_OUTGOING {
			continue // our own writes, seen again on this link
		}
		r.forward(aToB, buf[:n])
	}
}

// forward applies the fault to one frame and writes it to the other link.
func (r *relay) forward(aToB bool, frame []byte) {
	key, isUDP := udpRemote(frame, aToB)
	r.mu.Lock()
	f := r.fault
	if isUDP {
		if aToB {
			r.nat[key] = struct{}{}
		} else if _, ok := r.nat[key]; !ok {
			r.mu.Unlock()
			r.filtered.Add(1)
			return
		}
	}
	r.mu.Unlock()
	if isARP(frame) {
		// The modem answers for its own link: ARP between the host and its
		// next hop works through a cell outage (docs/lab.md, "Faults").
		r.write(aToB, frame)
		return
	}
	switch f.Kind {
	case FaultBlackhole:
		r.dropped.Add(1)
		return
	case FaultLoss:
		if rand.Float64()*100 < f.LossPct {
			r.dropped.Add(1)
			return
		}
	case FaultMTU:
		if ipPacketLen(frame) > f.MTU {
			r.dropped.Add(1)
			return
		}
	case FaultDelay:
		d := f.Delay
		if f.Jitter > 0 {
			d += time.Duration(rand.Int64N(int64(2*f.Jitter)+1)) - f.Jitter
		}
		c := append([]byte(nil), frame...)
		r.wg.Add(1)
		time.AfterFunc(d, func() {
			defer r.wg.Done()
			r.write(aToB, c)
		})
		return
	}
	r.write(aToB, frame)
}

func (r *relay) write(aToB bool, frame []byte) {
	r.sockMu.RLock()
	defer r.sockMu.RUnlock()
	out := r.fa
	if aToB {
		out = r.fb
	}
	if out < 0 {
		r.dropped.Add(1)
		return
	}
	if _, err := unix.Write(out, frame); err != nil {
		r.dropped.Add(1)
		return
	}
	r.frames.Add(1)
}

func (r *relay) setFault(f Fault) {
	r.mu.Lock()
	r.fault = f
	r.mu.Unlock()
}

func (r *relay) currentFault() Fault {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.fault.Kind == "" {
		return Fault{Kind: FaultPass}
	}
	return r.fault
}

// close stops both pumps, waits for delayed frames and closes the sockets.
func (r *relay) close() {
	if r == nil {
		return
	}
	close(r.stop)
	r.wg.Wait()
	r.sockMu.Lock()
	closeFD(r.fa)
	closeFD(r.fb)
	r.fa, r.fb = -1, -1
	r.sockMu.Unlock()
}
