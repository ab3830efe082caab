package outbox

// What goes first when the outbox is full: the decision, as pure
// functions of the queue.

import (
	"fmt"
	"strings"
	"time"

	"github.com/edgeheal/edgeheal/agent/core"
	"github.com/edgeheal/edgeheal/wire"
)

// Class is how much an event matters when the outbox must drop some:
// the lowest class goes first.
type Class int

const (
	// ClassDuplicate is an event that repeats one queued before it: same
	// kind, target, action and result (an offload fight, a component that
	// keeps failing the same way). Incidents are never duplicates.
	ClassDuplicate Class = iota
	// ClassInfo is every event that is neither an action nor an incident.
	ClassInfo
	// ClassAction is what the agent did about a problem, and a recovery
	// (which closes an incident: without it the cloud keeps an incident
	// open that ended).
	ClassAction
	// ClassIncident opens an incident, or says the agent gave up.
	ClassIncident
)

// Classes are every class, least important first.
var Classes = []Class{ClassDuplicate, ClassInfo, ClassAction, ClassIncident}

func (c Class) String() string {
	switch c {
	case ClassDuplicate:
		return "duplicate"
	case ClassInfo:
		return "info"
	case ClassAction:
		return "action"
	case ClassIncident:
		return "incident"
	}
	return fmt.Sprintf("class(%d)", int(c))
}

// KindClass is the class of an event by its kind alone.
func KindClass(e core.Event) Class {
	switch e.Kind {
	case KindIncident, "gave-up", "degraded":
		return ClassIncident
	case wire.EventAction, "recovered":
		return ClassAction
	}
	return ClassInfo
}

// dupKey is what makes two events the same for ClassDuplicate.
type dupKey struct{ kind, target, action, result string }

func keyOf(e core.Event) dupKey { return dupKey{e.Kind, e.Target, e.Action, e.Result} }

// classify gives every item its class: KindClass, or ClassDuplicate for an
// event that is not an incident and repeats one queued before it.
func classify(items []*Item) []Class {
	classes := make([]Class, len(items))
	seen := make(map[dupKey]bool, len(items))
	for i, it := range items {
		c := KindClass(it.Event)
		if k := keyOf(it.Event); c != ClassIncident {
			if seen[k] {
				c = ClassDuplicate
			}
			seen[k] = true
		}
		classes[i] = c
	}
	return classes
}

// dropOrder returns the indices of items (ordered by Seq) in the order
// the outbox drops them: least important class first, oldest first within
// a class. A queued drop report is never in it (it is superseded instead).
func dropOrder(items []*Item, classes []Class) []int {
	idx := make([]int, 0, len(items))
	for _, c := range Classes {
		for i, it := range items {
			if classes[i] == c && it.Event.Kind != KindDropped {
				idx = append(idx, i)
			}
		}
	}
	return idx
}

// dropPlan is what one Append drops to stay within the bound.
type dropPlan struct {
	drop       []Item        // to drop, possibly the new event itself
	byClass    map[Class]int // how many of drop in each class
	superseded *Item         // the queued drop report this one replaces
	report     *core.Event   // the new drop report; nil: nothing dropped
}

// planDrop decides what to drop so that items (the queue and the new
// events, ordered by Seq) fit in max, the drop report included.
func planDrop(items []*Item, max int, dropped uint64, now time.Time) dropPlan {
	var p dropPlan
	need := len(items) - max
	if need <= 0 {
		return p
	}
	var prev reportCounts
	for i := range items {
		if items[i].Event.Kind == KindDropped {
			it := *items[i]
			p.superseded = &it
			prev = readReport(it.Event)
			break
		}
	}
	if p.superseded == nil {
		need++ // the report takes a slot of its own
	}
	classes := classify(items)
	order := dropOrder(items, classes)
	p.byClass = map[Class]int{}
	for _, i := range order[:min(need, len(order))] {
		p.drop = append(p.drop, *items[i])
		p.byClass[classes[i]]++
	}
	if len(p.drop) == 0 {
		p.superseded = nil
		return p
	}
	p.report = dropReport(p, prev, uint64(max), dropped, now)
	return p
}

// reportCounts are the counts a queued drop report carries.
type reportCounts struct {
	count       uint64
	byClass     map[string]uint64
	first, last time.Time
}

func dropReport(p dropPlan, prev reportCounts, max, dropped uint64, now time.Time) *core.Event {
	first, last := prev.first, prev.last
	for _, it := range p.drop {
		t := it.Event.Time
		if first.IsZero() || t.Before(first) {
			first = t
		}
		if last.IsZero() || t.After(last) {
			last = t
		}
	}
	byClass := map[string]uint64{}
	for k, v := range prev.byClass {
		byClass[k] = v
	}
	var parts []string
	for _, c := range Classes {
		if n := byClass[c.String()] + uint64(p.byClass[c]); n > 0 {
			byClass[c.String()] = n
			parts = append(parts, fmt.Sprintf("%d %s", n, c))
		}
	}
	count := prev.count + uint64(len(p.drop))
	total := dropped + uint64(len(p.drop))
	return &core.Event{
		ID:     core.NewEventID(),
		Time:   now.UTC(),
		Kind:   KindDropped,
		Target: "outbox",
		Result: "dropped",
		Summary: fmt.Sprintf("outbox full (%d events): dropped %d undelivered events, least important first (%s; %d in total)",
			max, count, strings.Join(parts, ", "), total),
		Evidence: map[string]any{
			"dropped":          count,
			"dropped_by_class": byClass,
			"dropped_total":    total,
			"first_dropped_ts": first.UTC().Format(time.RFC3339Nano),
			"last_dropped_ts":  last.UTC().Format(time.RFC3339Nano),
		},
	}
}

// readReport reads back the counts of a queued drop report, whether it
// was built in this process (uint64) or replayed from the log (float64).
func readReport(e core.Event) reportCounts {
	r := reportCounts{count: number(e.Evidence["dropped"]), byClass: map[string]uint64{}}
	switch m := e.Evidence["dropped_by_class"].(type) {
	case map[string]uint64:
		for k, v := range m {
			r.byClass[k] = v
		}
	case map[string]any:
		for k, v := range m {
			r.byClass[k] = number(v)
		}
	}
	if s, ok := e.Evidence["first_dropped_ts"].(string); ok {
		r.first, _ = time.Parse(time.RFC3339Nano, s)
	}
	if s, ok := e.Evidence["last_dropped_ts"].(string); ok {
		r.last, _ = time.Parse(time.RFC3339Nano, s)
	}
	return r
}

func number(v any) uint64 {
	switch n := v.(type) {
	case uint64:
		return n
	case float64:
		return uint64(n)
	}
	return 0
}
