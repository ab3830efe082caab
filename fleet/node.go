package fleet

import (
	"hash/fnv"
	"sort"
	"strings"
	"time"

	"github.com/edgeheal/edgeheal/wire"
)

// History bounds per node: memory stays flat however long a node lives.
const (
	keepEvents  = 20 // recent events shown on a node's page
	keepActions = 5  // last actions
	keepIDs     = 64 // event ids remembered to drop duplicates (as hashes)
	bucketSize  = 10 * time.Minute
	countWindow = 24 * time.Hour
)

// Incident is an open incident of a node: opened by an "incident" event
// (or, when that event was not seen, by an unhealthy check in the status),
// closed by a "recovered" event or by a status that shows the target
// healthy again.
type Incident struct {
	Target     string    `json:"target"`
	Kind       string    `json:"kind"` // the target's check kind: peer, workload, ...
	Opened     time.Time `json:"opened"`
	Summary    string    `json:"summary"`
	GaveUp     bool      `json:"gave_up"`     // the agent gave up healing it: a human is needed
	FromStatus bool      `json:"from_status"` // known from the status only
}

// Node is what the view knows of one node.
type Node struct {
	Name           string       `json:"name"`
	Site           string       `json:"site"`
	State          string       `json:"state"`
	Since          time.Time    `json:"since"`     // when State began (as far as the view saw)
	LastSeen       time.Time    `json:"last_seen"` // the last time the node itself said something
	Session        uint64       `json:"session"`
	StatusTS       time.Time    `json:"status_ts"`
	Version        string       `json:"version,omitempty"`
	ConfigRevision string       `json:"config_revision,omitempty"`
	ChecksTotal    int          `json:"checks_total"`
	ChecksHealthy  int          `json:"checks_healthy"`
	Checks         []wire.Check `json:"checks,omitempty"`
	Incidents      []Incident   `json:"incidents,omitempty"`
	LastAction     *Entry       `json:"last_action,omitempty"`
}

// Entry is one event as a node's history keeps it: what the page shows,
// not the evidence (docs/fleet.md, "Memory").
type Entry struct {
	TS       time.Time `json:"ts"`
	Kind     string    `json:"kind"`
	Target   string    `json:"target"`
	Action   string    `json:"action,omitempty"`
	Result   string    `json:"result,omitempty"`
	Duration float64   `json:"duration_seconds,omitempty"`
	Summary  string    `json:"summary"`
}

// Detail is a node with its history, for its page.
type Detail struct {
	Node
	Events  []Entry        `json:"events"`  // recent events, oldest first
	Actions []Entry        `json:"actions"` // last actions, oldest first
	Counts  map[string]int `json:"counts_24h"`
}

// node is a Node with the history behind it.
type node struct {
	Node
	hasStatus bool
	incidents map[string]*Incident
	events    []Entry // sorted by TS, at most keepEvents
	actions   []Entry // sorted by TS, at most keepActions
	buckets   []bucket
	ids       [keepIDs]uint64 // hashes of the last event ids, a ring
	nextID    int
	wm        struct {
		session, seq uint64
		set          bool
	}
}

// bucket counts events by kind within one bucketSize of time.
type bucket struct {
	start int64 // unix seconds, a multiple of bucketSize
	kinds map[string]int
}

func newNode(name string) *node {
	return &node{Node: Node{Name: name, State: StateUnknown}, incidents: map[string]*Incident{}}
}

// seenID records an event id and reports whether it was one of the last
// keepIDs. Ids are kept as 64-bit FNV-1a hashes (a false duplicate needs
// a collision among 64 ids of one node: about 2^-58).
func (n *node) seenID(id string) bool {
	h := fnv.New64a()
	h.Write([]byte(id))
	sum := h.Sum64() | 1 // never 0, the ring's empty slot
	for _, v := range n.ids {
		if v == sum {
			return true
		}
	}
	n.ids[n.nextID] = sum
	n.nextID = (n.nextID + 1) % keepIDs
	return false
}

// replay reports whether an event with a sequence number is at or below
// what the node already sent: (session, seq) pairs only grow. Events
// without Seq are never replays by this rule (their id decides). An event
// counts in the session of the node's last status, so a sequence that
// starts again after a restart (a new state directory) is not taken for a
// replay.
func (n *node) replay(e wire.EventMessage) bool {
	if e.Seq == 0 {
		return false
	}
	session, seq := n.Session, e.Seq
	if n.wm.set && (session < n.wm.session || (session == n.wm.session && seq <= n.wm.seq)) {
		return true
	}
	n.wm.session, n.wm.seq, n.wm.set = session, seq, true
	return false
}

// insertByTime inserts e into list sorted by TS and keeps the newest max.
func insertByTime(list []Entry, e Entry, max int) []Entry {
	i := sort.Search(len(list), func(i int) bool { return list[i].TS.After(e.TS) })
	list = append(list, Entry{})
	copy(list[i+1:], list[i:])
	list[i] = e
	if len(list) > max {
		list = append(list[:0:0], list[len(list)-max:]...)
	}
	return list
}

// count adds one event of kind at t to the buckets, dropping buckets that
// fell out of the count window.
func (n *node) count(kind string, t, now time.Time) {
	start := t.Truncate(bucketSize).Unix()
	cutoff := now.Add(-countWindow).Unix()
	if start+int64(bucketSize/time.Second) <= cutoff {
		return
	}
	kept := n.buckets[:0]
	for _, b := range n.buckets {
		if b.start+int64(bucketSize/time.Second) > cutoff {
			kept = append(kept, b)
		}
	}
	n.buckets = kept
	for i := range n.buckets {
		if n.buckets[i].start == start {
			n.buckets[i].kinds[kind]++
			return
		}
	}
	n.buckets = append(n.buckets, bucket{start: start, kinds: map[string]int{kind: 1}})
}

// counts sums the events by kind whose bucket ends within window of now.
func (n *node) counts(now time.Time, window time.Duration) map[string]int {
	out := map[string]int{}
	cutoff := now.Add(-window).Unix()
	for _, b := range n.buckets {
		if b.start+int64(bucketSize/time.Second) > cutoff {
			for k, c := range b.kinds {
				out[k] += c
			}
		}
	}
	return out
}

// checkKind is the kind of target's check in the node's last status; an
// incident whose target no check names is a tunnel peer when the target
// reads interface/key (as tunnel targets do), else a workload.
func (n *node) checkKind(target string) string {
	for _, c := range n.Checks {
		if c.Target == target {
			return c.Kind
		}
	}
	if strings.Contains(target, "/") {
		return "peer"
	}
	return "workload"
}

// openIncidents is the node's open incidents, oldest first.
func (n *node) openIncidents() []Incident {
	out := make([]Incident, 0, len(n.incidents))
	for _, in := range n.incidents {
		out = append(out, *in)
	}
	sort.Slice(out, func(i, j int) bool {
		if !out[i].Opened.Equal(out[j].Opened) {
			return out[i].Opened.Before(out[j].Opened)
		}
		return out[i].Target < out[j].Target
	})
	return out
}
