package fleet

import (
	"fmt"
	"sort"
	"time"
)

// Triage is what needs a human, in the order a person should look:
// nodes where edgeheal gave up, degraded nodes with an open incident,
// sites whose nodes went lost together (one line each), lone lost nodes,
// and nodes that say they are connected but have been silent.
type Triage struct {
	Items []TriageItem `json:"items"` // at most TriageLimit of each kind
	// Counts are every item by kind, also those beyond TriageLimit.
	Counts map[string]int `json:"counts"`
	Total  int            `json:"total"`
}

// TriageItem is one line of the triage.
type TriageItem struct {
	Kind   string    `json:"kind"` // TriageGaveUp, TriageIncident, TriageSiteLost, TriageLost, TriageSilent
	Node   string    `json:"node,omitempty"`
	Site   string    `json:"site"`
	Since  time.Time `json:"since"`
	Detail string    `json:"detail"`
	// For TriageSiteLost: how many of the site's nodes went lost together.
	Lost      int `json:"lost,omitempty"`
	SiteNodes int `json:"site_nodes,omitempty"`
}

// Kinds of triage items, in their order.
const (
	TriageGaveUp   = "gave-up"
	TriageIncident = "incident"
	TriageSiteLost = "site-lost"
	TriageLost     = "lost"
	TriageSilent   = "silent"
)

// TriageKinds are the kinds in the order the triage lists them.
var TriageKinds = []string{TriageGaveUp, TriageIncident, TriageSiteLost, TriageLost, TriageSilent}

const (
	// TriageLimit bounds the lines of each kind: the rest is counted and
	// reached through the filters.
	TriageLimit = 10
	// SilentAfter is how long a connected node may say nothing: three
	// missed heartbeats (as the EdgehealNodeReportingStuck alert).
	SilentAfter = 15 * time.Minute
	// togetherWithin is how close the Wills of a site's nodes must come
	// for them to count as lost together.
	togetherWithin = 5 * time.Minute
)

type triageAcc struct {
	byKind map[string][]TriageItem
}

func (t *triageAcc) push(it TriageItem) {
	if t.byKind == nil {
		t.byKind = map[string][]TriageItem{}
	}
	t.byKind[it.Kind] = append(t.byKind[it.Kind], it)
}

// add looks at one node for everything but lost (which add leaves to
// site, once the site's lost nodes are known).
func (t *triageAcc) add(n *node, now time.Time) {
	switch {
	case n.State == StateLost:
		return
	case n.gaveUp():
		in := n.firstIncident(true)
		t.push(TriageItem{Kind: TriageGaveUp, Node: n.Name, Site: n.Site, Since: in.Opened, Detail: in.Kind + " " + in.Target + ": " + in.Summary})
	case n.State == StateDegraded && len(n.incidents) > 0:
		in := n.firstIncident(false)
		t.push(TriageItem{Kind: TriageIncident, Node: n.Name, Site: n.Site, Since: in.Opened, Detail: in.Kind + " " + in.Target + ": " + in.Summary})
	case (n.State == StateOnline || n.State == StateDegraded) && !n.LastSeen.IsZero() && now.Sub(n.LastSeen) > SilentAfter:
		t.push(TriageItem{Kind: TriageSilent, Node: n.Name, Site: n.Site, Since: n.LastSeen, Detail: "connected, but silent"})
	}
}

// site folds the site's nodes that went lost together into one line
// when they are at least 2 and either at least 5 or more than a fifth of
// the site (the EdgehealSiteLost alert's share); the others are lone.
func (t *triageAcc) site(sa *siteAcc, _ time.Time) {
	lost := sa.lost
	if len(lost) == 0 {
		return
	}
	sort.Slice(lost, func(i, j int) bool { return lost[i].Since.Before(lost[j].Since) })
	// The largest group whose Wills came within togetherWithin.
	best, bestAt := 0, 0
	for i, j := 0, 0; j < len(lost); j++ {
		for lost[j].Since.Sub(lost[i].Since) > togetherWithin {
			i++
		}
		if j-i+1 > best {
			best, bestAt = j-i+1, i
		}
	}
	folded := best >= 2 && (best >= 5 || best*5 > sa.Nodes)
	for i, n := range lost {
		if folded && i >= bestAt && i < bestAt+best {
			continue
		}
		t.push(TriageItem{Kind: TriageLost, Node: n.Name, Site: n.Site, Since: n.Since, Detail: "lost: its connection died without a goodbye"})
	}
	if folded {
		first := lost[bestAt]
		why := "together"
		if best == sa.Nodes {
			why = "likely the site's uplink or power"
		}
		t.push(TriageItem{Kind: TriageSiteLost, Site: sa.Name, Since: first.Since, Lost: best, SiteNodes: sa.Nodes,
			Detail: fmt.Sprintf("%s of %s lost since %s, %s", commas(best), commas(sa.Nodes), first.Since.UTC().Format("15:04"), why)})
	}
}

func (t *triageAcc) result() Triage {
	out := Triage{Counts: map[string]int{}, Items: []TriageItem{}}
	for _, kind := range TriageKinds {
		items := t.byKind[kind]
		sort.Slice(items, func(i, j int) bool {
			if !items[i].Since.Equal(items[j].Since) {
				return items[i].Since.Before(items[j].Since)
			}
			return items[i].Node+items[i].Site < items[j].Node+items[j].Site
		})
		out.Counts[kind] = len(items)
		out.Total += len(items)
		out.Items = append(out.Items, items[:min(len(items), TriageLimit)]...)
	}
	return out
}

// commas writes n with thousands separators: 1,000.
func commas(n int) string {
	s := fmt.Sprint(n)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}
