package report

import (
	"log/slog"
	"time"

	"github.com/edgeheal/edgeheal/agent"
)

// Emitter returns the agent.Emit that cmd/edgeheal hands to the agent:
// each event is appended to the outbox (durably, before Emit returns) and
// counted in the metrics (m may be nil). Emit has no error to return, so an
// append failure (a failing disk) is logged with the event and counted as
// kind "outbox-error"; the event is then lost.
func Emitter(ob *Outbox, m *Metrics, log *slog.Logger) agent.Emit {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return func(e agent.Event) {
		if e.ID == "" {
			e.ID = agent.NewEventID()
		}
		err := ob.Append(e)
		if m != nil {
			m.ObserveEvent(e)
		}
		if err != nil {
			log.Error("event not queued for the cloud", "event_id", e.ID, "kind", e.Kind,
				"target", e.Target, "summary", e.Summary, "err", err)
			if m != nil {
				m.events.WithLabelValues("outbox-error").Inc()
			}
		}
	}
}

// Capture is Save with plain arguments, so that the agent can take an
// evidence store through an interface of its own without importing report:
//
//	type EvidenceSink interface {
//		Capture(incident, target, reason string, at time.Time, sections map[string]any) (map[string]any, error)
//	}
func (s *EvidenceStore) Capture(incident, target, reason string, at time.Time, sections map[string]any) (map[string]any, error) {
	return s.Save(Bundle{Incident: incident, Target: target, Reason: reason, Time: at, Sections: sections})
}
