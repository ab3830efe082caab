package fleet

import (
	"hash/fnv"
	"sort"
	"strings"
	"time"

	"github.com/edgeheal/edgeheal/wire"
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
	// IncidentsNotKept counts open incidents beyond what the view keeps
	// of a node (maxOpenIncidents), and checks beyond maxChecks.
	IncidentsNotKept int    `json:"incidents_not_kept,omitempty"`
	LastAction       *Entry `json:"last_action,omitempty"`
	// Availability is the healthy share of the last 30 days in the node's
	// retained history; -1: no history.
	Availability float64 `json:"availability_30d"`
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

// Detail is a node with its history, for its page and the API.
type Detail struct {
	Node
	Events  []Entry        `json:"events"`  // recent events, oldest first
	Actions []Entry        `json:"actions"` // last actions, oldest first
	Counts  map[string]int `json:"counts_24h"`
	// History is the node's retained history as the view keeps it (the
	// last 30 days and 48 hours, its targets, its newest incidents), nil
	// when the node has published none.
	History *wire.History `json:"history,omitempty"`
}

// entry is an Entry as kept: the time as unix nanoseconds; the kind,
// action, result and target as one string the store shares between
// nodes (joined by unitSep), so that an event costs 48 bytes and its
// summary.
type entry struct {
	ts       int64
	duration float32
	what     string // kind, action, result, target
	summary  string
}

const unitSep = "\x1f"

// fields splits a joined string into n parts.
func fields(s string, n int) []string {
	parts := strings.SplitN(s, unitSep, n)
	for len(parts) < n {
		parts = append(parts, "")
	}
	return parts
}

func (e entry) public() Entry {
	p := fields(e.what, 4)
	return Entry{TS: time.Unix(0, e.ts).UTC(), Kind: p[0], Action: p[1], Result: p[2], Target: p[3],
		Duration: float64(e.duration), Summary: e.summary}
}

// node is a Node with the history behind it.
type node struct {
	Node
	hasStatus bool
	// sinceGuess: Since came from a Will delivered at subscribe, whose
	// real time is unknown; a retained history's time replaces it.
	sinceGuess bool
	incidents  map[string]*Incident
	events     []entry // sorted by ts, at most keepEvents
	actions    []entry // sorted by ts, at most keepActions
	counts     *eventCounts
	hist       *nodeHistory
	ids        [keepIDs]uint64 // hashes of the last event ids, a ring
	nextID     int
	wm         struct {
		session, seq uint64
		set          bool
	}
	clock clockOffset
}

func newNode(name string) *node {
	return &node{Node: Node{Name: name, State: StateUnknown, Availability: -1}}
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
// counts in its session (sessionOf), so a sequence that starts again
// after a restart (a new state directory) is not taken for a replay.
func (n *node) replay(e wire.EventMessage) bool {
	if e.Seq == 0 {
		return false
	}
	session, seq := n.sessionOf(e), e.Seq
	if n.wm.set && (session < n.wm.session || (session == n.wm.session && seq <= n.wm.seq)) {
		return true
	}
	n.wm.session, n.wm.seq, n.wm.set = session, seq, true
	return false
}

// sessionOf is the session an event came in: its own, or from an agent
// that does not say, the session of the node's last status (which came
// before it only when both share a connection).
func (n *node) sessionOf(e wire.EventMessage) uint64 {
	if e.Session != 0 {
		return e.Session
	}
	return n.Session
}

// insertByTime inserts e into list sorted by ts and keeps the newest
// max; the list is allocated once, at its bound.
func insertByTime(list []entry, e entry, max int) []entry {
	if list == nil {
		list = make([]entry, 0, max)
	}
	i := sort.Search(len(list), func(i int) bool { return list[i].ts > e.ts })
	if len(list) == max && i == 0 {
		return list // older than everything kept
	}
	if len(list) < max {
		list = append(list, entry{})
		copy(list[i+1:], list[i:])
		list[i] = e
		return list
	}
	copy(list[:i-1], list[1:i]) // drop the oldest
	list[i-1] = e
	return list
}

// eventCounts counts a node's events by kind (EventKinds) over the last
// 24 hours: in 10-minute buckets for the last hour and hourly ones
// before, so that it holds at most 30 buckets whatever the node sends.
type eventCounts struct {
	buckets []countBucket // by start, oldest first
}

type countBucket struct {
	start int64 // unix seconds
	size  int32 // seconds: bucketSize, or an hour
	n     [numEventKinds]uint16
}

// numEventKinds is len(EventKinds), as a constant (a test holds them equal).
const numEventKinds = 10

// count adds one event of kind at t (ignored when older than the window
// at now or in the future beyond a bucket).
func (c *eventCounts) count(kind string, t, now time.Time) {
	size := int64(bucketSize / time.Second)
	start := floorDiv(t.Unix(), size) * size
	if start+hourSeconds <= now.Add(-countWindow).Unix() || start > now.Unix()+size {
		return
	}
	c.fold(now)
	if t.Before(now.Add(-time.Hour)) {
		start, size = floorDiv(t.Unix(), hourSeconds)*hourSeconds, hourSeconds
	}
	i := sort.Search(len(c.buckets), func(i int) bool { return c.buckets[i].start >= start })
	if i == len(c.buckets) || c.buckets[i].start != start || int64(c.buckets[i].size) != size {
		if i > 0 && c.buckets[i-1].start+int64(c.buckets[i-1].size) > start {
			i-- // inside an hourly bucket
		} else {
			c.buckets = append(c.buckets, countBucket{})
			copy(c.buckets[i+1:], c.buckets[i:])
			c.buckets[i] = countBucket{start: start, size: int32(size)}
		}
	}
	if k := kindIndex(kind); c.buckets[i].n[k] < 65535 {
		c.buckets[i].n[k]++
	}
}

// fold drops the buckets that ended before the window and merges the
// 10-minute buckets older than an hour into hourly ones.
func (c *eventCounts) fold(now time.Time) {
	cutoff, hourAgo := now.Add(-countWindow).Unix(), now.Add(-time.Hour).Unix()
	out := c.buckets[:0]
	for _, b := range c.buckets {
		if b.start+int64(b.size) <= cutoff {
			continue
		}
		if int64(b.size) < hourSeconds && b.start+int64(b.size) <= hourAgo {
			b.start, b.size = floorDiv(b.start, hourSeconds)*hourSeconds, hourSeconds
		}
		if k := len(out) - 1; k >= 0 && out[k].start == b.start && out[k].size == b.size {
			for i, v := range b.n {
				out[k].n[i] = uint16(min(int(out[k].n[i])+int(v), 65535))
			}
			continue
		}
		out = append(out, b)
	}
	c.buckets = out
}

// sum is the events by kind whose bucket ends within window of now.
func (c *eventCounts) sum(now time.Time, window time.Duration) map[string]int {
	out := map[string]int{}
	if c == nil {
		return out
	}
	cutoff := now.Add(-window).Unix()
	for _, b := range c.buckets {
		if b.start+int64(b.size) > cutoff && b.start <= now.Unix() {
			for i, v := range b.n {
				if v > 0 {
					out[EventKinds[i]] += int(v)
				}
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

// gaveUp reports whether edgeheal gave up on one of the node's open
// incidents.
func (n *node) gaveUp() bool {
	for _, in := range n.incidents {
		if in.GaveUp {
			return true
		}
	}
	return false
}

// firstIncident is the oldest open incident (given up on, if gaveUp).
func (n *node) firstIncident(gaveUp bool) Incident {
	var first *Incident
	for _, in := range n.incidents {
		if (!gaveUp || in.GaveUp) && (first == nil || in.Opened.Before(first.Opened) ||
			(in.Opened.Equal(first.Opened) && in.Target < first.Target)) {
			first = in
		}
	}
	if first == nil {
		return Incident{}
	}
	return *first
}

// openIncident records an open incident unless the node already has as
// many as it may keep; then it is counted.
func (n *node) openIncident(in *Incident) {
	if _, ok := n.incidents[in.Target]; !ok && len(n.incidents) >= maxOpenIncidents {
		n.IncidentsNotKept++
		return
	}
	if n.incidents == nil {
		n.incidents = map[string]*Incident{} // most nodes have none: no map
	}
	n.incidents[in.Target] = in
}

// share is what a node adds to the fleet's counts (Health): its state
// and its open incidents by kind (IncidentKinds).
type share struct {
	state     string
	incidents [3]int
}

func (n *node) share() share {
	sh := share{state: n.State}
	if len(n.incidents) > 0 {
		for _, in := range n.incidents {
			switch IncidentLabel(in.Kind) {
			case "peer":
				sh.incidents[0]++
			case "workload":
				sh.incidents[1]++
			default:
				sh.incidents[2]++
			}
		}
	}
	return sh
}
