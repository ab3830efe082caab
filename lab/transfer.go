package lab

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"sync"
	"time"
)

// Bulk transfers between the pod or the edge and the cloud: what a
// path-MTU blackhole kills while every small packet passes (docs/lab.md,
// "Faults"). The cloud runs a plain TCP server on every address; a
// transfer from the pod goes through the tunnel, one from the edge over
// the uplink.

// TransferPort is the cloud's transfer server's port, on every address.
const TransferPort = 5201

// Direction is which way a transfer's bulk data flows.
type Direction string

// The directions of a transfer.
const (
	Download Direction = "down" // the cloud sends, the pod or edge receives
	Upload   Direction = "up"   // the pod or edge sends, the cloud receives
)

// transferMax bounds the size of one transfer the server accepts.
const transferMax = 64 << 20

// transferServer is the cloud's side: it reads a 5-byte request (the
// direction, 'D' or 'U', and the size as a big-endian uint32), then sends
// that many bytes and closes (D), or reads them and answers one byte (U).
type transferServer struct {
	ln   net.Listener
	wg   sync.WaitGroup
	mu   sync.Mutex
	open map[net.Conn]struct{}
}

// ensureTransfer starts the cloud's transfer server once.
func (l *Lab) ensureTransfer() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return errors.New("lab is closed")
	}
	if l.xfer != nil {
		return nil
	}
	var ln net.Listener
	err := l.Do(Cloud, func() error {
		var err error
		ln, err = net.Listen("tcp4", fmt.Sprintf(":%d", TransferPort))
		return err
	})
	if err != nil {
		return fmt.Errorf("starting the transfer server: %w", err)
	}
	s := &transferServer{ln: ln, open: map[net.Conn]struct{}{}}
	s.wg.Add(1)
	go s.serve()
	l.xfer = s
	return nil
}

func (s *transferServer) serve() {
	defer s.wg.Done()
	for {
		c, err := s.ln.Accept()
		if err != nil {
			return
		}
		s.mu.Lock()
		s.open[c] = struct{}{}
		s.mu.Unlock()
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			s.handle(c)
			s.mu.Lock()
			delete(s.open, c)
			s.mu.Unlock()
			c.Close()
		}()
	}
}

func (s *transferServer) handle(c net.Conn) {
	_ = c.SetDeadline(time.Now().Add(2 * time.Minute))
	var hdr [5]byte
	if _, err := io.ReadFull(c, hdr[:]); err != nil {
		return
	}
	n := int64(binary.BigEndian.Uint32(hdr[1:]))
	if n > transferMax {
		return
	}
	switch hdr[0] {
	case 'D':
		_, _ = io.CopyN(c, zeros{}, n)
	case 'U':
		if _, err := io.CopyN(io.Discard, c, n); err == nil {
			_, _ = c.Write([]byte{'k'})
		}
	}
}

// close stops the server and every transfer in progress.
func (s *transferServer) close() {
	if s == nil {
		return
	}
	s.ln.Close()
	s.mu.Lock()
	for c := range s.open {
		c.Close()
	}
	s.mu.Unlock()
	s.wg.Wait()
}

// zeros is an endless reader of zero bytes.
type zeros struct{}

func (zeros) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}

// TransferTarget is where a transfer from node goes: the cloud's tunnel
// address from the pod (through the tunnel), its public address from the
// edge (over the uplink).
func (l *Lab) TransferTarget(from Node) (netip.AddrPort, error) {
	switch from {
	case Pod:
		return netip.AddrPortFrom(l.CloudTunnelAddr(), TransferPort), nil
	case Edge:
		return netip.AddrPortFrom(l.CloudPublicAddr(), TransferPort), nil
	}
	return netip.AddrPort{}, fmt.Errorf("transfers start in the pod or the edge, not %q", from)
}

// Transfer makes one new TCP connection from the pod (through the tunnel)
// or the edge (over the uplink) to the cloud and moves size bytes the way
// dir says, until ctx ends. It returns how long it took from the connect
// to the last byte acknowledged (an upload: the cloud's answer that it has
// them all; a download: the end of the stream).
func (l *Lab) Transfer(ctx context.Context, from Node, dir Direction, size int) (time.Duration, error) {
	if size < 0 || size > transferMax {
		return 0, fmt.Errorf("transfer of %d bytes: want 0..%d", size, transferMax)
	}
	to, err := l.TransferTarget(from)
	if err != nil {
		return 0, err
	}
	if err := l.ensureTransfer(); err != nil {
		return 0, err
	}
	start := time.Now()
	var c net.Conn
	err = l.Do(from, func() error {
		var err error
		c, err = (&net.Dialer{}).DialContext(ctx, "tcp4", to.String())
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("connecting to %s from %s: %w", to, from, err)
	}
	defer c.Close()
	stop := context.AfterFunc(ctx, func() { c.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	hdr := [5]byte{'D'}
	if dir == Upload {
		hdr[0] = 'U'
	}
	binary.BigEndian.PutUint32(hdr[1:], uint32(size))
	if _, err := c.Write(hdr[:]); err != nil {
		return 0, l.transferErr(ctx, dir, to, err)
	}
	switch dir {
	case Download:
		got, err := io.Copy(io.Discard, c)
		if err == nil && got != int64(size) {
			err = fmt.Errorf("got %d of %d bytes", got, size)
		}
		if err != nil {
			return 0, l.transferErr(ctx, dir, to, err)
		}
	case Upload:
		if _, err := io.CopyN(c, zeros{}, int64(size)); err != nil {
			return 0, l.transferErr(ctx, dir, to, err)
		}
		var ack [1]byte
		if _, err := io.ReadFull(c, ack[:]); err != nil {
			return 0, l.transferErr(ctx, dir, to, err)
		}
	default:
		return 0, fmt.Errorf("unknown direction %q", dir)
	}
	return time.Since(start), nil
}

func (l *Lab) transferErr(ctx context.Context, dir Direction, to netip.AddrPort, err error) error {
	if ctx.Err() != nil {
		err = ctx.Err()
	}
	return fmt.Errorf("transfer %s with %s: %w", dir, to, err)
}

// Sysctl writes value to /proc/sys/<key> (key with slashes, e.g.
// "net/ipv4/tcp_mtu_probing") inside the node's namespace. Network sysctls
// are per namespace: the machine's own are never touched.
func (l *Lab) Sysctl(n Node, key, value string) error {
	h, ok := l.ns[n]
	if !ok {
		return fmt.Errorf("unknown node %q", n)
	}
	return writeSysctl(h, key, value)
}
