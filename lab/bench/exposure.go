package bench

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"strings"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/edgeheal/edgeheal/agent/system/ethnl"
	"github.com/edgeheal/edgeheal/lab"
	"github.com/edgeheal/edgeheal/lab/ktrace"
)

// Exposure is how long a re-plugged uplink carried traffic with TX checksum
// offload on, measured twice: as the bench saw it, and by the kernel's
// clock.
type Exposure struct {
	Created time.Time // the bench heard the kernel announce the new link (RTM_NEWLINK)
	Fixed   time.Time // first read showing every tx-checksum feature off; zero: not within the limit

	// By CLOCK_MONOTONIC (ktrace): Requested is when the lab asked for the
	// link; FixedKernel the last netdevice event that a process other than
	// the bench's (not a kernel thread) caused after it, up to the read that found the fix (and
	// 1 ms more, for a read that raced the notifier); zero without a trace
	// or such an event. The fix is one of those events, so the time between
	// is never shorter than the exposure, and never longer than the read.
	Requested   time.Duration
	FixedKernel time.Duration
	// Made is the bench's (the lab's) last netdevice event before the
	// first of another process: the link made, up to where the agent
	// could act on it; zero when FixedKernel is. The bench is one
	// process for all its labs: in a parallel run another lab's event of
	// the same instant counts as this one's making (so the agent's part,
	// the rest, is never overstated).
	Made time.Duration
	// TraceErr is why the kernel's trace could not be read for this
	// re-plug (FixedKernel is then zero); the bench's own figure stands.
	TraceErr error
}

// Duration is Fixed - Created, or 0 when it was not fixed.
func (e Exposure) Duration() time.Duration {
	if e.Fixed.IsZero() {
		return 0
	}
	return e.Fixed.Sub(e.Created)
}

// KernelDuration is FixedKernel - Requested, or 0 when there is no
// kernel figure.
func (e Exposure) KernelDuration() time.Duration {
	if e.FixedKernel == 0 {
		return 0
	}
	return e.FixedKernel - e.Requested
}

// raceSlack is how long after the read that found the fix a netdevice
// event still counts as the fix: the read and the notifier that records a
// change need not hold the same lock.
const raceSlack = time.Millisecond

// ReplugExposure re-plugs the lab's modem and measures the exposure of the
// new link: from its RTM_NEWLINK, seen by a subscription opened before the
// re-plug, to the first feature read (one ethtool netlink socket kept open
// in the edge namespace, read back to back) that finds every TX checksum
// feature off. The fix is seen at most one read and a 1 ms pause late:
// about 1.1 ms. The reads go through ethtool netlink (agent/system/ethnl),
// not the agent's backend choice, because the measurement must cost the
// machine little: a read there is about 30 µs and 11 kB (0.1 ms for the
// new link's first, which reads its name table too), where a SIOCETHTOOL
// read through safchain/ethtool took about 4 ms and 1 MiB, so that the
// measurement was up to ~5 ms late and, polling back to back, kept most
// of a core of this 2-core machine busy allocating while the agent it
// measured was fixing the link. Unlike lab.WaitUplinkTxChecksumOff after
// Replug returns, this does not count the rest of Replug's work (the
// modem side, the relay) as exposure. It waits at most limit for the fix.
//
// With a trace (nil: none), it also times the exposure by the kernel's
// clock, from the lab's request to create the link to the kernel's record
// of the fix (Exposure.KernelDuration): neither depends on when a
// goroutine of this process got to run on a busy machine. A trace that
// cannot be read costs only that figure (Exposure.TraceErr), not the
// re-plug's.
func ReplugExposure(ctx context.Context, l *lab.Lab, limit time.Duration, tr *ktrace.Trace) (Exposure, error) {
	var ex Exposure
	ns, err := netns.GetFromPath(l.NetnsPath(lab.Edge))
	if err != nil {
		return ex, fmt.Errorf("opening the edge namespace: %w", err)
	}
	defer ns.Close()
	nh, err := netlink.NewHandleAt(ns)
	if err != nil {
		return ex, fmt.Errorf("opening netlink in the edge: %w", err)
	}
	defer nh.Close()
	name := l.EdgeUplink()
	old, err := nh.LinkByName(name)
	if err != nil {
		return ex, fmt.Errorf("finding %s: %w", name, err)
	}
	var eth *ethnl.Conn
	if err := l.Do(lab.Edge, func() error {
		var err error
		eth, err = ethnl.Dial()
		return err
	}); err != nil {
		return ex, fmt.Errorf("opening ethtool netlink in the edge: %w", err)
	}
	defer eth.Close()
	updates := make(chan netlink.LinkUpdate, 64)
	done := make(chan struct{})
	defer close(done)
	if err := netlink.LinkSubscribeWithOptions(updates, done, netlink.LinkSubscribeOptions{Namespace: &ns}); err != nil {
		return ex, fmt.Errorf("watching edge links: %w", err)
	}
	if tr != nil {
		if _, err := tr.Take(); err != nil { // what came before
			ex.TraceErr = err
			tr = nil
		}
	}
	replugged := make(chan error, 1)
	go func() { replugged <- l.Replug(ctx) }()

	if ex.Created, err = waitNewLink(ctx, l, updates, replugged, name, old.Attrs().Index, limit); err != nil {
		return ex, err
	}
	var readAt time.Duration
	ex.Fixed, readAt = waitTxChecksumOff(ctx, eth, name, ex.Created.Add(limit))
	select {
	case err := <-replugged:
		if err != nil {
			return ex, err
		}
	case <-ctx.Done():
		return ex, ctx.Err()
	}
	ex.Requested = l.UplinkRequestedAt()
	if tr != nil && !ex.Fixed.IsZero() {
		evs, err := tr.Take()
		if err != nil {
			ex.TraceErr = err
			return ex, nil
		}
		ex.FixedKernel = lastOtherEvent(evs, os.Getpid(), ex.Requested, readAt+raceSlack)
		if ex.FixedKernel != 0 {
			ex.Made = madeAt(evs, os.Getpid(), ex.Requested)
		}
	}
	return ex, nil
}

