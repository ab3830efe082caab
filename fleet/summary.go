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

// Summary is the fleet at now, computed at most once a second: a
// summary less than a second old (and of a now less than a second away)
// is shared, and kept longer while nothing changed.
func (s *Store) Summary(now time.Time) *Summary {
	s.sumMu.Lock()
	defer s.sumMu.Unlock()
	gen := s.Generation()
	if c := s.summary; c != nil && now.Sub(c.At).Abs() < time.Second && (gen == s.sumGen || time.Since(s.sumMade) < time.Second) {
		return c
	}
	s.mu.RLock()
	sum := s.summarize(now)
	s.mu.RUnlock()
	s.summary, s.sumGen, s.sumMade = sum, gen, time.Now()
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
	g := glanceAcc{from: today - glanceDays + 1, today: today, days: make([]dayAcc, glanceDays)}
	sum := &Summary{At: now, Nodes: len(s.nodes), ByState: map[string]int{}}
	sites := map[string]*siteAcc{}
	var tr triageAcc
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
		if n.hist != nil {
			g.add(n, sa)
		}
	}
	sum.Fleet = g.result()
	for _, sa := range sites {
		sa.Days = dayPoints(sa.days, g.from)
		sa.Availability = availabilityOf(sa.Days)
		tr.site(sa, now)
		sum.Sites = append(sum.Sites, sa.Site)
	}
	sort.Slice(sum.Sites, func(i, j int) bool { return siteBefore(sum.Sites[i], sum.Sites[j]) })
	sum.Triage = tr.result()
	return sum
}

// glanceAcc accumulates the fleet's last 30 days from the histories.
type glanceAcc struct {
	from, today    int64 // unix days
	days           []dayAcc
	withHistory    int
	worst          []Worst
	durations      []float64
	mttrSum, mttrN float64
}

func (g *glanceAcc) add(n *node, sa *siteAcc) {
	h := n.hist
	g.withHistory++
	var dark, incidents uint64
	for i, d := range h.days {
		day := h.day0 + int64(i)
		if day < g.from || day > g.today {
			continue
		}
		for _, acc := range []*dayAcc{&g.days[day-g.from], &sa.days[day-g.from]} {
			acc.healthy += uint64(d.healthy)
			acc.dark += uint64(d.dark)
			acc.degraded += uint64(d.degraded)
			acc.incidents += uint64(d.incidents)
		}
		dark += uint64(d.dark) + uint64(d.degraded)
		incidents += uint64(d.incidents)
	}
	if healthy, observed := h.availability(g.from, g.today+1); observed > 0 {
		g.worst = keepWorst(g.worst, Worst{Node: n.Name, Site: n.Site, Availability: float64(healthy) / float64(observed), DarkSeconds: dark, Incidents: incidents})
	}
	for _, t := range h.targets {
		g.mttrSum += float64(t.mttr) * float64(t.incidents)
		g.mttrN += float64(t.incidents)
	}
	for _, in := range h.incidents {
		if !in.open && in.start/1000 >= g.from*daySeconds {
			g.durations = append(g.durations, float64(in.duration))
		}
	}
}

func (g *glanceAcc) result() Glance {
	out := Glance{Days: dayPoints(g.days, g.from), WithHistory: g.withHistory, Worst: g.worst}
	out.Availability = availabilityOf(out.Days)
	for _, d := range out.Days {
		out.Incidents += d.Incidents
	}
	if g.mttrN > 0 {
		out.MTTRSeconds = g.mttrSum / g.mttrN
	}
	out.Outages, out.OutageP50, out.OutageP95, out.OutageMax = outages(g.durations)
	return out
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
