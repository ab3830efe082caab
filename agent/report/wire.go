package report

import (
	"time"
)

// Capture is Save with plain arguments, so that the agent can take an
// evidence store through an interface of its own without importing report:
//
//	type EvidenceSink interface {
//		Capture(incident, target, reason string, at time.Time, sections map[string]any) (map[string]any, error)
//	}
func (s *EvidenceStore) Capture(incident, target, reason string, at time.Time, sections map[string]any) (map[string]any, error) {
	return s.Save(Bundle{Incident: incident, Target: target, Reason: reason, Time: at, Sections: sections})
}
