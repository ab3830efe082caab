package probes

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// Netlink is the LinkWatcher backed by rtnetlink (github.com/vishvananda/netlink),
// bound to one network namespace. It only reads. It is safe for concurrent use.
type Netlink struct {
	h  *netlink.Handle
	ns netns.NsHandle // owned: a duplicate, closed by Close
}

var _ LinkWatcher = (*Netlink)(nil)

// NewNetlink returns a Netlink for the process's own network namespace,
// fixed at this call.
func NewNetlink() (*Netlink, error) {
	ns, err := ownNamespace()
	if err != nil {
		return nil, fmt.Errorf("reading the current network namespace: %w", err)
	}
	defer ns.Close()
	return NewNetlinkAt(ns)
}

// NewNetlinkAt returns a Netlink for the namespace ns. It keeps its own
// duplicate of ns, so the caller may close ns.
func NewNetlinkAt(ns netns.NsHandle) (*Netlink, error) {
	fd, err := unix.FcntlInt(uintptr(ns), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("duplicating the namespace handle: %w", err)
	}
	own := netns.NsHandle(fd)
	h, err := netlink.NewHandleAt(own)
	if err != nil {
		own.Close()
		return nil, fmt.Errorf("opening netlink in namespace %s: %w", own, err)
	}
	// rtnetlink answers within microseconds; a socket that stops answering
	// must not hold the offload guard forever.
	if err := h.SetSocketTimeout(netlinkTimeout); err != nil {
		h.Close()
		own.Close()
		return nil, fmt.Errorf("setting the netlink socket timeout: %w", err)
	}
	return &Netlink{h: h, ns: own}, nil
}

// netlinkTimeout bounds every request and its answer on the handle's
// sockets (SO_RCVTIMEO, SO_SNDTIMEO).
const netlinkTimeout = 2 * time.Second

// Close releases the netlink sockets and the namespace handle. Subscriptions
// end with their contexts.
func (n *Netlink) Close() error {
	n.h.Close()
	return n.ns.Close()
}

// dumpAttempts bounds the retries of a dump the kernel marked interrupted
// (the table changed while it was read: NLM_F_DUMP_INTR).
const dumpAttempts = 3

// Links implements LinkLister.
func (n *Netlink) Links() ([]Link, error) {
	var ls []netlink.Link
	var err error
	for range dumpAttempts {
		if ls, err = n.h.LinkList(); !errors.Is(err, netlink.ErrDumpInterrupted) {
			break
		}
	}
	if err != nil {
		return nil, fmt.Errorf("listing links: %w", err)
	}
	links := make([]Link, 0, len(ls))
	for _, l := range ls {
		links = append(links, toLink(l))
	}
	return links, nil
}

// DefaultRouteLinks implements LinkLister.
func (n *Netlink) DefaultRouteLinks() ([]int, error) {
	var idx []int
	for _, fam := range []int{netlink.FAMILY_V4, netlink.FAMILY_V6} {
		var rs []netlink.Route
		var err error
		for range dumpAttempts {
			if rs, err = n.h.RouteList(nil, fam); !errors.Is(err, netlink.ErrDumpInterrupted) {
				break
			}
		}
		if err != nil {
			return nil, fmt.Errorf("listing routes: %w", err)
		}
		for _, r := range rs {
			if !isDefault(r) {
				continue
			}
			if r.LinkIndex > 0 {
				idx = append(idx, r.LinkIndex)
			}
			for _, nh := range r.MultiPath {
				if nh != nil && nh.LinkIndex > 0 {
					idx = append(idx, nh.LinkIndex)
				}
			}
		}
	}
	return idx, nil
}

func isDefault(r netlink.Route) bool {
	if r.Dst == nil {
		return true
	}
	ones, _ := r.Dst.Mask.Size()
	return ones == 0
}

