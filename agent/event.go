package agent

import (
	"crypto/rand"
	"encoding/hex"
	"time"
)

// Event is one incident or action, as reported on the event topic and kept
// in the outbox until the broker acknowledges it.
type Event struct {
	ID       string         `json:"id"`   // unique; consumers deduplicate by it
	Time     time.Time      `json:"ts"`   // when it happened (incident opened, action started)
	Kind     string         `json:"kind"` // e.g. "offload-drift", "incident", "action", "recovered"
	Target   string         `json:"target"`
	Action   string         `json:"action,omitempty"` // the rung or fix, for kind "action"
	Result   string         `json:"result,omitempty"` // "changed", "unchanged", "ok", "failed", "dry-run", ...
	Duration float64        `json:"duration_seconds,omitempty"`
	Summary  string         `json:"summary"` // one line a human reads
	Evidence map[string]any `json:"evidence,omitempty"`
}

// Emit receives events. It must not block for long: the outbox behind it
// appends and syncs to disk, nothing more.
type Emit func(Event)

// NewEventID returns a random, unique event id.
func NewEventID() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