// lastOtherEvent is the time of the last event in (from, to] that a
// process other than self caused (not a kernel thread: the kernel's own
// linkwatch follows the new link's carrier); zero when there is none.
func lastOtherEvent(evs []ktrace.Event, self int, from, to time.Duration) time.Duration {
	var last time.Duration
	for _, e := range evs {
		if e.TGID != self && !e.Kernel && e.At > from && e.At <= to && e.At > last {
			last = e.At
		}
	}
	return last
}

// madeAt is the time of self's last event after from and before the
// first event of another process (not a kernel thread) after from; zero
// when self has none there.
func madeAt(evs []ktrace.Event, self int, from time.Duration) time.Duration {
	first := time.Duration(math.MaxInt64)
	for _, e := range evs {
		if e.TGID != self && !e.Kernel && e.At > from && e.At < first {
			first = e.At
		}
	}
	var last time.Duration
	for _, e := range evs {
		if e.TGID == self && e.At > from && e.At < first && e.At > last {
			last = e.At
		}
	}
	return last
}

// MakingDuration is Made - Requested, or 0 when there is no such figure.
func (e Exposure) MakingDuration() time.Duration {
	if e.Made == 0 {
		return 0
	}
	return e.Made - e.Requested
}

// waitNewLink waits up to limit for the re-plugged uplink: an RTM_NEWLINK
// for name with an index other than oldIndex, and returns when it was seen.
// If Replug returns first without one (the subscription's buffer overran),
// it falls back to when the lab says it plugged the link. Replug's nil
// result is put back on replugged for the caller to see again.
func waitNewLink(ctx context.Context, l *lab.Lab, updates <-chan netlink.LinkUpdate, replugged chan error, name string, oldIndex int, limit time.Duration) (time.Time, error) {
	var created time.Time
	wait := time.NewTimer(limit)
	defer wait.Stop()
	for created.IsZero() {
		select {
		case u := <-updates:
			if u.Header.Type == unix.RTM_NEWLINK && u.Attrs().Name == name && u.Attrs().Index != oldIndex {
				created = time.Now()
			}
		case err := <-replugged:
			if err != nil {
				return created, err
			}
			replugged <- nil // seen by the caller again
			if created.IsZero() {
				// Missed the notification (buffer overrun): fall back to
				// when the lab says it plugged the link.
				select {
				case u := <-updates:
					if u.Attrs().Name == name && u.Attrs().Index != oldIndex {
						created = time.Now()
					}
				default:
					created = l.UplinkPluggedAt()
				}
			}
		case <-wait.C:
			return created, errors.New("the re-plugged uplink did not appear")
		case <-ctx.Done():
			return created, ctx.Err()
		}
	}
	return created, nil
}

// waitTxChecksumOff reads name's features back to back until every TX
// checksum feature is off, and returns when a read first found that (also
// by CLOCK_MONOTONIC); zero when deadline passed or ctx ended first.
func waitTxChecksumOff(ctx context.Context, eth *ethnl.Conn, name string, deadline time.Time) (time.Time, time.Duration) {
	for time.Now().Before(deadline) && ctx.Err() == nil {
		fs, err := eth.Features(name)
		now, mono := time.Now(), ktrace.Now()
		if err == nil && txChecksumOff(fs) {
			return now, mono
		}
		// A breath between reads: each takes the RTNL lock the agent's fix
		// needs too. (A shorter sleep would not help: an idle Go program
		// here sleeps at least about 1.1 ms.)
		time.Sleep(time.Millisecond)
	}
	return time.Time{}, 0
}

// txChecksumOff reports whether no tx-checksum feature is active.
func txChecksumOff(fs map[string]ethnl.State) bool {
	n := 0
	for name, s := range fs {
		if strings.HasPrefix(name, "tx-checksum-") && s.Available {
			n++
			if s.Active {
				return false
			}
		}
	}
	return n > 0
}
