// Package recorder is where the agent's events go. Emit puts an event
// into a bounded queue and returns at once: it never waits for a disk, an
// evidence source or a broker, so no component is ever held up by the
// record of what it did. The Recorder component drains the queue on a
// goroutine of its own: it takes an incident's evidence bundle (every
// source bounded by a deadline), hands the event to the metrics, logs it
// and appends it to the outbox, which has it on disk before the next one.
//
// What a crash can lose: the events still in the queue, in memory, when
// the process dies (normally the last few milliseconds' worth: the queue
// is drained as fast as the outbox syncs). What the event reported is not
// lost with it: a fix that was made stays made, and the next pass finds
// the state right.
package recorder

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"sync"
	"time"

	"github.com/edgeheal/edgeheal/agent/core"
	"github.com/edgeheal/edgeheal/agent/evidence"
	"github.com/edgeheal/edgeheal/agent/outbox"
	"github.com/edgeheal/edgeheal/wire"
)

// Store is where events are kept for the cloud: the outbox, which has an
// event on disk before Append returns.
type Store interface {
	Append(core.Event) error
}

// EvidenceStore keeps incident evidence bundles (agent/evidence).
type EvidenceStore interface {
	Save(evidence.Bundle) (map[string]any, error)
}

// Collect reads an incident's evidence sections. It must return by ctx's
// deadline, with what it has: a section that gave no answer in time says
// so instead of holding the record up.
type Collect func(ctx context.Context) map[string]any

// Kinds the recorder hands to OnEvent about itself.
const (
	// EventOutboxError is an event the store refused: handed to OnEvent
	// (the metrics count it) and logged, nowhere else.
	EventOutboxError = "outbox-error"
	// EventDropped reports events the queue gave up because it was full
	// (the outbox gave no answer for that long); evidence "dropped" and
	// "dropped_by_class" count them. It is recorded like any event.
	EventDropped = "events-dropped"
)

// Defaults.
const (
	DefaultMax             = 1024            // events queued at the most
	DefaultEvidenceTimeout = 3 * time.Second // an incident's evidence, all sources together
	// slowAfter is how long one event may take to record before Health
	// says the recorder is slow (a disk that hangs).
	slowAfter = 10 * time.Second
	// stopWithin bounds the drain at the end, when the agent stops: the
	// queue is recorded without evidence, as far as the disk allows.
	stopWithin = 2 * time.Second
)

// Options are what a Recorder is made from. Log is required.
type Options struct {
	Store           Store         // nil: events are only logged
	Evidence        EvidenceStore // nil: no bundles
	OnEvent         func(core.Event)
	Log             *slog.Logger
	Now             func() time.Time // nil: time.Now
	Max             int              // the queue's bound; 0: DefaultMax
	EvidenceTimeout time.Duration    // 0: DefaultEvidenceTimeout
}

// Recorder is the agent's event sink (Emit) and the component "events"
// that records what it queued. Safe for concurrent use.
type Recorder struct {
	o Options

	mu        sync.Mutex
	queue     []core.Event
	wake      chan struct{}
	collect   Collect
	dropped   map[outbox.Class]int // since the last report
	droppedN  uint64               // in total
	busySince time.Time            // the event being recorded started; zero: idle
	busyKind  string
	recorded  uint64 // events recorded so far
	emitted   uint64 // events accepted by Emit so far
}

var _ core.Component = (*Recorder)(nil)

// New returns a recorder; nothing is recorded until Run.
func New(o Options) *Recorder {
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Max <= 0 {
		o.Max = DefaultMax
	}
	if o.EvidenceTimeout <= 0 {
		o.EvidenceTimeout = DefaultEvidenceTimeout
	}
	return &Recorder{o: o, wake: make(chan struct{}, 1), dropped: map[outbox.Class]int{}}
}

// SetCollect sets where evidence sections come from. A reload calls it
// while the old components may still emit, so it is safe for concurrent use.
func (r *Recorder) SetCollect(c Collect) {
	r.mu.Lock()
	r.collect = c
	r.mu.Unlock()
}

