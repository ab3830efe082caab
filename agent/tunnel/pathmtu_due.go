package tunnel

import (
	"fmt"
	"time"

	"github.com/edgeheal/edgeheal/netfix"
)

// When the path MTU is checked. A check sends a full-size echo each way of
// each path, about 6.3 KB on a cellular uplink; at a fixed 2 s that is
// 270 MB a day, whether or not anything crosses the path that a smaller
// path MTU would hurt. So a check runs when something did since the last
// (TCP packets larger than netfix.MinClampMTU, or TCP connections opened,
// on the tunnel or its uplink: the traffic watch's counters), at most
// every interval and within a budget of checks an hour, and every idle
// interval otherwise (docs/operations/tunnels.md, "What a check costs").
// A workload's hint and an MTU reset check at once, outside the budget:
// they are rare, and each is a reason of its own.

// mtuDue is what decides whether a round checks the path MTU.
type mtuDue struct {
	Now  time.Time
	Last time.Time // the last check (zero: none yet)
	// Interval is the shortest time between checks, Idle the longest.
	Interval, Idle time.Duration
	Hint           bool // a workload's hint is waiting
	Reset          bool // the tunnel's MTU is no longer what edgeheal set
	// Back: the tunnel carries traffic again after it was dark (a modem
	// that attached again may have come back on another path).
	Back bool
	// Watched: the traffic watch could be read; Traffic says what it
	// counted since the last check ("" nothing). Unwatched, the path is
	// checked every interval, as the only way not to miss a blackhole.
	Watched bool
	Traffic string
	// Tokens are the checks the budget allows now.
	Tokens float64
	// RelaxAt is when a larger path will have held relax_after (zero:
	// none is growing): one check then raises the clamp.
	RelaxAt time.Time
}

// why is the reason this round checks the path MTU, "" when it does not.
func (d mtuDue) why() string {
	switch {
	case d.Hint:
		return "a workload's hint"
	case d.Reset:
		return "the tunnel's MTU was changed"
	case d.Last.IsZero():
		return "the first check"
	case d.Now.Sub(d.Last) < d.Interval, d.Tokens < 1:
		return ""
	case d.Back:
		return "the tunnel carries traffic again"
	case !d.Watched:
		return "no traffic watch: every interval"
	case !d.RelaxAt.IsZero() && !d.Now.Before(d.RelaxAt):
		return "a larger path held relax_after"
	case d.Traffic != "":
		return d.Traffic
	case d.Now.Sub(d.Last) >= d.Idle:
		return "the idle interval"
	}
	return ""
}

// mtuBudget is a bucket of checks: perHour at most, refilled at perHour an
// hour.
type mtuBudget struct {
	perHour float64
	tokens  float64
	at      time.Time // when tokens was last brought up to date
}

// now brings the bucket up to now and returns its tokens.
func (b *mtuBudget) now(now time.Time) float64 {
	if b.at.IsZero() {
		b.tokens = b.perHour
	} else if d := now.Sub(b.at); d > 0 {
		b.tokens = min(b.perHour, b.tokens+d.Hours()*b.perHour)
	}
	b.at = now
	return b.tokens
}

// spend takes one check from the bucket (never below empty).
func (b *mtuBudget) spend(now time.Time) { b.tokens = max(0, b.now(now)-1) }

// trafficSince says what the watch counted between two readings, "" when
// nothing: a table written again starts from zero, which is new traffic
// only if it counted something since.
func trafficSince(before, now netfix.TrafficCounts) string {
	large, opens := now.Large, now.Opens
	if now.Large >= before.Large && now.Opens >= before.Opens {
		large, opens = now.Large-before.Large, now.Opens-before.Opens
	}
	switch {
	case large > 0 && opens > 0:
		return fmt.Sprintf("traffic: %d large TCP packets, %d connections opened", large, opens)
	case large > 0:
		return fmt.Sprintf("traffic: %d large TCP packets", large)
	case opens > 0:
		return fmt.Sprintf("traffic: %d connections opened", opens)
	}
	return ""
}

// relaxAt is when a way's larger path will have held relax_after, the
// earliest of the two (zero: none is growing).
func (s mtuState) relaxAt(after time.Duration) time.Time {
	var at time.Time
	for _, w := range []mtuWay{s.Tunnel, s.Uplink} {
		if w.Clamp > 0 && !w.GrowSince.IsZero() {
			if t := w.GrowSince.Add(after); at.IsZero() || t.Before(at) {
				at = t
			}
		}
	}
	return at
}
