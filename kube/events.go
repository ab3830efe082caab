package kube

import (
	"fmt"
	"time"
)

// Event types, as Kubernetes spells them.
const (
	Normal  = "Normal"
	Warning = "Warning"
)

// Event reasons besides the condition's own (a Warning event with the
// condition's reason opens an incident).
const (
	ReasonRecovered    = "OverlayRecovered" // the condition is True again
	ReasonRepair       = "RepairAction"     // edgeheal acted on a target (its last_action changed)
	ReasonTaintAdded   = "TaintAdded"
	ReasonTaintRemoved = "TaintRemoved"
)

// Note is an event to record on the Node, before aggregation.
type Note struct {
	Type, Reason, Message string
	Time                  time.Time
}

// Notes is what changed from one round to the next, as events, a pure
// function: an incident when the condition turns False or its reason
// changes, a recovery when it turns True again after being False (with how
// long it was not), and an action for every check whose last action
// changed (or that is new with one). known is the last verdict that was not Unknown (nil: none yet),
// so a spell of Unknown between two verdicts (the agent restarting or
// reloading) neither repeats an incident nor hides a recovery; an Unknown
// verdict itself is no event. prev is nil in the first round: then no
// actions are reported (a restart does not repeat them). falseSince is
// when the condition last turned False.
func Notes(known *Verdict, v Verdict, prev, cur *Status, falseSince, now time.Time) []Note {
	var out []Note
	prevV := known
	switch {
	case v.Status == Unknown:
	case v.Status == False && (prevV == nil || prevV.Status != False || prevV.Reason != v.Reason):
		out = append(out, Note{Type: Warning, Reason: v.Reason, Message: v.Message, Time: now})
	case v.Status == True && prevV != nil && prevV.Status == False:
		msg := fmt.Sprintf("edgeheal: the overlay is healthy again (was %s", prevV.Reason)
		if !falseSince.IsZero() {
			msg += fmt.Sprintf(" for %s", now.Sub(falseSince).Round(100*time.Millisecond))
		}
		out = append(out, Note{Type: Normal, Reason: ReasonRecovered, Message: msg + ")", Time: now})
	}
	if prev == nil || cur == nil {
		return out
	}
	last := map[string]string{}
	for _, c := range prev.Checks {
		last[c.Kind+"/"+c.Target] = c.LastAction
	}
	for _, c := range cur.Checks {
		// A check new since the last round (an uplink a reload added) with
		// an action already: that action is news too.
		if c.LastAction != "" && last[c.Kind+"/"+c.Target] != c.LastAction {
			out = append(out, Note{Type: Normal, Reason: ReasonRepair,
				Message: fmt.Sprintf("edgeheal: %s %s: %s", c.Kind, c.Target, c.LastAction), Time: now})
		}
	}
	return out
}

// Correlator aggregates and rate-limits events per Node the way kubelet's
// recorder (client-go tools/record's EventCorrelator) does: the same type,
// reason and message within Window is one Event whose count rises; and a
// token bucket of Burst tokens, one back every Refill, bounds how many
// writes a flapping node makes. It holds state; time comes in as a value.
type Correlator struct {
	Window time.Duration // default 10 min
	Burst  int           // default 25
	Refill time.Duration // default 5 min: kubelet's spam filter (1 per 300 s, burst 25)

	seen   map[string]*seenEvent
	tokens float64
	at     time.Time
	// Dropped counts events the bucket refused.
	Dropped int
}

type seenEvent struct {
	Name  string
	Count int
	First time.Time
	Last  time.Time
}

// Write is what to send for one event: a new Event (Count 1) or a patch of
// Name's count and last timestamp.
type Write struct {
	Note
	Name  string
	Count int
	First time.Time
	New   bool
}

// Correlate decides the write for n; ok is false when the bucket is empty
// and the event is dropped. name makes the name of a new Event.
func (c *Correlator) Correlate(n Note, name func() string) (Write, bool) {
	if c.seen == nil {
		c.seen = map[string]*seenEvent{}
		c.tokens = float64(c.burst())
		c.at = n.Time
	}
	if el := n.Time.Sub(c.at); el > 0 {
		c.tokens += float64(el) / float64(c.refill())
		if c.tokens > float64(c.burst()) {
			c.tokens = float64(c.burst())
		}
		c.at = n.Time
	}
	if c.tokens < 1 {
		c.Dropped++
		return Write{}, false
	}
	c.tokens--
	key := n.Type + "\x00" + n.Reason + "\x00" + n.Message
	for k, s := range c.seen { // forget what aged out of the window
		if n.Time.Sub(s.Last) > c.window() {
			delete(c.seen, k)
		}
	}
	if s, ok := c.seen[key]; ok {
		s.Count++
		s.Last = n.Time
		return Write{Note: n, Name: s.Name, Count: s.Count, First: s.First}, true
	}
	s := &seenEvent{Name: name(), Count: 1, First: n.Time, Last: n.Time}
	c.seen[key] = s
	return Write{Note: n, Name: s.Name, Count: 1, First: n.Time, New: true}, true
}

// Forget makes the next event with name's key a new Event (the API server
// no longer has it: events expire after an hour).
func (c *Correlator) Forget(name string) {
	for k, s := range c.seen {
		if s.Name == name {
			delete(c.seen, k)
		}
	}
}

func (c *Correlator) window() time.Duration {
	if c.Window > 0 {
		return c.Window
	}
	return 10 * time.Minute
}

func (c *Correlator) burst() int {
	if c.Burst > 0 {
		return c.Burst
	}
	return 25
}

func (c *Correlator) refill() time.Duration {
	if c.Refill > 0 {
		return c.Refill
	}
	return 5 * time.Minute
}
