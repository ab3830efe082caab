package offload

import (
	"fmt"
	"time"

	"github.com/edgeheal/edgeheal/agent/core"
	"github.com/edgeheal/edgeheal/wire"
)

// An offload fight: something else (ModemManager, a driver that resets
// the NIC on every change, a script) keeps turning a guarded feature back
// on. The guard keeps turning it off, each time within milliseconds, but
// reports the fight as one incident rather than as two events, an
// evidence bundle and a tunnel nudge per flip: a flip every 100 ms would
// otherwise rotate every real incident bundle out of the store.

const (
	// fightWindow: a drift within this of the last fix continues a fight;
	// a fight with no drift for this long has ended.
	fightWindow = 60 * time.Second
	// fightReportEvery: how often an ongoing fight is reported.
	fightReportEvery = 60 * time.Second
	// nudgeEvery: the tunnels are nudged at most this often per link.
	nudgeEvery = 10 * time.Second
)

// The events that report a fight have kind wire.EventOffloadFight and
// result started, ongoing (once a minute) or ended. Evidence "new_fixes"
// counts the fixes since the previous one, for the drift counter.

// offloadFight counts the fixes on one link that came in quick succession.
type fight struct {
	first      time.Time // the first fix of the run
	last       time.Time // the last fix
	count      int       // fixes in the run
	sinceCount int       // fixes since the last report
	reportedAt time.Time // the last report (started or ongoing)
	nudgedAt   time.Time
}

// fighting reports whether the run is a fight: more than one fix within
// fightWindow of each other.
func (f *fight) fighting() bool { return f.count > 1 }

// fix records a fix at now and says whether it is news (the first of a
// run: report it as a drift and an action, as usual), and what fight
// event is due (started, ongoing; nil for none).
func (f *fight) fix(link string, now time.Time) (news bool, ev *core.Event) {
	if f.count == 0 || now.Sub(f.last) >= fightWindow {
		*f = fight{first: now, last: now, count: 1, nudgedAt: f.nudgedAt}
		return true, nil
	}
	f.count++
	f.sinceCount++
	f.last = now
	switch {
	case f.count == 2:
		f.reportedAt, f.sinceCount = now, 0
		return false, &core.Event{Time: now, Kind: wire.EventOffloadFight, Target: link, Result: "started",
			Summary: fmt.Sprintf("%s: TX checksum offload turned back on %s after edgeheal turned it off: something else keeps changing it (ModemManager, a driver reset, a script); edgeheal keeps it off and reports the fight once a minute",
				link, now.Sub(f.first).Round(time.Millisecond)),
			Evidence: map[string]any{"fixes": f.count, "new_fixes": 1, "since": f.first.UTC().Format(time.RFC3339Nano)}}
	case now.Sub(f.reportedAt) >= fightReportEvery:
		n, over := f.sinceCount, now.Sub(f.reportedAt).Round(time.Second)
		f.reportedAt, f.sinceCount = now, 0
		return false, &core.Event{Time: now, Kind: wire.EventOffloadFight, Target: link, Result: "ongoing",
			Summary: fmt.Sprintf("%s: turned back on %d times in %s by something else (%d since %s); edgeheal keeps turning it off",
				link, n, over, f.count, f.first.UTC().Format(time.RFC3339)),
			Evidence: map[string]any{"fixes": f.count, "new_fixes": n, "period_seconds": over.Seconds(), "since": f.first.UTC().Format(time.RFC3339Nano)}}
	}
	return false, nil
}

// calm ends a fight that saw no drift for fightWindow, with its report
// (nil if there was no fight to end).
func (f *fight) calm(link string, now time.Time) *core.Event {
	if !f.fighting() || now.Sub(f.last) < fightWindow {
		return nil
	}
	ev := &core.Event{Time: now, Kind: wire.EventOffloadFight, Target: link, Result: "ended", Duration: f.last.Sub(f.first).Seconds(),
		Summary: fmt.Sprintf("%s: the offload fight ended: turned back on %d times in %s, each time turned off again",
			link, f.count-1, f.last.Sub(f.first).Round(time.Second)),
		Evidence: map[string]any{"fixes": f.count, "new_fixes": f.sinceCount, "since": f.first.UTC().Format(time.RFC3339Nano), "last": f.last.UTC().Format(time.RFC3339Nano)}}
	*f = fight{nudgedAt: f.nudgedAt}
	return ev
}

// nudge says whether the tunnels should be told of this fix: a fix in a
// fight is the same cause again, so at most one nudge per nudgeEvery.
func (f *fight) nudge(now time.Time) bool {
	if !f.nudgedAt.IsZero() && now.Sub(f.nudgedAt) < nudgeEvery {
		return false
	}
	f.nudgedAt = now
	return true
}

// detail is what the link's check adds during a fight.
func (f *fight) detail() string {
	if !f.fighting() {
		return ""
	}
	return fmt.Sprintf("fighting: turned back on %d times since %s", f.count-1, f.first.UTC().Format(time.RFC3339))
}
