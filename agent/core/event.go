package core

import (
	"crypto/rand"
	"encoding/hex"
	"time"

	"github.com/edgeheal/edgeheal/wire"
)

// Event is one incident or action (package wire has its fields).
type Event = wire.Event

// Emit receives a component's events. It never blocks: the agent's
// Emit puts the event into a bounded queue that the reporting side
// (agent/recorder) drains, so a slow disk, a hung evidence source or a
// broker that does not answer can delay an event's record but never the
// component that raised it.
type Emit func(Event)

// Discard is an Emit that drops every event (a one-shot check).
func Discard(Event) {}

// NewEventID returns a random, unique event id.
func NewEventID() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// ProbeSample is one active probe, for the probe duration metric.
type ProbeSample struct {
	Kind     string // "tunnel", "workload-pod", "workload-host"
	Target   string // the tunnel's interface, the workload's name
	Result   string // "ok", "fail" or "error"
	Duration time.Duration
}
