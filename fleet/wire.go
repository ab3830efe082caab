package fleet

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
)

// The states a node's status can carry (docs/operations.md, "MQTT").
const (
	StateOnline   = "online"   // connected, every check healthy
	StateDegraded = "degraded" // connected, a check unhealthy
	StateOffline  = "offline"  // stopped cleanly
	StateLost     = "lost"     // the Last Will: the connection died
	StateUnknown  = "unknown"  // events seen, no status yet
)

// States are the node states in the order the page and metrics list them.
var States = []string{StateOnline, StateDegraded, StateLost, StateOffline, StateUnknown}

// Status is the retained payload of <prefix>/<node>/status. The Last Will
// carries only V, State and Session.
type Status struct {
	V              int       `json:"v"`
	State          string    `json:"state"`
	Session        uint64    `json:"session"`
	TS             time.Time `json:"ts"`
	Node           string    `json:"node"`
	Site           string    `json:"site"`
	Version        string    `json:"version"`
	ConfigRevision string    `json:"config_revision"`
	Checks         *Checks   `json:"checks"`
}

// Checks is the summary of every check of the agent.
type Checks struct {
	Total   int     `json:"total"`
	Healthy int     `json:"healthy"`
	Items   []Check `json:"items"`
}

// Check is one check of a node.
type Check struct {
	Kind       string    `json:"kind"`
	Target     string    `json:"target"`
	State      string    `json:"state"`
	Healthy    bool      `json:"healthy"`
	Detail     string    `json:"detail"`
	LastAction string    `json:"last_action"`
	Since      time.Time `json:"since"`
}

// Event is the payload of <prefix>/<node>/event. Session and Seq are
// optional: agents that number their events send them, and the view then
// uses them to ignore replays; without them it deduplicates by ID only.
type Event struct {
	V        int            `json:"v"`
	Node     string         `json:"node"`
	Site     string         `json:"site"`
	ID       string         `json:"id"`
	TS       time.Time      `json:"ts"`
	Kind     string         `json:"kind"`
	Target   string         `json:"target"`
	Action   string         `json:"action"`
	Result   string         `json:"result"`
	Duration float64        `json:"duration_seconds"`
	Summary  string         `json:"summary"`
	Evidence map[string]any `json:"evidence"`
	Session  *uint64        `json:"session"`
	Seq      *uint64        `json:"seq"`
}

// Topic kinds.
const (
	TopicStatus = "status"
	TopicEvent  = "event"
)

// ParseTopic splits <prefix>/<node>/<kind> into the node and the kind
// (status or event). The node comes from the topic, not the payload: the
// broker's ACL is what lets a node write only its own topics
// (docs/operations.md, "Broker ACL").
func ParseTopic(prefix, topic string) (node, kind string, err error) {
	rest, ok := strings.CutPrefix(topic, prefix+"/")
	if !ok {
		return "", "", fmt.Errorf("topic %q is not under %s/", topic, prefix)
	}
	node, kind, ok = strings.Cut(rest, "/")
	if !ok || node == "" || strings.Contains(kind, "/") || (kind != TopicStatus && kind != TopicEvent) {
		return "", "", fmt.Errorf("topic %q: want %s/<node>/status or %s/<node>/event", topic, prefix, prefix)
	}
	return node, kind, nil
}

// errVersion is a payload of a version this view does not read.
var errVersion = errors.New("unknown payload version")

// DecodeStatus decodes a status payload. A payload of another version, or
// one without a state, is an error: the view shows what it understands.
func DecodeStatus(b []byte) (Status, error) {
	var s Status
	if err := json.Unmarshal(b, &s); err != nil {
		return Status{}, fmt.Errorf("status: %w", err)
	}
	if s.V != 1 {
		return Status{}, fmt.Errorf("status: v=%d: %w", s.V, errVersion)
	}
	if s.State == "" {
		return Status{}, errors.New("status: no state")
	}
	return s, nil
}

// DecodeEvent decodes an event payload; it needs an id and a kind.
func DecodeEvent(b []byte) (Event, error) {
	var e Event
	if err := json.Unmarshal(b, &e); err != nil {
		return Event{}, fmt.Errorf("event: %w", err)
	}
	if e.V != 1 {
		return Event{}, fmt.Errorf("event: v=%d: %w", e.V, errVersion)
	}
	if e.ID == "" || e.Kind == "" {
		return Event{}, errors.New("event: no id or no kind")
	}
	return e, nil
}
