package fleet

import (
	"math"
	"sort"
	"time"
)

// Summary is the fleet at a glance at one moment: what needs a human
// (Triage), every site's rollup, and the history the nodes' retained
// histories tell. It is computed in one pass over the nodes and shared
// by every request for a second (Store.Summary).
type Summary struct {
	At      time.Time      `json:"at"`
	Nodes   int            `json:"nodes"`
	ByState map[string]int `json:"by_state"`
	Triage  Triage         `json:"triage"`
	Sites   []Site         `json:"sites"`
	Fleet   Glance         `json:"history"`
}

// Site is one site's rollup.
type Site struct {
	Name          string         `json:"site"`
	Nodes         int            `json:"nodes"`
	ByState       map[string]int `json:"by_state"`
	OpenIncidents int            `json:"open_incidents"`
	GaveUp        int            `json:"gave_up"` // nodes with an incident edgeheal gave up on
	// Availability is the healthy share of the seconds the site's nodes
	// observed over the last 30 days (their histories); -1: none observed.
	Availability float64    `json:"availability_30d"`
	Days         []DayPoint `json:"days"`
}

// DayPoint is one UTC day of the fleet or a site, summed over the nodes'
// histories.
type DayPoint struct {
	Day             time.Time `json:"day"`
	HealthySeconds  uint64    `json:"healthy_seconds"`
	DarkSeconds     uint64    `json:"dark_seconds"`
	DegradedSeconds uint64    `json:"degraded_seconds"`
	Incidents       uint64    `json:"incidents"`
	Availability    float64   `json:"availability"` // -1: nothing observed that day
}

// Glance is the fleet's history over the last 30 days.
type Glance struct {
	Days         []DayPoint `json:"days"`
	Availability float64    `json:"availability_30d"` // -1: nothing observed
	Incidents    uint64     `json:"incidents_30d"`
	// MTTRSeconds is the mean time to repair over the targets' totals
	// (every closed incident the nodes count, up to 90 days back).
	MTTRSeconds float64 `json:"mttr_seconds"`
	// Outages are the durations of the closed incidents of the last 30
	// days among the ones the nodes publish (their newest 20 each).
	Outages     []OutageBucket `json:"outage_durations"`
	OutageP50   float64        `json:"outage_p50_seconds"`
	OutageP95   float64        `json:"outage_p95_seconds"`
	OutageMax   float64        `json:"outage_max_seconds"`
	Worst       []Worst        `json:"worst_nodes"`
	WithHistory int            `json:"nodes_with_history"`
}

// OutageBucket counts outages up to Le seconds (and above the previous
// bucket's); the last, Le 0, every longer one.
type OutageBucket struct {
	Label string  `json:"label"`
	Le    float64 `json:"le"`
	Count int     `json:"count"`
}

// Worst is a node among the least available over 30 days.
type Worst struct {
	Node         string  `json:"node"`
	Site         string  `json:"site"`
	Availability float64 `json:"availability_30d"`
	DarkSeconds  uint64  `json:"dark_seconds"`
	Incidents    uint64  `json:"incidents"`
}

const (
	glanceDays = 30
	worstNodes = 10
)

var outageBounds = []OutageBucket{{"≤10 s", 10, 0}, {"≤1 min", 60, 0}, {"≤5 min", 300, 0}, {"≤30 min", 1800, 0},
	{"≤4 h", 4 * 3600, 0}, {"longer", 0, 0}}

// Summary is the fleet at now, computed at most once a second.
func (s *Store) Summary(now time.Time) *Summary {
	s.sumMu.Lock()
	defer s.sumMu.Unlock()
	if c := s.summary; c != nil && now.Sub(c.At) < time.Second && !now.Before(c.At) {
		return c
	}
	s.mu.RLock()
	sum := s.summarize(now)
	s.mu.RUnlock()
	s.summary = sum
	return sum
}

// siteAcc accumulates a site during the pass.
type siteAcc struct {
	Site
	days []dayAcc
	lost []*node
}

type dayAcc struct{ healthy, dark, degraded, incidents uint64 }

