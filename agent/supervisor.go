package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	"github.com/edgeheal/edgeheal/agent/core"
	"github.com/edgeheal/edgeheal/wire"
)

// The supervisor runs each component in a goroutine of its own. A
// component that returns an error (it cannot start: a missing file, a
// handle that will not open) or panics is reported (log, event, its
// component check) and run again after a backoff, doubling from one second
// to a minute, with jitter; the others never notice. A component that ran
// for a minute before it failed starts again from the shortest backoff.
//
// It is written here rather than taken from github.com/thejerf/suture/v4:
// suture restarts a failed service at once and backs off only after a
// failure threshold, for the whole supervisor at a fixed duration; a part
// that cannot start would be retried five times in a burst, then the
// others would pause with it. edgeheal wants per-component exponential
// backoff and a progress deadline per component for the watchdog, which
// is most of what a supervisor is.

// Component states, as the component checks show them.
const (
	ComponentStarting = "starting" // running, no progress yet
	ComponentOK       = "ok"
	ComponentDegraded = "degraded" // running, cannot do all of its work
	ComponentStale    = "stale"    // running, no progress within its deadline
	ComponentFailed   = "failed"   // returned an error or panicked; waiting to run again
)

const (
	restartMin    = time.Second
	restartMax    = time.Minute
	restartStable = time.Minute // a run this long resets the backoff
)

// supervisor runs components. Its zero value is not usable: use
// newSupervisor.
type supervisor struct {
	log  *slog.Logger
	emit core.Emit
	now  func() time.Time

	mu       sync.Mutex
	runs     []*supervised
	stopping []*supervised // being stopped, until their Run returned
}

// supervised is one component under the supervisor.
type supervised struct {
	c      core.Component
	cancel context.CancelFunc
	done   chan struct{}

	// guarded by Supervisor.mu
	running  bool
	started  time.Time // of the current run
	failure  string    // the last failure, while failed
	failedAt time.Time
	retryAt  time.Time
	restarts int
	reported string // the failure last reported as an event
}

// newSupervisor returns a supervisor that logs to log and reports failures
// as events through emit (nil: not reported).
func newSupervisor(log *slog.Logger, emit core.Emit, now func() time.Time) *supervisor {
	if emit == nil {
		emit = func(core.Event) {}
	}
	if now == nil {
		now = time.Now
	}
	return &supervisor{log: log, emit: emit, now: now}
}

// Start runs c until ctx ends or Stop stops it.
func (s *supervisor) Start(ctx context.Context, c core.Component) {
	ctx, cancel := context.WithCancel(ctx)
	r := &supervised{c: c, cancel: cancel, done: make(chan struct{}), running: true, started: s.now()}
	s.mu.Lock()
	s.runs = append(s.runs, r)
	s.mu.Unlock()
	go func() {
		defer close(r.done)
		s.loop(ctx, r)
	}()
}

// Stop stops the components for which drop is true and waits for them;
// the others keep running.
func (s *supervisor) Stop(drop func(core.Component) bool) {
	s.mu.Lock()
	var stopping, kept []*supervised
	for _, r := range s.runs {
		if drop(r.c) {
			stopping = append(stopping, r)
		} else {
			kept = append(kept, r)
		}
	}
	s.runs = kept
	s.stopping = append(s.stopping, stopping...)
	s.mu.Unlock()
	for _, r := range stopping {
		r.cancel()
	}
	for _, r := range stopping {
		<-r.done
	}
	s.mu.Lock()
	s.stopping = slices.DeleteFunc(s.stopping, func(r *supervised) bool { return slices.Contains(stopping, r) })
	s.mu.Unlock()
}

// Unfinished names the components that were told to stop and whose Run
// has not returned yet: what holds a stop up.
func (s *supervisor) Unfinished() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for _, r := range s.stopping {
		select {
		case <-r.done:
		default:
			out = append(out, r.c.Name())
		}
	}
	return out
}

// Wait stops every component and waits for them.
func (s *supervisor) Wait() { s.Stop(func(core.Component) bool { return true }) }

// Components lists what runs now, in start order.
func (s *supervisor) Components() []core.Component {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]core.Component, len(s.runs))
	for i, r := range s.runs {
		out[i] = r.c
	}
	return out
}

