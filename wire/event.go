package wire

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// Event is one incident or action: what the agent keeps in its outbox
// until the broker acknowledges it, and the body of an event message.
type Event struct {
	ID       string         `json:"id"`   // unique; consumers deduplicate by it
	Time     time.Time      `json:"ts"`   // when it happened (incident opened, action started)
	Kind     string         `json:"kind"` // EventIncident, EventAction, ...
	Target   string         `json:"target"`
	Action   string         `json:"action,omitempty"` // the rung or fix, for kind "action"
	Result   string         `json:"result,omitempty"` // "changed", "unchanged", "ok", "failed", "dry-run", ...
	Duration float64        `json:"duration_seconds,omitempty"`
	Summary  string         `json:"summary"` // one line a human reads
	Evidence map[string]any `json:"evidence,omitempty"`
}

// Event kinds that more than one program reads. The agent has a few more
// (a reader shows any kind as it is).
const (
	EventIncident     = "incident"      // a target went bad (Result "opened"), or a part of the agent itself is in trouble
	EventRecovered    = "recovered"     // an incident closed; Duration is how long it was open
	EventAction       = "action"        // a fix or a rung ran; Action names it
	EventGaveUp       = "gave-up"       // the ladder gave up on a target: alert only until healthy
	EventDegraded     = "degraded"      // a target given up on is still bad (a repeated alert)
	EventOffloadDrift = "offload-drift" // a guarded offload feature was found in the wrong state
	EventOffloadFight = "offload-fight" // something else keeps turning it back on
	EventComponent    = "component"     // a part of the agent failed or panicked and runs again
)

// EventMessage is the payload of <prefix>/<node>/event: the event with the
// payload version, the node it came from and its sequence number.
//
// Seq grows with every event of the node, also across restarts and a
// wiped state directory, and events are published in Seq order: a
// consumer that keeps the highest Seq it has seen per node knows every
// event below it was published before it, and one that sees an event
// twice (delivery is at least once) sees the same Seq and id. Seq 0 means
// the sender does not number its events.
//
// Session is that of the connection that published the event (its
// status carries the same): an event queued while the node was away
// carries the session it was finally delivered in. A consumer can so
// place an event without the status of its session, which may come on
// another connection. 0 from agents before it.
type EventMessage struct {
	V       int    `json:"v"`
	Node    string `json:"node"`
	Site    string `json:"site,omitempty"`
	Session uint64 `json:"session,omitempty"`
	Seq     uint64 `json:"seq,omitempty"`
	Event
}

// DecodeEvent decodes an event message; it needs an id and a kind.
func DecodeEvent(b []byte) (EventMessage, error) {
	var e EventMessage
	if err := json.Unmarshal(b, &e); err != nil {
		return EventMessage{}, fmt.Errorf("event: %w", err)
	}
	if err := e.Validate(); err != nil {
		return EventMessage{}, err
	}
	return e, nil
}

// Validate reports whether a decoded event message can be read: its
// version, an id and a kind (DecodeEvent's checks, for a reader with
// another decoder).
func (e *EventMessage) Validate() error {
	if e.V != Version {
		return fmt.Errorf("event: v=%d: %w", e.V, ErrVersion)
	}
	if e.ID == "" || e.Kind == "" {
		return errors.New("event: no id or no kind")
	}
	return nil
}
