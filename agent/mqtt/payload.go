package mqtt

import (
	"time"

	"github.com/edgeheal/edgeheal/agent"
)

// States on the status topic: agent.StateOnline and agent.StateDegraded
// while connected, and these two.
const (
	StateOffline = "offline" // clean shutdown
	StateLost    = "lost"    // the Last Will: the connection died without a goodbye
)

// PayloadVersion is the "v" of status and event payloads.
const PayloadVersion = 1

// StatusMessage is the retained payload of <prefix>/<node>/status. The Last
// Will carries only V, State ("lost") and Session.
//
// Session increases with every connection attempt of the node (it is
// persisted in the state directory): a consumer keeps the highest session it
// has seen per node and ignores a message with a lower one, so a Will that
// the broker delivers late cannot overwrite a newer status.
type StatusMessage struct {
	V              int            `json:"v"`
	State          string         `json:"state"`
	Session        uint64         `json:"session"`
	TS             time.Time      `json:"ts,omitzero"`
	Node           string         `json:"node,omitempty"`
	Site           string         `json:"site,omitempty"`
	Version        string         `json:"version,omitempty"`
	ConfigRevision string         `json:"config_revision,omitempty"`
	Checks         *ChecksSummary `json:"checks,omitempty"`
}

// ChecksSummary summarises every check of the agent.
type ChecksSummary struct {
	Total   int            `json:"total"`
	Healthy int            `json:"healthy"`
	Items   []CheckSummary `json:"items"`
}

// CheckSummary is one check in a status message: agent.Check without the
// typed part of its kind.
type CheckSummary struct {
	Kind       string    `json:"kind"`
	Target     string    `json:"target"`
	State      string    `json:"state"`
	Healthy    bool      `json:"healthy"`
	Detail     string    `json:"detail,omitempty"`
	LastAction string    `json:"last_action,omitempty"`
	Since      time.Time `json:"since,omitzero"`
}

// summarize builds the checks summary and the node's state.
func summarize(checks []agent.Check) (ChecksSummary, string) {
	state, healthy, total := agent.NodeState(checks)
	s := ChecksSummary{Total: total, Healthy: healthy, Items: make([]CheckSummary, 0, len(checks))}
	for _, c := range checks {
		s.Items = append(s.Items, CheckSummary{
			Kind: c.Kind, Target: c.Target, State: c.State, Healthy: c.Healthy,
			Detail: c.Detail, LastAction: c.LastAction, Since: c.Since,
		})
	}
	return s, state
}

// EventMessage is the payload of <prefix>/<node>/event: the event with the
// payload version, the node it came from and its sequence number.
//
// Seq grows with every event of the node, also across restarts and a
// wiped state directory (the outbox numbers a new log from the clock), and
// events are published in Seq order: a consumer that keeps the highest
// Seq it has seen per node knows every event below it was published
// before it, and one that sees an event twice (delivery is at least once)
// sees the same Seq and id.
type EventMessage struct {
	V    int    `json:"v"`
	Node string `json:"node"`
	Site string `json:"site,omitempty"`
	Seq  uint64 `json:"seq,omitempty"` // 0 only for a message made without one
	agent.Event
}
