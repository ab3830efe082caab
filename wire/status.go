package wire

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// Status is the retained payload of <prefix>/<node>/status. The Last Will
// carries only V, State ("lost") and Session.
//
// Session increases with every connection attempt of the node (it is
// persisted in the agent's state directory): a consumer keeps the highest
// session it has seen per node and ignores a message with a lower one, so
// a Will that the broker delivers late cannot overwrite a newer status.
type Status struct {
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

// ChecksSummary summarises every check of the agent on the status topic:
// the checks without their typed parts (Check.Summary).
type ChecksSummary struct {
	Total   int     `json:"total"`
	Healthy int     `json:"healthy"`
	Items   []Check `json:"items"`
}

// Summarize is the status topic's summary of checks, and the node's state.
func Summarize(checks []Check) (ChecksSummary, string) {
	state, healthy, total := NodeState(checks)
	s := ChecksSummary{Total: total, Healthy: healthy, Items: make([]Check, 0, len(checks))}
	for _, c := range checks {
		s.Items = append(s.Items, c.Summary())
	}
	return s, state
}

// ErrVersion matches the error of a payload of another version than
// Version: a reader shows what it understands.
var ErrVersion = errors.New("unknown payload version")

// DecodeStatus decodes a status payload. A payload of another version, or
// one without a state, is an error.
func DecodeStatus(b []byte) (Status, error) {
	var s Status
	if err := json.Unmarshal(b, &s); err != nil {
		return Status{}, fmt.Errorf("status: %w", err)
	}
	if err := s.Validate(); err != nil {
		return Status{}, err
	}
	return s, nil
}

// Validate reports whether a decoded status can be read: its version and
// a state (DecodeStatus's checks, for a reader with another decoder).
func (s *Status) Validate() error {
	if s.V != Version {
		return fmt.Errorf("status: v=%d: %w", s.V, ErrVersion)
	}
	if s.State == "" {
		return errors.New("status: no state")
	}
	return nil
}

// NodeInfo identifies the agent in its local status.
type NodeInfo struct {
	Node           string `json:"node"`
	Site           string `json:"site,omitempty"`
	Version        string `json:"version"`
	ConfigRevision string `json:"config_revision,omitempty"`
}

// LocalStatus is the agent's own account of itself, served to local
// readers (`edgeheal status`, edgeheal-kube) as /v1/status.
type LocalStatus struct {
	V int `json:"v"`
	NodeInfo
	State        string      `json:"state"` // StateOnline (every check healthy) or StateDegraded
	Ready        bool        `json:"ready"`
	ReadyDetail  string      `json:"ready_detail,omitempty"`
	LastProgress time.Time   `json:"last_progress,omitzero"`
	Checks       []Check     `json:"checks"`
	Outbox       *OutboxInfo `json:"outbox,omitempty"`
	MQTT         *MQTTInfo   `json:"mqtt,omitempty"`
}

// OutboxInfo is the event outbox in the local status.
type OutboxInfo struct {
	Depth   int    `json:"depth"`
	Dropped uint64 `json:"dropped_total"`
}

// MQTTInfo is the reporting connection in the local status.
type MQTTInfo struct {
	Broker    string `json:"broker"`
	ClientID  string `json:"client_id"`
	Connected bool   `json:"connected"`
	Session   uint64 `json:"session"`
	LastError string `json:"last_error,omitempty"`
}
