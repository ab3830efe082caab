package fleet

import (
	"fmt"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"github.com/edgeheal/edgeheal/wire"
)

// Message is one MQTT message as the view received it.
type Message struct {
	Topic    string
	Payload  []byte
	Retained bool      // delivered from the broker's retained store (at subscribe)
	Received time.Time // when the view received it
	// Unread is the size of a payload larger than MaxPayload that its
	// reader skipped without reading it (Payload is then empty): the
	// message is invalid, and the view says whose it was and how large.
	Unread int

	history *decoded       // Prepare's work, if it was done
	status  *decodedStatus // the same
}

// Result is what Apply did with a message.
type Result string

// Results of Apply, also the `result` label of the message counter.
const (
	Applied   Result = "applied"
	Stale     Result = "stale"     // older than what the view has: a late Will, an old session, a replay by seq
	Duplicate Result = "duplicate" // seen already: the same event id, the same status again
	Invalid   Result = "invalid"   // not a topic or payload this view reads
	Failed    Result = "failed"    // the view met a bug applying it (Health.LastFailure)
	Removed   Result = "removed"   // an empty retained status: the node was decommissioned
)

// Message types, the `type` label of the message counter.
const (
	TypeStatus  = "status"
	TypeWill    = "will" // a status without ts: the Last Will
	TypeEvent   = "event"
	TypeHistory = "history"
)

// MaxPayload is the largest payload the view reads; a larger one is
// invalid (set the broker's message_size_limit to keep it off the wire).
const MaxPayload = 256 << 10

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

// internBytes is intern for a string held in b, made only when it is not
// shared already.
func (s *Store) internBytes(b []byte) string {
	if in, ok := s.strings[string(b)]; ok { // looked up without a copy
		return in
	}
	return s.intern(string(b))
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
	// lastFailure is the last panic Apply recovered from, with its stack.
	lastFailure string
	// fault, set by tests only, is called first in apply and in a
	// history's decoding: a panic there is what a bug would do.
	fault func(Message)

	sumMu   sync.Mutex
	summary *Summary
	sumGen  uint64
	sumMade time.Time
	gen     atomic.Uint64

	byState    map[string]int // nodes by state
	openByKind [3]int         // open incidents by IncidentKinds

	histories sync.Pool // of *wire.History: see decodeHistory
}

// NewStore returns an empty store for topics under prefix.
func NewStore(prefix string) *Store {
	return &Store{prefix: prefix, nodes: map[string]*node{}, strings: map[string]string{}, stats: newStats(), byState: map[string]int{},
		histories: sync.Pool{New: func() any { return new(wire.History) }}}
}

// Prefix is the topic prefix the store reads.
func (s *Store) Prefix() string { return s.prefix }

// Apply applies one message and says what it did with it. Neither Apply
// nor Prepare keeps anything of m.Payload: once Apply returned, the
// caller may read another message into its bytes. A panic (a bug this
// message met) is recovered: the message is Failed, the view goes on.
func (s *Store) Apply(m Message) (res Result) {
	s.mu.Lock()
	defer s.mu.Unlock()
	// The fleet's counts follow the node's share before and after: Health
	// never walks the nodes.
	name, kind, _ := wire.ParseTopic(s.prefix, m.Topic)
	if n, ok := s.nodes[name]; ok {
		s.count(n.share(), -1)
	}
	out := true // the node's share is out of the counts
	defer func() {
		if p := recover(); p != nil {
			if out {
				s.countBack(name)
			}
			if kind == "" {
				kind = TypeStatus
			}
			s.keepFailure(name, kind, &panicked{p, debug.Stack()})
			s.stats.record(applied{typ: kind, res: Failed}, m)
			s.gen.Add(1) // what it changed before it failed is shown
			res = Failed
		}
	}()
	a := s.apply(m)
	if n, ok := s.nodes[name]; ok {
		s.count(n.share(), +1)
	}
	out = false
	s.stats.record(a, m)
	if a.res != Stale && a.res != Duplicate && a.res != Invalid {
		s.gen.Add(1)
	}
	return a.res
}

// count adds a node's share to the fleet's counts (sign -1 removes it).
func (s *Store) count(sh share, sign int) {
	s.byState[sh.state] += sign
	if s.byState[sh.state] == 0 {
		delete(s.byState, sh.state)
	}
	for i, v := range sh.incidents {
		s.openByKind[i] += sign * v
	}
}

// Generation grows with every message that changed the fleet: the page
// asks whether it should fetch itself again.
func (s *Store) Generation() uint64 { return s.gen.Load() }

