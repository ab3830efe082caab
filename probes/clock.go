package probes

import (
	"fmt"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// ClockStatus is the state of the system clock as WireGuard cares about it.
// A handshake initiation carries a TAI64N timestamp and the responder drops
// any that is not later than the last one it accepted from us, so a clock
// stepped backwards makes our handshakes fail until the wall clock passes
// the old time again; an unsynchronised clock is the usual reason for such
// a step (NTP catching up after boot on a node without an RTC).
type ClockStatus struct {
	// Synchronized: the kernel says an NTP daemon keeps the clock in sync
	// (STA_UNSYNC clear, clock state not TIME_ERROR).
	Synchronized bool
	// SteppedBack: the wall clock went backwards relative to the monotonic
	// clock by at least Clock.MinStep since an earlier Check, and the time
	// it lost has not passed yet (peers may still reject our handshakes).
	SteppedBack bool
	// Offset is the kernel's estimated offset from true time (adjtimex).
	Offset time.Duration
	Detail string // one line for a human
}

// DefaultMinStep is the smallest backward step Clock reports. NTP slews at
// most 500 ppm (0.5 ms per second), so rounds seconds apart never see a
// slew this large; WireGuard's timestamps have a resolution of about 16 ms.
const DefaultMinStep = 100 * time.Millisecond

// Clock reads the kernel's clock sync status and detects a backwards step
// of the wall clock between calls. The zero value is ready to use. Safe for
// concurrent use.
type Clock struct {
	// MinStep is the smallest backward step reported; DefaultMinStep if 0.
	MinStep time.Duration

	mu         sync.Mutex
	havePrev   bool
	prevWall   time.Time
	prevMono   time.Duration
	steppedBy  time.Duration // the last backward step seen
	stepUntilM time.Duration // monotonic time until which it still matters

	// Seams for tests; nil means the real clock and adjtimex(2).
	sample   func() (wall time.Time, mono time.Duration)
	adjtimex func(*unix.Timex) (int, error)
}

var monoBase = time.Now()

func realSample() (time.Time, time.Duration) {
	now := time.Now()
	return now.Round(0), now.Sub(monoBase)
}

// Check reads the kernel's sync status with adjtimex(2) in read-only mode
// (no privilege needed) and compares how far the wall and monotonic clocks
// moved since the previous Check. The first Check cannot see a step. Once a
// step of d back is seen, SteppedBack stays true for d of monotonic time:
// that is how long peers may keep rejecting handshakes stamped with the
// now-earlier wall clock. Check errors only if adjtimex fails.
func (c *Clock) Check() (ClockStatus, error) {
	sample, adj := c.sample, c.adjtimex
	if sample == nil {
		sample = realSample
	}
	if adj == nil {
		adj = unix.Adjtimex
	}
	minStep := c.MinStep
	if minStep <= 0 {
		minStep = DefaultMinStep
	}

	var tx unix.Timex // Modes 0: read only
	state, err := adj(&tx)
	if err != nil {
		return ClockStatus{}, fmt.Errorf("reading clock status (adjtimex): %w", err)
	}
	wall, mono := sample()

	c.mu.Lock()
	defer c.mu.Unlock()
	if c.havePrev {
		// Positive: the wall clock moved less than real time did.
		back := (mono - c.prevMono) - wall.Sub(c.prevWall)
		if back >= minStep {
			c.steppedBy = back
			c.stepUntilM = mono + back
		}
	}
	c.havePrev, c.prevWall, c.prevMono = true, wall, mono

	st := ClockStatus{
		Synchronized: tx.Status&unix.STA_UNSYNC == 0 && state != unix.TIME_ERROR,
		SteppedBack:  c.steppedBy > 0 && mono < c.stepUntilM,
	}
	st.Offset = time.Duration(tx.Offset) * time.Microsecond
	if tx.Status&unix.STA_NANO != 0 {
		st.Offset = time.Duration(tx.Offset)
	}
	switch {
	case st.SteppedBack:
		st.Detail = fmt.Sprintf("wall clock stepped back %s; WireGuard peers reject our handshakes for up to %s more",
			c.steppedBy.Round(time.Millisecond), (c.stepUntilM - mono).Round(time.Second))
	case !st.Synchronized && state == unix.TIME_ERROR:
		st.Detail = "clock not synchronized (kernel clock state TIME_ERROR)"
	case !st.Synchronized:
		st.Detail = "clock not synchronized (STA_UNSYNC: no NTP daemon disciplines it)"
	default:
		st.Detail = fmt.Sprintf("clock synchronized, offset %s", st.Offset)
	}
	return st, nil
}