func (s *Store) summarize(now time.Time) *Summary {
	today := floorDiv(now.Unix(), daySeconds)
	from := today - glanceDays + 1
	sum := &Summary{At: now, Nodes: len(s.nodes), ByState: map[string]int{}}
	fleetDays := make([]dayAcc, glanceDays)
	sites := map[string]*siteAcc{}
	var tr triageAcc
	var worst []Worst
	var durations []float64
	var mttrSum, mttrN float64
	for _, n := range s.nodes {
		sum.ByState[n.State]++
		sa := sites[n.Site]
		if sa == nil {
			sa = &siteAcc{Site: Site{Name: n.Site, ByState: map[string]int{}}, days: make([]dayAcc, glanceDays)}
			sites[n.Site] = sa
		}
		sa.Nodes++
		sa.ByState[n.State]++
		sa.OpenIncidents += len(n.incidents)
		if n.gaveUp() {
			sa.GaveUp++
		}
		if n.State == StateLost {
			sa.lost = append(sa.lost, n)
		}
		tr.add(n, now)
		h := n.hist
		if h == nil {
			continue
		}
		sum.Fleet.WithHistory++
		for i, d := range h.days {
			day := h.day0 + int64(i)
			if day < from || day > today {
				continue
			}
			for _, acc := range []*dayAcc{&fleetDays[day-from], &sa.days[day-from]} {
				acc.healthy += uint64(d.healthy)
				acc.dark += uint64(d.dark)
				acc.degraded += uint64(d.degraded)
				acc.incidents += uint64(d.incidents)
			}
		}
		healthy, observed := h.availability(from, today+1)
		if observed > 0 {
			var dark, incidents uint64
			for i, d := range h.days {
				if day := h.day0 + int64(i); day >= from && day <= today {
					dark += uint64(d.dark) + uint64(d.degraded)
					incidents += uint64(d.incidents)
				}
			}
			worst = keepWorst(worst, Worst{Node: n.Name, Site: n.Site, Availability: float64(healthy) / float64(observed), DarkSeconds: dark, Incidents: incidents})
		}
		for _, t := range h.targets {
			closed := float64(t.incidents)
			mttrSum += float64(t.mttr) * closed
			mttrN += closed
		}
		for _, in := range h.incidents {
			if !in.open && in.start/1000 >= from*daySeconds {
				durations = append(durations, float64(in.duration))
			}
		}
	}
	sum.Fleet.Days = dayPoints(fleetDays, from)
	sum.Fleet.Availability = availabilityOf(sum.Fleet.Days)
	for _, d := range sum.Fleet.Days {
		sum.Fleet.Incidents += d.Incidents
	}
	if mttrN > 0 {
		sum.Fleet.MTTRSeconds = mttrSum / mttrN
	}
	sum.Fleet.Outages, sum.Fleet.OutageP50, sum.Fleet.OutageP95, sum.Fleet.OutageMax = outages(durations)
	sum.Fleet.Worst = worst
	for _, sa := range sites {
		sa.Days = dayPoints(sa.days, from)
		sa.Availability = availabilityOf(sa.Days)
		tr.site(sa, now)
		sum.Sites = append(sum.Sites, sa.Site)
	}
	sort.Slice(sum.Sites, func(i, j int) bool { return siteBefore(sum.Sites[i], sum.Sites[j]) })
	sum.Triage = tr.result()
	return sum
}

// siteBefore orders the rollup: sites with lost nodes, then with gave-up
// nodes, then with open incidents, each most first; then by name.
func siteBefore(a, b Site) bool {
	ka := [3]int{a.ByState[StateLost], a.GaveUp, a.OpenIncidents}
	kb := [3]int{b.ByState[StateLost], b.GaveUp, b.OpenIncidents}
	for i := range ka {
		if ka[i] != kb[i] {
			return ka[i] > kb[i]
		}
	}
	return a.Name < b.Name
}

func keepWorst(list []Worst, w Worst) []Worst {
	i := sort.Search(len(list), func(i int) bool {
		if list[i].Availability != w.Availability {
			return list[i].Availability > w.Availability
		}
		return list[i].Node > w.Node
	})
	if i >= worstNodes {
		return list
	}
	list = append(list, Worst{})
	copy(list[i+1:], list[i:])
	list[i] = w
	if len(list) > worstNodes {
		list = list[:worstNodes]
	}
	return list
}

func dayPoints(days []dayAcc, from int64) []DayPoint {
	out := make([]DayPoint, len(days))
	for i, d := range days {
		p := DayPoint{Day: time.Unix((from+int64(i))*daySeconds, 0).UTC(), HealthySeconds: d.healthy, DarkSeconds: d.dark,
			DegradedSeconds: d.degraded, Incidents: d.incidents, Availability: -1}
		if obs := d.healthy + d.dark + d.degraded; obs > 0 {
			p.Availability = float64(d.healthy) / float64(obs)
		}
		out[i] = p
	}
	return out
}

func availabilityOf(days []DayPoint) float64 {
	var healthy, obs uint64
	for _, d := range days {
		healthy += d.HealthySeconds
		obs += d.HealthySeconds + d.DarkSeconds + d.DegradedSeconds
	}
	if obs == 0 {
		return -1
	}
	return float64(healthy) / float64(obs)
}

func outages(d []float64) (buckets []OutageBucket, p50, p95, longest float64) {
	buckets = append([]OutageBucket(nil), outageBounds...)
	if len(d) == 0 {
		return buckets, 0, 0, 0
	}
	sort.Float64s(d)
	for _, v := range d {
		for i := range buckets {
			if buckets[i].Le == 0 || v <= buckets[i].Le {
				buckets[i].Count++
				break
			}
		}
	}
	q := func(p float64) float64 { return d[min(int(math.Ceil(p*float64(len(d))))-1, len(d)-1)] }
	return buckets, q(0.5), q(0.95), d[len(d)-1]
}
