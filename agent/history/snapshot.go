package history

import (
	"math"
	"slices"
	"strings"
	"time"

	"github.com/edgeheal/edgeheal/wire"
)

// PublishedTargets is how many targets a published history names at the
// most, the least available first; the rest are counted in
// TargetsOmitted. The local history (Snapshot with all) names every one.
const PublishedTargets = 32

// publishedDiagnosis is the longest diagnosis a published incident
// carries (the local history has it whole).
const publishedDiagnosis = 160

// Snapshot is the history as of now: the whole node per hour and per day,
// every target's totals over the days kept and the newest incidents (open
// ones with their duration so far). For the retained topic (all false) it
// is bounded: wire.HistoryIncidents incidents and PublishedTargets
// targets, a few KiB whatever the node went through; for the local API
// (all) every incident kept and every target.
func (b *Book) Snapshot(now time.Time, all bool) wire.History {
	b.mu.Lock()
	defer b.mu.Unlock()
	h := wire.History{V: wire.Version, Node: b.node, Site: b.site, TS: now.UTC(), Since: b.since.UTC(),
		Hours: series(b.whole.Hours, now, hoursKept), Days: series(b.whole.Days, now, daysKept),
		Targets: []wire.TargetSummary{}, Incidents: []wire.Incident{}}
	for _, t := range b.targets {
		h.Targets = append(h.Targets, t.summary(now))
	}
	sortTargets(h.Targets)
	if !all && len(h.Targets) > PublishedTargets {
		worstFirst := slices.Clone(h.Targets)
		slices.SortStableFunc(worstFirst, func(a, b wire.TargetSummary) int {
			return compareFloat(availability(a), availability(b))
		})
		keep := map[string]bool{}
		for _, t := range worstFirst[:PublishedTargets] {
			keep[t.Kind+"/"+t.Target] = true
		}
		h.TargetsOmitted = len(h.Targets) - PublishedTargets
		h.Targets = slices.DeleteFunc(h.Targets, func(t wire.TargetSummary) bool { return !keep[t.Kind+"/"+t.Target] })
	}
	n := len(b.incidents)
	if !all {
		n = min(n, wire.HistoryIncidents)
	}
	for i := len(b.incidents) - 1; i >= len(b.incidents)-n; i-- {
		in := b.incidents[i]
		if in.End.IsZero() {
			in.DurationSeconds = max(now.Sub(in.Start).Seconds(), 0)
		}
		in.Repairs = slices.Clone(in.Repairs)
		if !all {
			in.Diagnosis = cut(in.Diagnosis, publishedDiagnosis)
		}
		h.Incidents = append(h.Incidents, in)
	}
	return h
}

func compareFloat(a, b float64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

func availability(t wire.TargetSummary) float64 {
	seen := t.HealthySeconds + t.DarkSeconds + t.DegradedSeconds
	if seen == 0 {
		return 1
	}
	return float64(t.HealthySeconds) / float64(seen)
}

// series is a ring as the wire has it: every bucket of the window as of
// now, whole seconds.
func series(r ring, now time.Time, n int) wire.Series {
	start, cs := r.upTo(now, n)
	s := wire.Series{Start: time.Unix(start, 0).UTC(), Step: int(r.Step),
		Healthy: make([]int, n), Dark: make([]int, n), Degraded: make([]int, n), Incidents: make([]int, n)}
	for i, c := range cs {
		s.Healthy[i], s.Dark[i], s.Degraded[i], s.Incidents[i] = int(math.Round(c.Healthy)), int(math.Round(c.Dark)), int(math.Round(c.Degraded)), c.Incidents
	}
	return s
}

// summary is t's totals over the days kept as of now.
func (t *target) summary(now time.Time) wire.TargetSummary {
	tot := t.Tr.Days.total(now, daysKept)
	s := wire.TargetSummary{Kind: t.Kind, Target: t.Name, HealthySeconds: int64(math.Round(tot.Healthy)),
		DarkSeconds: int64(math.Round(tot.Dark)), DegradedSeconds: int64(math.Round(tot.Degraded)), Incidents: tot.Incidents}
	from := now.Add(-daysKept * 24 * time.Hour)
	var durs []float64
	sum := 0.0
	for _, c := range t.Closed {
		if c.End.Before(from) {
			continue
		}
		durs = append(durs, c.Seconds)
		sum += c.Seconds
		if c.GaveUp {
			s.GaveUps++
		}
		if s.Repairs == nil {
			s.Repairs = map[string]int{}
		}
		s.Repairs[c.HealedBy]++
	}
	if t.open != nil && t.open.GaveUp {
		s.GaveUps++
	}
	if len(durs) > 0 {
		slices.Sort(durs)
		s.OutageP50Seconds = round3(Percentile(durs, 0.50))
		s.OutageP95Seconds = round3(Percentile(durs, 0.95))
		s.OutageMaxSeconds = round3(durs[len(durs)-1])
		s.MTTRSeconds = round3(sum / float64(len(durs)))
	}
	return s
}

func round3(f float64) float64 { return math.Round(f*1000) / 1000 }

// Total is one target's account since its history began (kept across
// restarts), for counters that only grow.
type Total struct {
	Kind, Target              string
	DarkSeconds, DegradedSecs float64
	Incidents                 int
}

// Totals are every target's totals since the history began, in the order
// of the checks.
func (b *Book) Totals() []Total {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := make([]Total, 0, len(b.targets))
	for _, t := range b.targets {
		out = append(out, Total{Kind: t.Kind, Target: t.Name, DarkSeconds: t.Tr.All.Dark, DegradedSecs: t.Tr.All.Degraded, Incidents: t.Tr.All.Incidents})
	}
	slices.SortFunc(out, func(a, b Total) int {
		if a.Kind != b.Kind {
			return strings.Compare(a.Kind, b.Kind)
		}
		return strings.Compare(a.Target, b.Target)
	})
	return out
}
