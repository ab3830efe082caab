package agent

import (
	"log/slog"
	"maps"
	"sync"
	"time"

	"github.com/edgeheal/edgeheal/agent/evidence"
)

// EventStore is where the Recorder queues events for the cloud: the
// outbox, which has them on disk before Append returns.
type EventStore interface {
	Append(Event) error
}

// EvidenceStore keeps incident evidence bundles (agent/evidence).
type EvidenceStore interface {
	Save(evidence.Bundle) (map[string]any, error)
}

// Recorder is the agent's event sink, an Emit: it stamps each event,
// attaches an evidence bundle to one that opens an incident, hands it to
// OnEvent (the metrics), logs it, and appends it to the store (synced to
// disk before Emit returns, so nothing is lost to a crash or a broker
// outage). A store that refuses an event is logged; the event's log line
// is then all that is left of it.
type Recorder struct {
	Store    EventStore    // nil: events are only logged
	Evidence EvidenceStore // nil: no bundles
	OnEvent  func(Event)   // nil: nothing; called before the store
	Log      *slog.Logger  // required
	Now      func() time.Time

	mu      sync.Mutex
	collect func() map[string]any // evidence sections; nil: no bundles
}

// SetCollect sets where evidence sections come from. A reload calls it
// while the old components may still emit, so it is safe for concurrent use.
func (r *Recorder) SetCollect(collect func() map[string]any) {
	r.mu.Lock()
	r.collect = collect
	r.mu.Unlock()
}

// Emit records e. It is an Emit.
func (r *Recorder) Emit(e Event) {
	now := time.Now
	if r.Now != nil {
		now = r.Now
	}
	if e.ID == "" {
		e.ID = NewEventID()
	}
	if e.Time.IsZero() {
		e.Time = now()
	}
	r.mu.Lock()
	collect := r.collect
	r.mu.Unlock()
	if r.Evidence != nil && collect != nil && OpensIncident(e) {
		sum, err := r.Evidence.Save(evidence.Bundle{Incident: e.ID, Time: e.Time, Target: e.Target, Reason: e.Summary, Sections: collect()})
		if err != nil {
			r.Log.Warn("could not save incident evidence", "event_id", e.ID, "error", err)
		} else {
			ev := map[string]any{}
			maps.Copy(ev, e.Evidence)
			ev["bundle"] = sum
			e.Evidence = ev
		}
	}
	if r.OnEvent != nil {
		r.OnEvent(e)
	}
	attrs := []any{"event_id", e.ID, "kind", e.Kind, "target", e.Target}
	if e.Action != "" {
		attrs = append(attrs, "action", e.Action)
	}
	if e.Result != "" {
		attrs = append(attrs, "result", e.Result)
	}
	if e.Duration > 0 {
		attrs = append(attrs, "duration_seconds", e.Duration)
	}
	r.Log.Info(e.Summary, attrs...)
	if r.Store == nil {
		return
	}
	if err := r.Store.Append(e); err != nil {
		r.Log.Error("event not queued for the cloud: the outbox refused it", "event_id", e.ID, "error", err)
		if r.OnEvent != nil {
			r.OnEvent(Event{ID: e.ID, Time: e.Time, Kind: EventOutboxError, Target: "outbox", Summary: err.Error()})
		}
	}
}

// EventOutboxError is the kind the Recorder hands to OnEvent (and nowhere
// else) for an event the store refused, so the metrics count it.
const EventOutboxError = "outbox-error"
