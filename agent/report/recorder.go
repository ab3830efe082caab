package report

import (
	"log/slog"
	"maps"
	"sync"
	"time"

	"github.com/edgeheal/edgeheal/agent"
)

// Recorder is the agent's event sink: it stamps each event, attaches an
// evidence bundle to one that opens an incident, appends it to the outbox
// (synced to disk before Emit returns, so nothing is lost to a crash or a
// broker outage), counts it in the metrics and logs it.
type Recorder struct {
	Outbox   *Outbox
	Evidence *EvidenceStore // nil: no bundles
	Metrics  *Metrics       // nil: not counted
	Log      *slog.Logger   // required
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

// Emit records e. It is an agent.Emit.
func (r *Recorder) Emit(e agent.Event) {
	now := time.Now
	if r.Now != nil {
		now = r.Now
	}
	if e.ID == "" {
		e.ID = agent.NewEventID()
	}
	if e.Time.IsZero() {
		e.Time = now()
	}
	r.mu.Lock()
	collect := r.collect
	r.mu.Unlock()
	if r.Evidence != nil && collect != nil && agent.OpensIncident(e) {
		sum, err := r.Evidence.Save(Bundle{Incident: e.ID, Time: e.Time, Target: e.Target, Reason: e.Summary, Sections: collect()})
		if err != nil {
			r.Log.Warn("could not save incident evidence", "event_id", e.ID, "error", err)
		} else {
			ev := map[string]any{}
			maps.Copy(ev, e.Evidence)
			ev["bundle"] = sum
			e.Evidence = ev
		}
	}
	if r.Metrics != nil {
		r.Metrics.ObserveEvent(e)
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
	if r.Outbox == nil {
		return
	}
	if err := r.Outbox.Append(e); err != nil {
		// The disk refused it: the log line above is all that is left.
		r.Log.Error("event not queued for the cloud: outbox write failed", "event_id", e.ID, "error", err)
		if r.Metrics != nil {
			r.Metrics.events.WithLabelValues("outbox-error").Inc()
		}
	}
}