func (s *supervisor) loop(ctx context.Context, r *supervised) {
	backoff := restartMin
	for first := true; ; first = false {
		if !first {
			s.mu.Lock()
			r.running, r.started = true, s.now()
			s.mu.Unlock()
		}
		err := runRecovered(ctx, r.c)
		if ctx.Err() != nil {
			return
		}
		if err == nil {
			err = errors.New("returned while it should run")
		}
		if s.now().Sub(r.started) >= restartStable {
			backoff = restartMin
		}
		wait := backoff/2 + rand.N(backoff/2+1) // jitter: a fleet does not retry in step
		s.failed(r, err, wait)
		backoff = min(2*backoff, restartMax)
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}

// runRecovered runs c.Run and turns a panic into a *core.PanicError.
func runRecovered(ctx context.Context, c core.Component) error {
	return core.Recovered(func() error { return c.Run(ctx) })
}

// failed records and reports a failure: a panic every time (with its stack
// in the evidence), an error when it is new (not the one reported last),
// so a part that cannot start is one event, not one a minute.
func (s *supervisor) failed(r *supervised, err error, wait time.Duration) {
	now := s.now()
	s.mu.Lock()
	r.running, r.failure, r.failedAt, r.retryAt = false, err.Error(), now, now.Add(wait)
	r.restarts++
	report := r.reported != err.Error()
	r.reported = err.Error()
	s.mu.Unlock()

	name := r.c.Name()
	ev := core.Event{Time: now, Kind: "component", Target: name, Result: "failed",
		Summary:  fmt.Sprintf("component %s failed: %v; running it again in %s", name, err, wait.Round(100*time.Millisecond)),
		Evidence: map[string]any{"error": err.Error(), "retry_in_seconds": wait.Seconds(), "restarts": r.restarts}}
	var pe *core.PanicError
	if errors.As(err, &pe) {
		ev.Result = "panic"
		ev.Evidence["stack"] = string(pe.Stack)
		s.log.Error("component panicked; running it again", "component", name, "panic", fmt.Sprint(pe.Value),
			"retry_in_seconds", wait.Seconds(), "stack", string(pe.Stack))
		report = true
	} else {
		s.log.Error("component failed; running it again", "component", name, "error", err, "retry_in_seconds", wait.Seconds())
	}
	if report {
		s.emit(ev)
	}
}

// componentStatus is what the supervisor knows of one component.
type componentStatus struct {
	Name   string
	State  string // ComponentOK, ...
	Detail string
	Since  time.Time
	// Watched is set when the component's progress is watched (its
	// Deadline is set); Fresh when it made progress within it.
	Watched, Fresh bool
}

// Status reports every component, in start order, as of now.
func (s *supervisor) Status(now time.Time) []componentStatus {
	s.mu.Lock()
	runs := append([]*supervised(nil), s.runs...)
	s.mu.Unlock()
	out := make([]componentStatus, 0, len(runs))
	for _, r := range runs {
		out = append(out, s.status(r, now))
	}
	return out
}

func (s *supervisor) status(r *supervised, now time.Time) componentStatus {
	s.mu.Lock()
	running, started, failure, retryAt, failedAt := r.running, r.started, r.failure, r.retryAt, r.failedAt
	s.mu.Unlock()
	st := componentStatus{Name: r.c.Name()}
	if !running {
		st.State, st.Since = ComponentFailed, failedAt
		st.Detail = fmt.Sprintf("%s; running it again in %s", failure, max(retryAt.Sub(now), 0).Round(time.Second))
		return st
	}
	h := r.c.Health() // a snapshot: Health never waits for the component's work
	st.Detail, st.Since = h.Detail, started
	st.Watched = h.Deadline > 0
	switch {
	case st.Watched && h.LastProgress.IsZero() && now.Sub(started) > h.Deadline:
		st.State = ComponentStale
		st.Detail = fmt.Sprintf("no progress in the %s since it started (deadline %s)", now.Sub(started).Round(time.Second), h.Deadline)
	case st.Watched && h.LastProgress.IsZero():
		st.State, st.Fresh = ComponentStarting, true
	case st.Watched && now.Sub(h.LastProgress) > h.Deadline:
		st.State = ComponentStale
		st.Detail = fmt.Sprintf("no progress for %s (deadline %s): %s", now.Sub(h.LastProgress).Round(time.Second), h.Deadline, h.Detail)
	case h.Degraded:
		st.State, st.Fresh = ComponentDegraded, true
	default:
		st.State, st.Fresh = ComponentOK, true
	}
	return st
}

// Check is the component's check: healthy when it runs, is not degraded
// and makes progress.
func (c componentStatus) Check() wire.Check {
	return wire.Check{Kind: wire.KindComponent, Target: c.Name, State: c.State, Detail: c.Detail, Since: c.Since,
		Healthy: c.State == ComponentOK || c.State == ComponentStarting}
}