// applied is what the stats learn of one message.
type applied struct {
	typ, kind      string // kind: an event's kind
	res            Result
	lag            bool          // a live message whose delay counts as the view's lag
	raw, corrected time.Duration // its delay, and above its node's clock offset
}

// delay measures a live message's delay for the lag, unless it is
// retained (its age is the node's silence, not the view's lag) or an
// event older than the node's last status (a replay of its outbox: the
// node told the view something newer already).
func (a *applied) delay(n *node, m Message, ts time.Time, session uint64, event bool) {
	if m.Retained || ts.IsZero() || (event && ts.Before(n.StatusTS)) {
		return
	}
	a.lag, a.raw = true, m.Received.Sub(ts)
	a.corrected = n.clock.correct(a.raw, session)
}

func (s *Store) apply(m Message) applied {
	if s.fault != nil {
		s.fault(m)
	}
	name, kind, err := wire.ParseTopic(s.prefix, m.Topic)
	if err != nil {
		s.lastErr = clip(err.Error(), maxText)
		return applied{typ: TypeStatus, res: Invalid}
	}
	typ := kind
	if size := max(len(m.Payload), m.Unread); size > MaxPayload {
		s.lastErr = clip(fmt.Sprintf("%s: a %s of %d bytes: larger than %d", name, kind, size, MaxPayload), maxText)
		return applied{typ: typ, res: Invalid}
	}
	switch kind {
	case wire.TopicEvent:
		var e wire.EventMessage
		if err := decode("event", m.Payload, &e); err != nil {
			s.lastErr = clip(name+": "+err.Error(), maxText)
			return applied{typ: TypeEvent, res: Invalid}
		}
		n := s.node(name)
		a := applied{typ: TypeEvent, kind: e.Kind}
		if a.res = s.applyEvent(n, e, m); a.res == Applied {
			a.delay(n, m, e.Time, n.sessionOf(e), true)
		}
		return a
	case wire.TopicHistory:
		return applied{typ: TypeHistory, res: s.applyHistory(name, m)}
	}
	if len(m.Payload) == 0 {
		if _, ok := s.nodes[name]; !ok {
			return applied{typ: TypeStatus, res: Duplicate}
		}
		delete(s.nodes, name)
		return applied{typ: TypeStatus, res: Removed}
	}
	st, err := s.preparedStatus(m)
	if p, ok := err.(*panicked); ok {
		s.keepFailure(name, TypeStatus, p)
		return applied{typ: TypeStatus, res: Failed}
	}
	if err != nil {
		s.lastErr = clip(name+": "+err.Error(), maxText)
		return applied{typ: TypeStatus, res: Invalid}
	}
	if !knownState(st.State) {
		s.lastErr = clip(fmt.Sprintf("%s: status: state %q is none of online, degraded, offline, lost", name, st.State), maxText)
		return applied{typ: TypeStatus, res: Invalid}
	}
	typ = TypeStatus
	if st.TS.IsZero() {
		typ = TypeWill
	}
	n := s.node(name)
	a := applied{typ: typ}
	if a.res = s.applyStatus(n, st, m); a.res == Applied {
		a.delay(n, m, st.TS, n.Session, false)
	}
	return a
}

