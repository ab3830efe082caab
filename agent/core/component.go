package core

import (
	"context"
	"time"

	"github.com/edgeheal/edgeheal/wire"
)

// A Component is one supervised part of the agent: the offload guard, one
// tunnel, the workloads, the outbox, the MQTT publisher, the HTTP API. Run
// runs until ctx ends and then returns nil; it returns an error only when
// it cannot go on (a handle it needs cannot be opened, a file it needs is
// missing), and the supervisor reports it, backs off and runs it again. A
// panic in Run is recovered by the supervisor the same way.
//
// Health is what /readyz, STATUS=, the component checks and the watchdog
// read; it is safe to call from any goroutine, before, during and after
// Run, and it never waits for the component's work.
type Component interface {
	Name() string
	Run(ctx context.Context) error
	Health() Health
}

// Health is a component's own view of itself while it runs.
type Health struct {
	// Degraded is set when the component runs but cannot do all of its
	// work (events kept in memory only, a subscription lost); Detail says
	// why.
	Degraded bool
	Detail   string
	// LastProgress is when the component last completed a unit of work (a
	// round, a pass). A component whose LastProgress is older than
	// Deadline is stale: the watchdog is not fed. Deadline 0 means the
	// component is passive and its progress is not watched.
	LastProgress time.Time
	Deadline     time.Duration
}

// Checker is a component that also has health checks of its targets. Like
// Health, Checks returns a snapshot and never waits.
type Checker interface {
	Checks() []wire.Check
}
