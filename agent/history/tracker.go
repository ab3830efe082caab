package history

import (
	"time"

	"github.com/edgeheal/edgeheal/wire"
)

// state is what a second of a target counts as.
type state int

const (
	unobserved state = iota // the agent did not see it (not running, a probe not made, no pod)
	healthy
	pending // bad, not confirmed yet: dark if it is confirmed, healthy if it is not
	dark
	degraded // given up on, or broken in a way edgeheal cannot fix (an uplink's fixed feature)
)

// classify is what a check's state counts as, and false for a check that
// is not a target (a component, the clock).
func classify(c wire.Check) (state, bool) {
	switch c.Kind {
	case wire.KindPeer:
		switch c.State {
		case wire.CheckOK:
			return healthy, true
		case "suspect":
			return pending, true
		case wire.CheckDown, wire.CheckHealing:
			return dark, true
		case wire.CheckDegraded:
			return degraded, true
		}
		return unobserved, true // unknown: the device gave no answer
	case wire.KindWorkload:
		switch c.State {
		case wire.CheckOK:
			return healthy, true
		case "suspect":
			return pending, true
		case wire.CheckDown:
			return dark, true
		}
		return unobserved, true // unknown, no-pod
	case wire.KindUplink:
		switch {
		case c.State == "absent":
			return unobserved, true
		case c.Healthy:
			return healthy, true
		}
		return degraded, true // drift in a dry run, a fixed feature, an error: not healed by edgeheal
	}
	return unobserved, false
}

// worst is the node's state from its targets': dark if any is, then
// pending, degraded, healthy; unobserved when none was observed.
func worst(states []state) state {
	out := unobserved
	rank := map[state]int{unobserved: 0, healthy: 1, degraded: 2, pending: 3, dark: 4}
	for _, s := range states {
		if rank[s] > rank[out] {
			out = s
		}
	}
	return out
}

// pend is time a target spent bad but not confirmed, not yet counted.
type pend struct {
	at   time.Time
	secs float64
}

// tracker is one target's (or the whole node's) seconds per hour and per
// day.
type tracker struct {
	Hours   ring   `json:"hours"`
	Days    ring   `json:"days"`
	All     counts `json:"all"` // since the history began: what the metrics count
	pending []pend
	last    state // the state of the last sweep
}

func newTracker() *tracker {
	return &tracker{Hours: newRing(time.Hour), Days: newRing(24 * time.Hour)}
}

// observe counts the secs up to t, whose sweep saw state s. The time up to
// the first good observation after a dark one was dark: an incident runs
// from its last good observation to its first good one again. Time that
// was pending is counted once the state says what it was: dark when the
// target went on to dark or degraded, healthy otherwise. The seconds go to
// the bucket they began in.
func (tr *tracker) observe(s state, t time.Time, secs float64) {
	prev := tr.last
	tr.last = s
	if s == healthy && (prev == dark || prev == degraded) {
		s = prev
	}
	t = t.Add(-time.Duration(secs * float64(time.Second)))
	if s == pending {
		if n := len(tr.pending); n > 0 && tr.pending[n-1].at.Truncate(time.Hour).Equal(t.Truncate(time.Hour)) {
			tr.pending[n-1].secs += secs
			tr.pending[n-1].at = t
		} else {
			tr.pending = append(tr.pending, pend{at: t, secs: secs})
		}
		return
	}
	if len(tr.pending) > 0 {
		was := healthy
		if s == dark || s == degraded {
			was = dark
		}
		for _, p := range tr.pending {
			tr.add(was, p.at, p.secs)
		}
		tr.pending = tr.pending[:0]
	}
	tr.add(s, t, secs)
}

func (tr *tracker) add(s state, t time.Time, secs float64) {
	if s == unobserved || secs <= 0 {
		return
	}
	for _, c := range []*counts{tr.Hours.at(t, hoursKept), tr.Days.at(t, daysKept), &tr.All} {
		if c == nil {
			continue
		}
		switch s {
		case healthy:
			c.Healthy += secs
		case dark:
			c.Dark += secs
		case degraded:
			c.Degraded += secs
		}
	}
}

// opened counts an incident that opened at t.
func (tr *tracker) opened(t time.Time) {
	for _, c := range []*counts{tr.Hours.at(t, hoursKept), tr.Days.at(t, daysKept), &tr.All} {
		if c != nil {
			c.Incidents++
		}
	}
}
