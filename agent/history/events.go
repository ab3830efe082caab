package history

import (
	"strings"
	"time"
	"unicode/utf8"

	"github.com/edgeheal/edgeheal/agent/core"
	"github.com/edgeheal/edgeheal/wire"
)

// The actions that are repairs of a target (not configuration, not a
// workload's word to its tunnel).
var notRepairs = map[string]bool{"keepalive": true, "link-up": true, "suspect-tunnel": true}

// Event records what an event says of an incident: it opens one (an
// incident of a target, or a drift of an uplink), adds a repair tried
// (an action on the target or its tunnel), names what holds it (an uplink
// outage, the clock), marks it given up, or closes it (recovered, or the
// fix of a drift). Events about anything else (the outbox, a component)
// are not a target's and are left out.
func (b *Book) Event(e core.Event) {
	b.mu.Lock()
	defer b.mu.Unlock()
	switch e.Kind {
	case wire.EventIncident:
		if e.Target == "outbox" || (e.Result != "" && e.Result != "opened") {
			return
		}
		b.open(e, began(e))
	case wire.EventOffloadDrift:
		b.open(e, e.Time)
	case wire.EventAction:
		b.repair(e)
	case "uplink-outage", "clock", "held":
		if t := b.openOf(e.Target); t != nil {
			t.open.Diagnosis = cut(e.Summary, diagnosisKept)
			b.update(t.open)
		}
	case wire.EventGaveUp:
		if t := b.openOf(e.Target); t != nil {
			t.open.GaveUp = true
			b.update(t.open)
		}
	case wire.EventRecovered:
		if t := b.openOf(e.Target); t != nil {
			b.close(t, e.Time, e.Duration, healedBy(e))
		}
	}
}

// began is an incident event's start: its last good observation.
func began(e core.Event) time.Time {
	if s, ok := e.Evidence["began"].(string); ok {
		if t, err := time.Parse(time.RFC3339Nano, s); err == nil && !t.After(e.Time) {
			return t
		}
	}
	return e.Time
}

// healedBy reads a recovery's "how": "healed by handshake" is the rung.
func healedBy(e core.Event) string {
	how, _ := e.Evidence["how"].(string)
	if rung, ok := strings.CutPrefix(how, "healed by "); ok {
		return rung
	}
	return ""
}

func (b *Book) open(e core.Event, start time.Time) {
	kind := b.kindOf(e)
	t := b.target(kind, e.Target)
	if t.open != nil {
		return // already open (a drift repeated, an event seen twice)
	}
	t.open = &wire.Incident{ID: e.ID, Kind: kind, Target: e.Target, Start: start, Diagnosis: cut(e.Summary, diagnosisKept)}
	t.Tr.opened(start)
	b.whole.opened(start)
	b.keep(t.open)
	b.changed++
}

// openOf is the account with an open incident of the target named name,
// nil if none: its own, or its kind's "others" when it has none.
func (b *Book) openOf(name string) *target {
	kind := b.kindOfName(name)
	t, ok := b.targets[kind+"/"+name]
	if !ok {
		t, ok = b.targets[kind+"/others"]
	}
	if !ok || t.open == nil || t.open.Target != name {
		return nil
	}
	return t
}

func (b *Book) kindOfName(name string) string { return b.kindOf(core.Event{Target: name}) }

// repair records an action on open incidents: of its target, or of every
// peer of the tunnel it acted on as a whole; an offload fix closes the
// drift it fixed.
func (b *Book) repair(e core.Event) {
	if notRepairs[e.Action] || e.Result == "skipped" {
		return
	}
	for _, t := range b.targets {
		if t.open == nil || !(t.open.Target == e.Target || strings.HasPrefix(t.open.Target, e.Target+"/") && t.Kind == wire.KindPeer) {
			continue
		}
		if len(t.open.Repairs) < repairsKept {
			t.open.Repairs = append(t.open.Repairs, e.Action)
		}
		b.update(t.open)
		b.changed++
		if e.Action == "offload-off" && e.Result == "changed" {
			b.close(t, e.Time, e.Duration, "offload-off")
		}
	}
}

// close ends t's incident: secs is its length as the event measured it
// (monotonic), else it ends at end.
func (b *Book) close(t *target, end time.Time, secs float64, by string) {
	in := t.open
	t.open = nil
	if secs > 0 {
		in.End = in.Start.Add(time.Duration(secs * float64(time.Second)))
	} else {
		in.End = end
	}
	if in.End.Before(in.Start) {
		in.End = in.Start
	}
	in.DurationSeconds = in.End.Sub(in.Start).Seconds()
	in.HealedBy = by
	b.update(in)
	if by == "" {
		by = "itself"
	}
	t.Closed = append(t.Closed, closedInc{End: in.End, Seconds: in.DurationSeconds, HealedBy: by, GaveUp: in.GaveUp})
	if over := len(t.Closed) - closedKept; over > 0 {
		t.Closed = append(t.Closed[:0:0], t.Closed[over:]...)
	}
	b.changed++
	b.closed++
}

// cut is s in at most n bytes: whole as long as it fits, else cut at a
// character and ended with "…".
func cut(s string, n int) string {
	if len(s) <= n {
		return s
	}
	end := n - len("…")
	for end > 0 && !utf8.RuneStart(s[end]) {
		end--
	}
	return s[:end] + "…"
}
