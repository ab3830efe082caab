// Package clock is the agent's clock guard: it reads the kernel's clock
// status for the tunnels' repair ladders and shows it as the "clock" check.
// It only reads; what a bad clock holds back is the tunnels' decision.
package clock

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/edgeheal/edgeheal/agent/core"
	"github.com/edgeheal/edgeheal/probes"
	"github.com/edgeheal/edgeheal/wire"
)

// verdictOf is the clock-sanity policy for tunnel repairs. WireGuard peers
// reject a handshake initiation whose TAI64N timestamp is not later than the
// last one they accepted from us (replay protection, WireGuard protocol
// 2026). With a clock that stepped backwards every forced handshake, bounce
// or restart only sends more initiations the peer drops: the clock is the
// likely cause and every disruptive rung is held. An unreadable clock status
// holds them too: a guard that could not be observed lets no action through.
//
// An unsynchronised clock (no NTP discipline, STA_UNSYNC) is only a doubt:
// many edge nodes run without NTP and keep good time from their RTC, and
// holding every repair on them would leave the offload fault and a hub
// restart unrepaired. So the cheap rungs (a forced handshake, reresolve) may
// run, and only the bouncing rungs (bounce, restart-unit) are held, with the
// clock named as the likely cause if the handshake did not help.
//
// ok is true when every disruptive rung may run; soft is true when only the
// bouncing ones are held; cause says why not.
func verdictOf(cs probes.ClockStatus, err error) (ok, soft bool, cause string) {
	detail := ""
	if cs.Detail != "" {
		detail = " (" + cs.Detail + ")"
	}
	switch {
	case err != nil:
		return false, false, fmt.Sprintf("clock status unknown: %v", err)
	case cs.SteppedBack:
		return false, false, "clock stepped back" + detail + ": peers drop handshakes with an older timestamp; likely cause, not bouncing the tunnel"
	case !cs.Synchronized:
		return false, true, "clock not synchronised" + detail + ": if peers drop our handshakes this is the likely cause; not bouncing the tunnel"
	}
	return true, false, ""
}

// check is the clock's check: unsynchronised is a warning (healthy,
// state "unsynchronised"), stepped back or unreadable is unhealthy.
func check(cs probes.ClockStatus, err error) wire.Check {
	ok, soft, cause := verdictOf(cs, err)
	c := wire.Check{Kind: wire.KindClock, Target: "system", State: "ok", Healthy: ok || soft, Detail: cause}
	switch {
	case soft:
		c.State = "unsynchronised"
	case !ok:
		c.State = "suspect"
	}
	return c
}

// Guard reads the kernel's clock status for the tunnels' ladders and
// shows it as the "clock" check. It is the component "clock": it samples
// every sampleEvery, so that a step back between two incidents is seen and
// the check stays fresh, and a ladder that needs the verdict reads the
// clock again if the last sample is older than a second. Safe for
// concurrent use.
type Guard struct {
	clock core.Clock

	mu       sync.Mutex
	status   probes.ClockStatus
	err      error
	read     bool
	at       time.Time // when status was read
	progress time.Time
}

// sampleEvery is how often the clock guard samples the clock.
const sampleEvery = 10 * time.Second

var (
	_ core.Component = (*Guard)(nil)
	_ core.Checker   = (*Guard)(nil)
)

// New returns a guard over clock.
func New(clock core.Clock) *Guard { return &Guard{clock: clock} }

// Name implements Component.
func (c *Guard) Name() string { return "clock" }

// Health implements Component.
func (c *Guard) Health() core.Health {
	c.mu.Lock()
	defer c.mu.Unlock()
	return core.Health{LastProgress: c.progress, Deadline: 3 * sampleEvery}
}

// Run samples the clock every sampleEvery until ctx ends.
func (c *Guard) Run(ctx context.Context) error {
	t := time.NewTicker(sampleEvery)
	defer t.Stop()
	for {
		c.sample()
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

func (c *Guard) sample() (probes.ClockStatus, error) {
	cs, err := c.clock.Status()
	now := c.clock.Now()
	c.mu.Lock()
	defer c.mu.Unlock()
	c.status, c.err, c.read, c.at, c.progress = cs, err, true, now, now
	return cs, err
}

// Verdict is the clock-sanity policy (verdictOf) on a sample at most a
// second old: whether every disruptive rung may run (ok), only the ones
// that do not bounce the tunnel (soft), and why not (cause).
func (c *Guard) Verdict() (ok, soft bool, cause string) {
	c.mu.Lock()
	cs, err, fresh := c.status, c.err, c.read && c.clock.Now().Sub(c.at) < time.Second
	c.mu.Unlock()
	if !fresh {
		cs, err = c.sample()
	}
	return verdictOf(cs, err)
}

// Checks implements Checker: the clock check, once the clock was read.
func (c *Guard) Checks() []wire.Check {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.read {
		return nil
	}
	return []wire.Check{check(c.status, c.err)}
}

// Check reads the clock once, for `edgeheal check`.
func (c *Guard) Check() wire.Check {
	cs, err := c.clock.Status()
	return check(cs, err)
}
