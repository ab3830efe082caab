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
		LastMessage: s.stats.last, LastError: s.lastErr,
		Messages: map[string]uint64{}, Events: map[string]uint64{},
	}
	rate, lag := s.stats.recent(now)
	h.MessageRate, h.LagSeconds = rate, lag.Seconds()
	for _, n := range s.nodes {
		h.ByState[n.State]++
		for _, in := range n.incidents {
			h.OpenIncidents[in.Kind]++
		}
	}
	for k, v := range s.stats.messages {
		h.Messages[k[0]+"/"+k[1]] = v
	}
	for k, v := range s.stats.events {
		h.Events[k] = v
	}
	return h
}

// Filter selects and orders nodes for the fleet table.
type Filter struct {
	Site  string // exact; empty: every site
	State string // exact; empty: every state
	Name  string // substring of the node name; empty: every node
	Sort  string // SortChanged (default), SortName, SortSeen
	Limit int    // at most this many rows; 0: all
}

// Sort orders of the fleet table.
const (
	SortChanged = "changed" // the latest state change first
	SortName    = "name"
	SortSeen    = "seen" // the longest silent first
)

// List is the nodes Filter selects, in its order, and how many matched
// before Limit.
func (s *Store) List(f Filter) (nodes []Node, matched int) {
	s.mu.RLock()
	for _, n := range s.nodes {
		if (f.Site == "" || n.Site == f.Site) && (f.State == "" || n.State == f.State) &&
			(f.Name == "" || strings.Contains(n.Name, f.Name)) {
			v := n.Node
			v.Incidents = n.openIncidents()
			nodes = append(nodes, v)
		}
	}
	s.mu.RUnlock()
	sort.Slice(nodes, less(nodes, f.Sort))
	matched = len(nodes)
	if f.Limit > 0 && len(nodes) > f.Limit {
		nodes = nodes[:f.Limit]
	}
	return nodes, matched
}

func less(nodes []Node, order string) func(i, j int) bool {
	switch order {
	case SortName:
		return func(i, j int) bool { return nodes[i].Name < nodes[j].Name }
	case SortSeen:
		return func(i, j int) bool {
			if !nodes[i].LastSeen.Equal(nodes[j].LastSeen) {
				return nodes[i].LastSeen.Before(nodes[j].LastSeen)
			}
			return nodes[i].Name < nodes[j].Name
		}
	}
	return func(i, j int) bool {
		if !nodes[i].Since.Equal(nodes[j].Since) {
			return nodes[i].Since.After(nodes[j].Since)
		}
		return nodes[i].Name < nodes[j].Name
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
	d.Events = append([]Entry(nil), n.events...)
	d.Actions = append([]Entry(nil), n.actions...)
	d.Counts = n.counts(now, countWindow)
	return d, true
}

// NodeMetrics is what /metrics shows of one node.
type NodeMetrics struct {
	Name, Site, State string
	LastSeen          time.Time
	Open              map[[2]string]int // {incident kind, "open" or "gave-up"} → count
	LastHour          map[string]int    // events by kind in the last hour
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
				m.Open[[2]string{in.Kind, st}]++
			}
		}
		if len(n.buckets) > 0 {
			m.LastHour = n.counts(now, time.Hour)
		}
		fn(m)
	}
}
