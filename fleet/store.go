package fleet

import (
	"sync"
	"time"

	"github.com/edgeheal/edgeheal/wire"
)

// Message is one MQTT message as the view received it.
type Message struct {
	Topic    string
	Payload  []byte
	Retained bool      // delivered from the broker's retained store (at subscribe)
	Received time.Time // when the view received it
}

// Result is what Apply did with a message.
type Result string

// Results of Apply, also the `result` label of the message counter.
const (
	Applied   Result = "applied"
	Stale     Result = "stale"     // older than what the view has: a late Will, an old session, a replay by seq
	Duplicate Result = "duplicate" // seen already: the same event id, the same status again
	Invalid   Result = "invalid"   // not a topic or payload this view reads
	Removed   Result = "removed"   // an empty retained status: the node was decommissioned
)

// Message types, the `type` label of the message counter.
const (
	TypeStatus = "status"
	TypeWill   = "will" // a status without ts: the Last Will
	TypeEvent  = "event"
)

// maxInterned bounds the strings the store shares between nodes.
const maxInterned = 50000

// intern returns one shared copy of a string that many events repeat
// (kinds, actions, results, tunnel targets), so that a fleet's history
// does not hold a copy per event.
func (s *Store) intern(v string) string {
	if in, ok := s.strings[v]; ok {
		return in
	}
	if len(s.strings) < maxInterned {
		s.strings[v] = v
	}
	return v
}

// Store is the fleet's state. Apply is called by one goroutine (the MQTT
// subscriber); every query may run concurrently with it. It does no I/O.
type Store struct {
	prefix string

	mu      sync.RWMutex
	nodes   map[string]*node
	strings map[string]string // see intern
	stats   stats
	lastErr string
}

// NewStore returns an empty store for topics under prefix.
func NewStore(prefix string) *Store {
	return &Store{prefix: prefix, nodes: map[string]*node{}, strings: map[string]string{}, stats: newStats()}
}

// Prefix is the topic prefix the store reads.
func (s *Store) Prefix() string { return s.prefix }

// Apply applies one message and says what it did with it.
func (s *Store) Apply(m Message) Result {
	s.mu.Lock()
	defer s.mu.Unlock()
	a := s.apply(m)
	s.stats.record(a, m)
	return a.res
}

// applied is what the stats learn of one message.
type applied struct {
	typ, kind string // kind: an event's kind
	res       Result
	ts        time.Time
}

func (s *Store) apply(m Message) applied {
	name, kind, err := wire.ParseTopic(s.prefix, m.Topic)
	if err != nil {
		s.lastErr = err.Error()
		return applied{typ: TypeStatus, res: Invalid}
	}
	if kind == wire.TopicEvent {
		e, err := wire.DecodeEvent(m.Payload)
		if err != nil {
			s.lastErr = name + ": " + err.Error()
			return applied{typ: TypeEvent, res: Invalid}
		}
		return applied{typ: TypeEvent, kind: e.Kind, ts: e.Time, res: s.applyEvent(s.node(name), e, m)}
	}
	if len(m.Payload) == 0 {
		if _, ok := s.nodes[name]; !ok {
			return applied{typ: TypeStatus, res: Duplicate}
		}
		delete(s.nodes, name)
		return applied{typ: TypeStatus, res: Removed}
	}
	st, err := wire.DecodeStatus(m.Payload)
	if err != nil {
		s.lastErr = name + ": " + err.Error()
		return applied{typ: TypeStatus, res: Invalid}
	}
	typ := TypeStatus
	if st.TS.IsZero() {
		typ = TypeWill
	}
	return applied{typ: typ, ts: st.TS, res: s.applyStatus(s.node(name), st, m)}
}

func (s *Store) node(name string) *node {
	n, ok := s.nodes[name]
	if !ok {
		n = newNode(name)
		s.nodes[name] = n
	}
	return n
}

// statusOrder decides whether st is newer than what n has. A lower
// session is stale (a Will delivered late, a message of a connection
// that was replaced). Within a session messages come in order on one
// topic, and lost or offline end the session: whatever of that session
// comes after them is stale.
func statusOrder(n *node, st wire.Status) Result {
	if !n.hasStatus || st.Session > n.Session {
		return Applied
	}
	if st.Session < n.Session {
		return Stale
	}
	if st.State == n.State && st.TS.Equal(n.StatusTS) {
		return Duplicate
	}
	if n.State == StateLost || n.State == StateOffline {
		return Stale
	}
	if !st.TS.IsZero() && st.TS.Before(n.StatusTS) {
		return Stale
	}
	return Applied
}

