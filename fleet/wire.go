package fleet

import (
	"fmt"
	"runtime/debug"

	jsonexp "github.com/go-json-experiment/json"
	jsonv1 "github.com/go-json-experiment/json/v1"

	"github.com/edgeheal/edgeheal/wire"
)

// The states a node can be in: the ones its status carries (package wire)
// and unknown, a node whose events were seen before any status.
const (
	StateOnline   = wire.StateOnline   // connected, every check healthy
	StateDegraded = wire.StateDegraded // connected, a check unhealthy
	StateOffline  = wire.StateOffline  // stopped cleanly
	StateLost     = wire.StateLost     // the Last Will: the connection died
	StateUnknown  = "unknown"          // events seen, no status yet
)

// States are the node states in the order the page and metrics list them.
var States = []string{StateOnline, StateDegraded, StateLost, StateOffline, StateUnknown}

// knownState reports whether a status's state is one of the wire's.
func knownState(s string) bool {
	return s == StateOnline || s == StateDegraded || s == StateOffline || s == StateLost
}

// decode is wire's Decode* for the view: go-json-experiment's decoder in
// encoding/json's semantics (its v1 package: the same fields, and an
// error for the same input), then wire's own checks. It reads a full
// history in 0.45 of encoding/json's CPU and a status in 0.4, most of a
// 100,000-node view's start (docs/performance.md, "Where the
// 100,000-node start goes"); wire itself stays on the standard library,
// as every program links it.
func decode(what string, b []byte, v interface{ Validate() error }) error {
	if err := jsonexp.Unmarshal(b, v, decodeOptions); err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	return v.Validate()
}

// decodeOptions are encoding/json's semantics but for one thing: an error
// is reported as the decoder meets it, not after a first pass over the
// whole payload that only checks its syntax (a fifth of a history's
// decoding). The same payloads are refused, with other words; what a
// refused payload left half-decoded is never used (FuzzDecode holds both
// to wire's decoders).
var decodeOptions = jsonexp.JoinOptions(jsonv1.DefaultOptionsV1(), jsonv1.ReportErrorsWithLegacySemantics(false))

type decoded struct {
	h   *wire.History // from Store.histories, back to it once applied
	err error
}

// decodedStatus is a status as Prepare decoded it.
type decodedStatus struct {
	st  wire.Status
	err error
}

// Prepare does the part of Apply that needs no lock and returns the
// message to Apply: it decodes a history or a status, which a view reads
// for every node at its start. Several goroutines may prepare while one
// applies; a prepared message is applied once. A node's statuses are to
// be applied in the broker's order: Apply counts one older than the
// node's last stale, and one overtaken would be missed (a state the node
// passed through, an incident its status showed).
func (s *Store) Prepare(m Message) Message {
	_, kind, err := wire.ParseTopic(s.prefix, m.Topic)
	if err != nil || len(m.Payload) == 0 || len(m.Payload) > MaxPayload {
		return m
	}
	switch kind {
	case wire.TopicHistory:
		h := s.histories.Get().(*wire.History)
		m.history = &decoded{h, s.decodeRecovering(m, func() error { return decodeHistory(m.Payload, h) })}
	case wire.TopicStatus:
		d := new(decodedStatus)
		d.err = s.decodeRecovering(m, func() error { return decode("status", m.Payload, &d.st) })
		m.status = d
	}
	return m
}

// preparedStatus is m's status, decoded by Prepare or now.
func (s *Store) preparedStatus(m Message) (wire.Status, error) {
	if m.status == nil {
		m = s.Prepare(m)
	}
	return m.status.st, m.status.err
}

// decodeRecovering runs decode, and a panic in the decoder (a bug met by
// one payload) is that payload's failure, not the view's: Apply counts it
// failed.
func (s *Store) decodeRecovering(m Message, decode func() error) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = &panicked{p, debug.Stack()}
		}
	}()
	if s.fault != nil {
		s.fault(m)
	}
	return decode()
}

// decodeHistory decodes a history into h, whose slices it uses again: a
// full history is about 25 KB of them, which the start would otherwise
// allocate and collect for every node.
func decodeHistory(b []byte, h *wire.History) error {
	empty(h)
	return decode("history", b, h)
}

// empty makes h a zero History that keeps the room of its slices and
// maps, theirs included: a target's repairs and an incident's rungs
// (compactHistory copies them into strings).
func empty(h *wire.History) {
	series := func(s wire.Series) wire.Series {
		return wire.Series{Healthy: s.Healthy[:0], Dark: s.Dark[:0], Degraded: s.Degraded[:0], Incidents: s.Incidents[:0]}
	}
	// Every element up to the capacity: the decoder leaves alone the
	// fields a payload leaves out, and it decodes into a map what it has
	// without removing what it had.
	targets, incidents := h.Targets[:cap(h.Targets)], h.Incidents[:cap(h.Incidents)]
	for i, t := range targets {
		clear(t.Repairs)
		targets[i] = wire.TargetSummary{Repairs: t.Repairs}
	}
	for i, in := range incidents {
		incidents[i] = wire.Incident{Repairs: in.Repairs[:0]}
	}
	*h = wire.History{Hours: series(h.Hours), Days: series(h.Days), Targets: targets[:0], Incidents: incidents[:0]}
}