// applyHistory keeps a node's retained history: a newer one replaces
// the one kept; an empty one forgets it.
func (s *Store) applyHistory(name string, m Message) Result {
	if len(m.Payload) == 0 {
		n, ok := s.nodes[name]
		if !ok || n.hist == nil {
			return Duplicate
		}
		n.hist, n.Availability = nil, -1
		return Removed
	}
	if m.history == nil {
		m = s.Prepare(m)
	}
	defer s.histories.Put(m.history.h)
	h, err := *m.history.h, m.history.err
	if p, ok := err.(*panicked); ok {
		s.keepFailure(name, wire.TopicHistory, p)
		return Failed
	}
	if err != nil {
		s.lastErr = clip(name+": "+err.Error(), maxText)
		return Invalid
	}
	n := s.node(name)
	if n.hist != nil {
		switch ts := h.TS.UnixMilli(); {
		case ts == n.hist.ts:
			return Duplicate
		case ts < n.hist.ts:
			return Stale
		}
	}
	n.hist = s.compactHistory(h)
	if n.Site == "" && h.Site != "" {
		n.Site = s.intern(clip(h.Site, maxName))
	}
	n.seen(m, h.TS)
	if n.sinceGuess && n.State == StateLost && h.TS.Before(n.Since) {
		n.Since = n.LastSeen // the Will came at subscribe: the node was last heard then
	}
	today := floorDiv(m.Received.Unix(), daySeconds)
	if healthy, observed := n.hist.availability(today-glanceDays+1, today+1); observed > 0 {
		n.Availability = float64(healthy) / float64(observed)
	} else {
		n.Availability = -1
	}
	return Applied
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
		// A Will delivered at subscribe was published at some time the view
		// did not see: the node's last word is the better guess.
		n.sinceGuess = st.TS.IsZero() && m.Retained
		if n.sinceGuess && !n.LastSeen.IsZero() {
			n.Since = n.LastSeen
		}
	}
	n.hasStatus = true
	n.State, n.Session, n.StatusTS = s.intern(clip(st.State, maxName)), st.Session, st.TS
	// The identity: a Will carries it too (site, version, revision); what
	// a message leaves out, the view keeps from before.
	if st.Site != "" {
		n.Site = s.intern(clip(st.Site, maxName))
	}
	if st.Version != "" {
		n.Version = s.intern(clip(st.Version, maxName))
	}
	if st.ConfigRevision != "" {
		n.ConfigRevision = s.intern(clip(st.ConfigRevision, maxName))
	}
	if !st.TS.IsZero() {
		n.seen(m, st.TS)
	}
	if st.State == StateLost || st.State == StateOffline {
		return Applied // the Will and the goodbye carry no checks: keep the last ones
	}
	n.Checks, n.ChecksTotal, n.ChecksHealthy = nil, 0, 0
	if st.Checks != nil {
		n.Checks, n.ChecksTotal, n.ChecksHealthy = s.keepChecks(st.Checks.Items), st.Checks.Total, st.Checks.Healthy
	}
	n.reconcile(at)
	return Applied
}

// keepChecks is at most maxChecks checks, their strings clipped and shared.
func (s *Store) keepChecks(items []wire.Check) []wire.Check {
	out := make([]wire.Check, 0, min(len(items), maxChecks))
	for _, c := range items[:min(len(items), maxChecks)] {
		out = append(out, wire.Check{Kind: s.intern(clip(c.Kind, maxName)), Target: s.intern(clip(c.Target, maxName)),
			State: s.intern(clip(c.State, maxName)), Healthy: c.Healthy, Detail: s.intern(clip(c.Detail, maxText)),
			LastAction: clip(c.LastAction, maxText), Since: c.Since})
	}
	return out
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
		case !c.Healthy && !open && (c.Kind == wire.KindPeer || c.Kind == wire.KindWorkload || c.Kind == wire.KindPathMTU):
			opened := c.Since
			if opened.IsZero() {
				opened = at
			}
			n.openIncident(&Incident{Target: c.Target, Kind: c.Kind, Opened: opened,
				Summary: clip(c.Kind+" "+c.Target+" "+c.State+": "+c.Detail, maxText), GaveUp: c.State == "degraded", FromStatus: true})
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
	if n.Site == "" && e.Site != "" {
		n.Site = s.intern(clip(e.Site, maxName))
	}
	n.seen(m, e.Time)
	e.Target, e.Summary = clip(e.Target, maxName), clip(e.Summary, maxText)
	what := clip(e.Kind, maxName) + unitSep + clip(e.Action, maxName) + unitSep + clip(e.Result, maxName) + unitSep + e.Target
	en := entry{ts: e.Time.UnixNano(), what: s.intern(what), duration: float32(e.Duration), summary: s.intern(e.Summary)}
	n.events = insertByTime(n.events, en, keepEvents)
	if e.Kind == "action" {
		n.actions = insertByTime(n.actions, en, keepActions)
		last := n.actions[len(n.actions)-1].public()
		n.LastAction = &last
	}
	if n.counts == nil {
		n.counts = &eventCounts{}
	}
	n.counts.count(e.Kind, e.Time, m.Received)
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
		n.openIncident(&Incident{Target: e.Target, Kind: n.checkKind(e.Target), Opened: e.Time, Summary: e.Summary})
	case "gave-up", "degraded":
		in, ok := n.incidents[e.Target]
		if !ok {
			in = &Incident{Target: e.Target, Kind: n.checkKind(e.Target), Opened: e.Time, Summary: e.Summary}
			n.openIncident(in)
		}
		in.GaveUp = true
	case "recovered":
		if in, ok := n.incidents[e.Target]; ok && !e.Time.Before(in.Opened) {
			delete(n.incidents, e.Target)
		}
	}
}
