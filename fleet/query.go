package fleet

import (
	"sort"
	"strings"
	"time"
)

// SetConnected records the subscriber's connection state, for Health.
func (s *Store) SetConnected(ok bool, detail string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stats.connected, s.stats.connDetail = ok, detail
}

// Health is the view's own health and the fleet's counts at now.
func (s *Store) Health(now time.Time) Health {
	s.mu.RLock()
	defer s.mu.RUnlock()
	h := Health{
		Connected: s.stats.connected, ConnectDetail: s.stats.connDetail,
		Nodes: len(s.nodes), ByState: map[string]int{}, OpenIncidents: map[string]int{},
		LastMessage: s.stats.last, LastError: s.lastErr, LastFailure: s.lastFailure,
		Messages: map[string]uint64{}, Events: map[string]uint64{},
	}
	rate, lag, lagMax := s.stats.recent(now)
	h.MessageRate, h.LagSeconds, h.LagMaxSeconds = rate, lag.Seconds(), lagMax.Seconds()
	for k, v := range s.byState {
		h.ByState[k] = v
	}
	for i, v := range s.openByKind {
		if v > 0 {
			h.OpenIncidents[IncidentKinds[i]] = v
		}
	}
	for k, v := range s.stats.messages {
		h.Messages[k[0]+"/"+k[1]] = v
	}
	for i, v := range s.stats.events {
		if v > 0 {
			h.Events[EventKinds[i]] = v
		}
	}
	return h
}

// Filter selects and orders nodes for the fleet table and the API.
type Filter struct {
	Site  string // exact; empty: every site
	State string // exact; empty: every state
	Name  string // substring of the node name; empty: every node
	// GaveUp: only nodes with an incident edgeheal gave up on.
	GaveUp bool
	// Incident: only nodes with an open incident.
	Incident bool
	// SilentFor: only nodes that have said nothing for at least this
	// long (Now - LastSeen); 0: any.
	SilentFor time.Duration
	Sort      string // SortChanged (default), SortName, SortSeen, SortSite, SortAvailability
	Limit     int    // at most this many rows; 0: all
	Offset    int    // rows skipped before the first
}

// Sort orders of the fleet table.
const (
	SortChanged      = "changed" // the latest state change first
	SortName         = "name"
	SortSeen         = "seen"         // the longest silent first
	SortSite         = "site"         // by site, then name
	SortAvailability = "availability" // the least available over 30 days first
)

// Sorts are the orders Filter.Sort takes.
var Sorts = []string{SortChanged, SortName, SortSeen, SortSite, SortAvailability}

// List is ListAt now.
func (s *Store) List(f Filter) (nodes []Node, matched int) { return s.ListAt(f, time.Now()) }

// ListAt is the nodes Filter selects at now, in its order, from Offset
// and at most Limit of them, and how many matched in all.
func (s *Store) ListAt(f Filter, now time.Time) (nodes []Node, matched int) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	var sel []*node
	for _, n := range s.nodes {
		if f.match(n, now) {
			sel = append(sel, n)
		}
	}
	sort.Slice(sel, less(sel, f.Sort))
	matched = len(sel)
	sel = sel[min(f.Offset, len(sel)):]
	if f.Limit > 0 && len(sel) > f.Limit {
		sel = sel[:f.Limit]
	}
	nodes = make([]Node, 0, len(sel))
	for _, n := range sel {
		v := n.Node
		v.Incidents = n.openIncidents()
		nodes = append(nodes, v)
	}
	return nodes, matched
}

func (f Filter) match(n *node, now time.Time) bool {
	return (f.Site == "" || n.Site == f.Site) && (f.State == "" || n.State == f.State) &&
		(f.Name == "" || strings.Contains(n.Name, f.Name)) && (!f.GaveUp || n.gaveUp()) &&
		(!f.Incident || len(n.incidents) > 0) &&
		(f.SilentFor <= 0 || (!n.LastSeen.IsZero() && now.Sub(n.LastSeen) >= f.SilentFor))
}

func less(nodes []*node, order string) func(i, j int) bool {
	byName := func(i, j int) bool { return nodes[i].Name < nodes[j].Name }
	switch order {
	case SortName:
		return byName
	case SortSite:
		return func(i, j int) bool {
			if nodes[i].Site != nodes[j].Site {
				return nodes[i].Site < nodes[j].Site
			}
			return byName(i, j)
		}
	case SortAvailability:
		return func(i, j int) bool {
			ai, aj := nodes[i].Availability, nodes[j].Availability
			if ai < 0 {
				ai = 2 // no history: last
			}
			if aj < 0 {
				aj = 2
			}
			if ai != aj {
				return ai < aj
			}
			return byName(i, j)
		}
	case SortSeen:
		return func(i, j int) bool {
			if !nodes[i].LastSeen.Equal(nodes[j].LastSeen) {
				return nodes[i].LastSeen.Before(nodes[j].LastSeen)
			}
			return byName(i, j)
		}
	}
	return func(i, j int) bool {
		if !nodes[i].Since.Equal(nodes[j].Since) {
			return nodes[i].Since.After(nodes[j].Since)
		}
		return byName(i, j)
	}
}

// Sites is every site the view knows, sorted.
func (s *Store) Sites() []string {
	s.mu.RLock()
	set := map[string]bool{}
	for _, n := range s.nodes {
		set[n.Site] = true
	}
	s.mu.RUnlock()
	out := make([]string, 0, len(set))
	for k := range set {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// Detail is one node with its history; ok is false for an unknown node.
func (s *Store) Detail(name string, now time.Time) (d Detail, ok bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	n, ok := s.nodes[name]
	if !ok {
		return Detail{}, false
	}
	d.Node = n.Node
	d.Incidents = n.openIncidents()
	d.Events = make([]Entry, 0, len(n.events))
	for _, e := range n.events {
		d.Events = append(d.Events, e.public())
	}
	d.Actions = make([]Entry, 0, len(n.actions))
	for _, e := range n.actions {
		d.Actions = append(d.Actions, e.public())
	}
	d.Counts = n.counts.sum(now, countWindow)
	if n.hist != nil {
		h := n.hist.wire(n.Name, n.Site)
		d.History = &h
	}
	return d, true
}

// NodeMetrics is what /metrics shows of one node; every label comes from
// a closed set but the node's name and site.
type NodeMetrics struct {
	Name, Site, State string
	LastSeen          time.Time
	Open              map[[2]string]int // {IncidentKinds, "open" or "gave-up"} → count
	LastHour          map[string]int    // events by kind (EventKinds) in the last hour
}

// Each calls fn for every node, under the store's read lock: fn must not
// call the store.
func (s *Store) Each(now time.Time, fn func(NodeMetrics)) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	for _, n := range s.nodes {
		m := NodeMetrics{Name: n.Name, Site: n.Site, State: n.State, LastSeen: n.LastSeen}
		if len(n.incidents) > 0 {
			m.Open = map[[2]string]int{}
			for _, in := range n.incidents {
				st := "open"
				if in.GaveUp {
					st = "gave-up"
				}
				m.Open[[2]string{IncidentLabel(in.Kind), st}]++
			}
		}
		if n.counts != nil {
			m.LastHour = n.counts.sum(now, time.Hour)
		}
		fn(m)
	}
}
