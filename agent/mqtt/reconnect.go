package mqtt

// The reconnect policy, as pure functions of time and random draws: when
// the next full connect may start, how long to wait between checks of the
// broker, and when the broker looks like it closes every connection it
// accepts.
//
// github.com/cenkalti/backoff/v5 was not taken: its randomness cannot be
// passed in (the table tests need it), and most of the policy is not a
// backoff: a cheap check of the broker gates the full connect, the backoff
// resets only after a connection lasted, and the gap between attempts has
// a jittered floor. What is left is a doubling and a jitter.

import (
	"time"

	"github.com/edgeheal/edgeheal/configs"
)

// Defaults of report.mqtt.reconnect, for a Config that leaves them zero
// (the configs package's defaults are the same).
var defaultReconnect = configs.Reconnect{
	ProbeInterval: configs.Duration(2 * time.Second),
	ConnectJitter: configs.Duration(500 * time.Millisecond),
	MinDelay:      configs.Duration(time.Second),
	MaxDelay:      configs.Duration(2 * time.Minute),
	StableAfter:   configs.Duration(time.Minute),
	StartJitter:   configs.Duration(2 * time.Second),
}

// withDefaults fills the zero fields of r that have a non-zero default.
// ConnectJitter, StableAfter and StartJitter may be 0 on purpose only in a
// config (where defaults.yaml sets them); here, in a literal, 0 means unset.
func withDefaults(r configs.Reconnect) configs.Reconnect {
	def := func(d *configs.Duration, v configs.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	def(&r.ProbeInterval, defaultReconnect.ProbeInterval)
	def(&r.MinDelay, defaultReconnect.MinDelay)
	def(&r.MaxDelay, defaultReconnect.MaxDelay)
	r.MaxDelay = max(r.MaxDelay, r.MinDelay)
	return r
}

// retry is the policy's state between full connects.
type retry struct {
	cfg     configs.Reconnect
	backoff time.Duration // the current step: MinDelay after a stable connection
	next    time.Time     // no full connect before this
	failed  int           // full connects in a row that failed or did not last
}

func newRetry(cfg configs.Reconnect) *retry {
	return &retry{cfg: cfg, backoff: cfg.MinDelay.D()}
}

// ended records the end of a full connect at now: one that failed
// (up < 0), or a connection that was up for up. A connection that lasted
// StableAfter resets the backoff; anything shorter counts as a failure and
// doubles it. Either way the next full connect waits a draw between half
// the backoff and all of it (rnd in [0,1)), so attempts never follow each
// other without a pause, and a fleet does not retry in step.
func (r *retry) ended(now time.Time, up time.Duration, rnd float64) {
	if up >= r.cfg.StableAfter.D() && up >= 0 {
		r.backoff, r.failed = r.cfg.MinDelay.D(), 0
	} else {
		if r.failed > 0 {
			r.backoff = min(2*r.backoff, r.cfg.MaxDelay.D())
		}
		r.failed++
	}
	r.next = now.Add(halfJitter(r.backoff, rnd))
}

// halfJitter is a draw between d/2 and d.
func halfJitter(d time.Duration, rnd float64) time.Duration {
	return d/2 + time.Duration(rnd*float64(d/2))
}

// probeWait is the wait before the next check of the broker: between 3/4
// and 5/4 of ProbeInterval, so that checks of a fleet do not stay in step.
func probeWait(interval time.Duration, rnd float64) time.Duration {
	return interval*3/4 + time.Duration(rnd*float64(interval/2))
}

// spread is a draw between 0 and d: the wait before the full connect once
// the broker answers (ConnectJitter), and before the first one at start
// (StartJitter).
func spread(d time.Duration, rnd float64) time.Duration {
	return time.Duration(rnd * float64(d))
}

// Closed-after-connect: the broker accepts the connection and closes it
// within kickedWithin, kickedAfter times in a row. Seen when a second
// client takes over the client id (two nodes with the same node.name),
// or the broker refuses what the client publishes (an ACL that disconnects,
// a packet larger than it allows).
const (
	kickedWithin = 10 * time.Second
	kickedAfter  = 3
)

// kicked counts connections in a row that the broker closed soon after
// accepting them. It is reset by one that lasted.
type kicked struct {
	inRow int
}

// ended records how a connection ended after up: closed by a broker that
// still answers (closed), or otherwise. It reports whether the condition
// starts now (the count reached kickedAfter) and whether it ended (a
// connection lasted kickedWithin after it had started). A short connection
// that ended otherwise (the agent aborted it, the broker went away)
// changes nothing.
func (k *kicked) ended(closed bool, up time.Duration) (started, ended bool) {
	switch {
	case closed && up < kickedWithin:
		k.inRow++
		return k.inRow == kickedAfter, false
	case up >= kickedWithin:
		was := k.active()
		k.inRow = 0
		return false, was
	}
	return false, false
}

// active reports whether the condition holds.
func (k *kicked) active() bool { return k.inRow >= kickedAfter }
