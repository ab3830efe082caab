// Package history keeps the node's own account of its availability: for
// each target (each tunnel peer, each workload, each guarded uplink) and
// for the node as a whole, the seconds it was healthy, dark or degraded,
// per hour for the last 48 hours and per UTC day for the last 90 days, and
// every incident with its start, end, diagnosis, the repairs tried and the
// one that healed it (or that edgeheal gave up). It is kept on the node, in
// the state directory, bounded, so that it holds also what the cloud could
// not hear; the agent publishes it retained (wire.History).
//
// It only records: it reads the checks of every sweep and the events, and
// never acts.
package history

import (
	"cmp"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/edgeheal/edgeheal/agent/core"
	"github.com/edgeheal/edgeheal/wire"
)

// What is kept, at the most.
const (
	hoursKept     = 48
	daysKept      = 90
	incidentsKept = 100  // in full, the newest
	targetsKept   = 256  // with an account of their own; the rest count as "<kind>/others"
	closedKept    = 1000 // closed incidents per target, for the outage percentiles
	repairsKept   = 32   // repairs named per incident, the first ones
	diagnosisKept = 1024 // bytes of an incident's diagnosis
)

// Book is the history. Safe for concurrent use; every method is cheap and
// never blocks on I/O (saving is the component's, save.go).
type Book struct {
	node, site string
	maxGap     time.Duration

	mu          sync.Mutex
	since       time.Time // the first moment recorded
	whole       *tracker
	targets     map[string]*target // by kind + "/" + target
	incidents   []wire.Incident    // the newest last, at most incidentsKept
	kinds       map[string]string  // target name → check kind, from the last sweep
	last        time.Time          // the last sweep (with its monotonic reading)
	changed     uint64             // bumped on every change worth saving
	incidentRev uint64             // bumped on every change of an incident
	closed      uint64             // bumped when an incident closes
}

// target is one target's account.
type target struct {
	Kind   string      `json:"kind"`
	Name   string      `json:"target"`
	Tr     *tracker    `json:"tracker"`
	Closed []closedInc `json:"closed,omitempty"` // the newest last, at most closedKept
	open   *wire.Incident
}

// closedInc is what a closed incident leaves in its target's totals.
type closedInc struct {
	End      time.Time `json:"end"`
	Seconds  float64   `json:"s"`
	HealedBy string    `json:"by,omitempty"` // "itself" when no rung healed it
	GaveUp   bool      `json:"gave_up,omitempty"`
}

// New returns an empty book for the node. maxGap bounds the time one
// sweep may account for: a longer gap since the previous one (the agent
// was stopped, the machine suspended) is not observed.
func New(node, site string, maxGap time.Duration) *Book {
	return &Book{node: node, site: site, maxGap: maxGap, whole: newTracker(), targets: map[string]*target{}, kinds: map[string]string{}}
}

// Observe records a sweep of the checks at now (with its monotonic
// reading: durations come from it, so a clock step does not stretch
// them). The first sweep after a start only sets the baseline.
func (b *Book) Observe(checks []wire.Check, now time.Time) {
	b.mu.Lock()
	defer b.mu.Unlock()
	secs := 0.0
	if !b.last.IsZero() {
		secs = min(now.Sub(b.last), b.maxGap).Seconds()
	}
	b.last = now
	if b.since.IsZero() {
		b.since = now
	}
	// Each account is observed once a sweep: the targets beyond
	// targetsKept share their kind's "others", in its worst state.
	var states []state
	accounts := make(map[*target][]state, len(checks))
	var order []*target
	for _, c := range checks {
		s, ok := classify(c)
		if !ok {
			continue
		}
		b.kinds[c.Target] = c.Kind
		t := b.target(c.Kind, c.Target)
		if _, seen := accounts[t]; !seen {
			order = append(order, t)
		}
		accounts[t] = append(accounts[t], s)
		states = append(states, s)
	}
	for _, t := range order {
		t.Tr.observe(worst(accounts[t]), now, secs)
	}
	if secs > 0 {
		b.whole.observe(worst(states), now, secs)
		b.changed++
	}
}

// target returns a target's account, made if new; beyond targetsKept the
// kind's "others" account.
func (b *Book) target(kind, name string) *target {
	key := kind + "/" + name
	if t, ok := b.targets[key]; ok {
		return t
	}
	if len(b.targets) >= targetsKept {
		key, name = kind+"/others", "others"
		if t, ok := b.targets[key]; ok {
			return t
		}
	}
	t := &target{Kind: kind, Name: name, Tr: newTracker()}
	b.targets[key] = t
	return t
}

// kindOf is the check kind of an event's target: as the checks named it,
// else what the event says.
func (b *Book) kindOf(e core.Event) string {
	if k, ok := b.kinds[e.Target]; ok {
		return k
	}
	switch {
	case e.Kind == wire.EventOffloadDrift || e.Action == "offload-off":
		return wire.KindUplink
	case strings.Contains(e.Target, "/"):
		return wire.KindPeer
	}
	return wire.KindWorkload
}

// Changes counts the changes so far, and the incidents closed: a saver
// or publisher compares them with what it last saw.
func (b *Book) Changes() (changed, closed uint64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.changed, b.closed
}

// Revision counts what a consumer of the history acts on: incidents
// opened, changed (a repair tried, a diagnosis, a give-up) and closed;
// closed counts the closes alone. The seconds that pass do not count: the
// publisher refreshes those on its own, rarely (mqtt.HistorySource).
func (b *Book) Revision() (incidents, closed uint64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.incidentRev, b.closed
}

// Published is the history as it is published retained: Snapshot's
// bounded form.
func (b *Book) Published(now time.Time) wire.History { return b.Snapshot(now, false) }

// keep adds an incident to the kept ones, the oldest going past the bound.
func (b *Book) keep(in *wire.Incident) {
	b.incidentRev++
	b.incidents = append(b.incidents, *in)
	if over := len(b.incidents) - incidentsKept; over > 0 {
		b.incidents = append(b.incidents[:0:0], b.incidents[over:]...)
	}
}

// update replaces the kept copy of an incident by its id.
func (b *Book) update(in *wire.Incident) {
	b.incidentRev++
	for i := len(b.incidents) - 1; i >= 0; i-- {
		if b.incidents[i].ID == in.ID {
			b.incidents[i] = *in
			return
		}
	}
}

// Percentile is the nearest-rank p-quantile of sorted, 0 when it is
// empty: how the outage percentiles are taken.
func Percentile(sorted []float64, p float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	i := int(p*float64(len(sorted))+0.999999) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

// sortTargets orders summaries as the checks are: kind, then target.
func sortTargets(ts []wire.TargetSummary) {
	slices.SortFunc(ts, func(a, b wire.TargetSummary) int {
		return cmp.Or(cmp.Compare(a.Kind, b.Kind), cmp.Compare(a.Target, b.Target))
	})
}