// Emit stamps e (an id and the time, if it has none) and queues it. It
// never blocks: when the queue is full, the least important queued event
// goes (outbox.KindClass: information first, incidents last, the oldest
// first within a class), counted and reported by an EventDropped record.
// It is a core.Emit.
func (r *Recorder) Emit(e core.Event) {
	if e.ID == "" {
		e.ID = core.NewEventID()
	}
	if e.Time.IsZero() {
		e.Time = r.o.Now()
	}
	r.mu.Lock()
	r.queue = append(r.queue, e)
	r.emitted++
	if len(r.queue) > r.o.Max {
		i := dropIndex(r.queue)
		r.dropped[outbox.KindClass(r.queue[i])]++
		r.droppedN++
		r.queue = append(r.queue[:i], r.queue[i+1:]...)
	}
	r.mu.Unlock()
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// dropIndex is the queued event to give up: the oldest of the lowest class.
func dropIndex(q []core.Event) int {
	best, bestClass := 0, outbox.KindClass(q[0])
	for i := 1; i < len(q); i++ {
		if c := outbox.KindClass(q[i]); c < bestClass {
			best, bestClass = i, c
		}
	}
	return best
}

// Name implements core.Component.
func (r *Recorder) Name() string { return "events" }

// Health implements core.Component. The recorder is passive: its progress
// is not watched, so a disk that hangs never stops the watchdog and
// restarts the agent (which would not help a disk). It is degraded while
// one event takes longer than slowAfter, and after it had to drop events.
func (r *Recorder) Health() core.Health {
	r.mu.Lock()
	defer r.mu.Unlock()
	h := core.Health{Detail: fmt.Sprintf("%d events queued, %d recorded, %d dropped in total", len(r.queue), r.recorded, r.droppedN)}
	if !r.busySince.IsZero() {
		if took := r.o.Now().Sub(r.busySince); took > slowAfter {
			h.Degraded = true
			h.Detail = fmt.Sprintf("recording a %s event for %s: the disk or an evidence source gives no answer; %s",
				r.busyKind, took.Round(time.Second), h.Detail)
		}
	}
	if r.droppedN > 0 && len(r.queue) >= r.o.Max {
		h.Degraded = true
	}
	return h
}

// Run records what Emit queued until ctx ends; then it records what is
// left, without evidence, for at most stopWithin, and returns nil.
func (r *Recorder) Run(ctx context.Context) error {
	for {
		select {
		case <-ctx.Done():
			r.drain(ctx, time.Now().Add(stopWithin))
			return nil
		case <-r.wake:
		}
		r.drain(ctx, time.Time{})
	}
}

// drain records every queued event, in order. With an until (stopping)
// it takes no evidence and stops then.
func (r *Recorder) drain(ctx context.Context, until time.Time) {
	for {
		if !until.IsZero() && time.Now().After(until) {
			return
		}
		r.mu.Lock()
		if len(r.queue) == 0 {
			report := r.dropReport()
			if report == nil {
				r.mu.Unlock()
				return
			}
			r.queue = append(r.queue, *report)
		}
		e := r.queue[0]
		r.queue = r.queue[1:]
		r.busySince, r.busyKind = r.o.Now(), e.Kind
		collect := r.collect
		r.mu.Unlock()
		if !until.IsZero() {
			collect = nil // stopping: no evidence
		}
		r.record(ctx, e, collect)
		r.mu.Lock()
		r.busySince, r.busyKind = time.Time{}, ""
		r.recorded++
		r.mu.Unlock()
	}
}

// dropReport is the event that reports the drops since the last one, nil
// when there were none. Called with r.mu held.
func (r *Recorder) dropReport() *core.Event {
	if len(r.dropped) == 0 {
		return nil
	}
	n, byClass := 0, map[string]int{}
	for c, k := range r.dropped {
		n += k
		byClass[c.String()] = k
	}
	clear(r.dropped)
	return &core.Event{ID: core.NewEventID(), Time: r.o.Now(), Kind: EventDropped, Target: "events",
		Summary:  fmt.Sprintf("%d events given up: the queue to the outbox was full (%d at the most), the disk gave no answer for that long", n, r.o.Max),
		Evidence: map[string]any{"dropped": n, "dropped_by_class": byClass, "dropped_total": r.droppedN}}
}

// record is one event's way out: evidence for an incident, the metrics,
// the log, the outbox.
func (r *Recorder) record(ctx context.Context, e core.Event, collect Collect) {
	if r.o.Evidence != nil && collect != nil && OpensIncident(e) {
		cctx, cancel := context.WithTimeout(ctx, r.o.EvidenceTimeout)
		sections := collect(cctx)
		cancel()
		sum, err := r.o.Evidence.Save(evidence.Bundle{Incident: e.ID, Time: e.Time, Target: e.Target, Reason: e.Summary, Sections: sections})
		if err != nil {
			r.o.Log.Warn("could not save incident evidence", "event_id", e.ID, "error", err)
		} else {
			ev := map[string]any{}
			maps.Copy(ev, e.Evidence)
			ev["bundle"] = sum
			e.Evidence = ev
		}
	}
	r.Observed(e)
	if r.o.Store == nil {
		return
	}
	if err := r.o.Store.Append(e); err != nil {
		r.o.Log.Error("event not queued for the cloud: the outbox refused it", "event_id", e.ID, "error", err)
		if r.o.OnEvent != nil {
			r.o.OnEvent(core.Event{ID: e.ID, Time: e.Time, Kind: EventOutboxError, Target: "outbox", Summary: err.Error()})
		}
	}
}

// Observed is the way of an event that is already stored (the outbox's
// own events: incidents about its disk and damage, its drop reports): it
// is handed to OnEvent (the metrics count it) and logged, like every event
// the recorder records. Safe for concurrent use; it never blocks on the
// queue.
func (r *Recorder) Observed(e core.Event) {
	if r.o.OnEvent != nil {
		r.o.OnEvent(e)
	}
	attrs := []any{"event_id", e.ID, "kind", e.Kind, "target", e.Target, "ts", e.Time.UTC().Format(time.RFC3339Nano)}
	if e.Action != "" {
		attrs = append(attrs, "action", e.Action)
	}
	if e.Result != "" {
		attrs = append(attrs, "result", e.Result)
	}
	if e.Duration > 0 {
		attrs = append(attrs, "duration_seconds", e.Duration)
	}
	r.o.Log.Info(e.Summary, attrs...)
}

// Flush waits until every event emitted before it was called has been
// recorded (or dropped), or ctx ends. For tests and an orderly stop.
func (r *Recorder) Flush(ctx context.Context) error {
	r.mu.Lock()
	target := r.emitted
	r.mu.Unlock()
	t := time.NewTicker(time.Millisecond)
	defer t.Stop()
	for {
		r.mu.Lock()
		done := r.recorded+r.droppedN >= target && r.busySince.IsZero()
		r.mu.Unlock()
		if done {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
}

// OpensIncident reports whether e opens an incident, the moment an evidence
// bundle is worth taking.
func OpensIncident(e core.Event) bool {
	return e.Kind == wire.EventIncident || e.Kind == wire.EventOffloadDrift
}