func toLink(l netlink.Link) Link {
	a := l.Attrs()
	kind := l.Type()
	switch {
	case a.Flags&net.FlagLoopback != 0:
		kind = "loopback"
	case kind == "device":
		kind = ""
	}
	return Link{Name: a.Name, Index: a.Index, Up: a.Flags&net.FlagUp != 0,
		NoCarrier: a.OperState == netlink.OperDown || a.OperState == netlink.OperLowerLayerDown, Kind: kind}
}

// Subscribe implements LinkWatcher with one RTNLGRP_LINK and one route
// subscription in the Netlink's namespace.
func (n *Netlink) Subscribe(ctx context.Context) (<-chan LinkEvent, error) {
	sub := &subscription{
		ctx:  ctx,
		done: make(chan struct{}),
		// Buffered so that a burst (a modem re-enumerating) does not stall
		// the kernel socket while the consumer works; the socket buffer is
		// the real bound, and an overflow breaks the subscription with an Err.
		lch: make(chan netlink.LinkUpdate, 64),
		rch: make(chan netlink.RouteUpdate, 64),
		out: make(chan LinkEvent, 16),
	}
	ns := n.ns
	if err := netlink.LinkSubscribeWithOptions(sub.lch, sub.done, netlink.LinkSubscribeOptions{
		Namespace: &ns, ErrorCallback: sub.onErr,
	}); err != nil {
		close(sub.done)
		return nil, fmt.Errorf("subscribing to link updates: %w", err)
	}
	if err := netlink.RouteSubscribeWithOptions(sub.rch, sub.done, netlink.RouteSubscribeOptions{
		Namespace: &ns, ErrorCallback: sub.onErr,
	}); err != nil {
		close(sub.done)
		for range sub.lch { // the link subscription's goroutine closes it
		}
		return nil, fmt.Errorf("subscribing to route updates: %w", err)
	}
	go sub.forward()
	return sub.out, nil
}

// subscription is one Subscribe: netlink's two update channels, forwarded
// as LinkEvents until ctx ends or a socket breaks.
type subscription struct {
	ctx     context.Context
	done    chan struct{} // closed to close the sockets
	stopped bool
	lch     chan netlink.LinkUpdate
	rch     chan netlink.RouteUpdate
	out     chan LinkEvent

	mu      sync.Mutex
	lastErr error
}

func (s *subscription) onErr(err error) {
	s.mu.Lock()
	s.lastErr = err
	s.mu.Unlock()
}

// stop closes the sockets: both receive goroutines end and close their
// channels.
func (s *subscription) stop() {
	if !s.stopped {
		s.stopped = true
		close(s.done)
	}
}

func (s *subscription) send(ev LinkEvent) {
	select {
	case s.out <- ev:
	case <-s.ctx.Done():
	}
}

// broken reports a socket that closed without being stopped.
func (s *subscription) broken(what string) {
	if s.stopped || s.ctx.Err() != nil {
		return // stopped on purpose, or already reported
	}
	s.mu.Lock()
	err := s.lastErr
	s.mu.Unlock()
	if err == nil {
		err = errors.New("socket closed")
	}
	s.send(LinkEvent{Err: fmt.Errorf("%s subscription ended: %w", what, err)})
}

// forward sends link and default-route changes on out, and closes out only
// after both of netlink's goroutines have ended.
func (s *subscription) forward() {
	defer close(s.out)
	defer s.stop()
	lch, rch, ctxDone := s.lch, s.rch, s.ctx.Done()
	for lch != nil || rch != nil {
		select {
		case <-ctxDone:
			ctxDone = nil
			s.stop() // then keep draining until both channels close
		case u, ok := <-lch:
			if !ok {
				lch = nil
				s.broken("link")
				s.stop()
				continue
			}
			if !s.stopped {
				s.send(LinkEvent{Link: toLink(u.Link), Deleted: u.Header.Type == unix.RTM_DELLINK})
			}
		case u, ok := <-rch:
			if !ok {
				rch = nil
				s.broken("route")
				s.stop()
				continue
			}
			if !s.stopped && isDefault(u.Route) {
				s.send(LinkEvent{DefaultRoute: true})
			}
		}
	}
}