func (s *Store) applyStatus(n *node, st wire.Status, m Message) Result {
	if r := statusOrder(n, st); r != Applied {
		return r
	}
	at := st.TS
	if at.IsZero() {
		at = m.Received // a Will: the broker published it when the link died
	}
	if !n.hasStatus || st.State != n.State {
		n.Since = at
	}
	n.hasStatus = true
	n.State, n.Session, n.StatusTS = st.State, st.Session, st.TS
	if st.Site != "" {
		n.Site = st.Site
	}
	if !st.TS.IsZero() {
		n.seen(m, st.TS)
	}
	if st.State == StateLost || st.State == StateOffline {
		return Applied // the Will and the goodbye carry no checks: keep the last ones
	}
	n.Version, n.ConfigRevision = st.Version, st.ConfigRevision
	n.Checks, n.ChecksTotal, n.ChecksHealthy = nil, 0, 0
	if st.Checks != nil {
		n.Checks, n.ChecksTotal, n.ChecksHealthy = st.Checks.Items, st.Checks.Total, st.Checks.Healthy
	}
	n.reconcile(at)
	return Applied
}

// seen moves LastSeen: a live message says the node is there now; a
// retained one says it was there at its ts (a Will says nothing of it).
func (n *node) seen(m Message, ts time.Time) {
	t := m.Received
	if m.Retained {
		t = ts
	}
	if t.After(n.LastSeen) {
		n.LastSeen = t
	}
}

// reconcile makes the open incidents agree with the status's checks: a
// target whose check is healthy again (in a status not older than the
// incident) has no open incident; an unhealthy tunnel, workload or
// path-MTU check without an incident gets one, marked as known from the
// status (the view started after the incident event, or another instance
// got it).
func (n *node) reconcile(at time.Time) {
	for _, c := range n.Checks {
		in, open := n.incidents[c.Target]
		switch {
		case c.Healthy && open && !at.Before(in.Opened):
			delete(n.incidents, c.Target)
		case !c.Healthy && !open && (c.Kind == "peer" || c.Kind == "workload" || c.Kind == "path-mtu"):
			opened := c.Since
			if opened.IsZero() {
				opened = at
			}
			n.incidents[c.Target] = &Incident{Target: c.Target, Kind: c.Kind, Opened: opened,
				Summary: c.Kind + " " + c.Target + " " + c.State + ": " + c.Detail, GaveUp: c.State == "degraded", FromStatus: true}
		case open && !c.Healthy && c.State == "degraded" && c.Kind == "peer":
			in.GaveUp = true
		}
	}
}

func (s *Store) applyEvent(n *node, e wire.EventMessage, m Message) Result {
	if n.seenID(e.ID) {
		return Duplicate
	}
	if n.replay(e) {
		return Stale
	}
	if e.Time.IsZero() {
		e.Time = m.Received
	}
	if n.Site == "" {
		n.Site = e.Site
	}
	n.seen(m, e.Time)
	en := Entry{TS: e.Time, Kind: s.intern(e.Kind), Target: s.intern(e.Target), Action: s.intern(e.Action),
		Result: s.intern(e.Result), Duration: e.Duration, Summary: e.Summary}
	n.events = insertByTime(n.events, en, keepEvents)
	if e.Kind == "action" {
		n.actions = insertByTime(n.actions, en, keepActions)
		last := n.actions[len(n.actions)-1]
		n.LastAction = &last
	}
	n.count(e.Kind, e.Time, m.Received)
	n.incident(e)
	return Applied
}

// incident opens, marks or closes the incident an event speaks of.
func (n *node) incident(e wire.EventMessage) {
	switch e.Kind {
	case "incident":
		if in, ok := n.incidents[e.Target]; ok && !in.FromStatus {
			return
		}
		n.incidents[e.Target] = &Incident{Target: e.Target, Kind: n.checkKind(e.Target), Opened: e.Time, Summary: e.Summary}
	case "gave-up", "degraded":
		in, ok := n.incidents[e.Target]
		if !ok {
			in = &Incident{Target: e.Target, Kind: n.checkKind(e.Target), Opened: e.Time, Summary: e.Summary}
			n.incidents[e.Target] = in
		}
		in.GaveUp = true
	case "recovered":
		if in, ok := n.incidents[e.Target]; ok && !e.Time.Before(in.Opened) {
			delete(n.incidents, e.Target)
		}
	}
}
