package wire

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// TopicHistory is the last level of a node's history topic: a retained
// History, replaced when it changes.
const TopicHistory = "history"

// History is the node's own account of its availability: the retained
// payload of <prefix>/<node>/history. The node keeps it in its state
// directory (hours for 48 hours, days for 90, the last 100 incidents in
// full) and publishes this, its compact form: the whole node per hour and
// per day, every target's totals, and its newest incidents. It is what a
// consumer learns of a node's past the moment it subscribes, also of the
// time the cloud could not hear it.
type History struct {
	V     int       `json:"v"`
	Node  string    `json:"node"`
	Site  string    `json:"site,omitempty"`
	TS    time.Time `json:"ts"`    // when this history was made
	Since time.Time `json:"since"` // the oldest moment it covers (the node's first record)
	// Hours and Days are the node as a whole: a second counts as dark
	// when any target was dark, degraded when any was given up on and
	// none dark, healthy when every target was healthy.
	Hours Series `json:"hours"` // per hour, the last 48
	Days  Series `json:"days"`  // per UTC day, the last 90
	// Targets are every target's totals over the days kept, in the order
	// of the checks (kind, then target). A node with very many (a hub)
	// names its least available ones and counts the rest in
	// TargetsOmitted.
	Targets        []TargetSummary `json:"targets"`
	TargetsOmitted int             `json:"targets_omitted,omitempty"`
	// Incidents are the newest incidents, newest first: at most
	// HistoryIncidents, the open ones included.
	Incidents []Incident `json:"incidents"`
}

// HistoryIncidents is how many incidents a published History carries at
// the most (the node keeps more, and counts them all in Targets).
const HistoryIncidents = 20

// Series is seconds per bucket. Start is the first bucket's start and Step
// every bucket's length; each slice has one value per bucket, oldest
// first, and all have the same length. What is not healthy, dark or
// degraded in a bucket was not observed (the agent did not run).
type Series struct {
	Start     time.Time `json:"start"`
	Step      int       `json:"step_seconds"`
	Healthy   []int     `json:"healthy"`
	Dark      []int     `json:"dark"`
	Degraded  []int     `json:"degraded"`
	Incidents []int     `json:"incidents"` // incidents that opened in the bucket
}

// TargetSummary is one target's account over the days kept.
type TargetSummary struct {
	Kind            string `json:"kind"`   // KindPeer, KindWorkload, KindUplink
	Target          string `json:"target"` // as its check names it
	HealthySeconds  int64  `json:"healthy_seconds"`
	DarkSeconds     int64  `json:"dark_seconds"`
	DegradedSeconds int64  `json:"degraded_seconds"`
	Incidents       int    `json:"incidents"`
	GaveUps         int    `json:"gave_ups"`
	// Outage durations of the incidents that closed (p50, p95, the
	// longest), and the mean time to repair: from an incident's last good
	// observation to its first good one again.
	OutageP50Seconds float64 `json:"outage_p50_seconds"`
	OutageP95Seconds float64 `json:"outage_p95_seconds"`
	OutageMaxSeconds float64 `json:"outage_max_seconds"`
	MTTRSeconds      float64 `json:"mttr_seconds"`
	// Repairs counts, by rung, the incidents each rung healed; "itself"
	// counts those that recovered with no repair.
	Repairs map[string]int `json:"repairs,omitempty"`
}

// Incident is one incident of a target: from its last good observation to
// its first good one again (an open one has no End).
type Incident struct {
	ID              string    `json:"id"` // the id of the event that opened it
	Kind            string    `json:"kind"`
	Target          string    `json:"target"`
	Start           time.Time `json:"start"`
	End             time.Time `json:"end,omitzero"`
	DurationSeconds float64   `json:"duration_seconds"` // so far, for an open one
	Diagnosis       string    `json:"diagnosis,omitempty"`
	Repairs         []string  `json:"repairs,omitempty"`   // the rungs tried, in order
	HealedBy        string    `json:"healed_by,omitempty"` // the rung that healed it; "" with an End: it recovered by itself
	GaveUp          bool      `json:"gave_up,omitempty"`
}

// Availability is the share of the observed seconds of s that were
// healthy, and false when none were observed.
func (s Series) Availability() (float64, bool) {
	var healthy, observed int64
	for i := range s.Healthy {
		healthy += int64(s.Healthy[i])
		observed += int64(s.Healthy[i])
		if i < len(s.Dark) {
			observed += int64(s.Dark[i])
		}
		if i < len(s.Degraded) {
			observed += int64(s.Degraded[i])
		}
	}
	if observed == 0 {
		return 0, false
	}
	return float64(healthy) / float64(observed), true
}

// DecodeHistory decodes a history payload; it needs what Validate
// checks.
func DecodeHistory(b []byte) (History, error) {
	var h History
	if err := json.Unmarshal(b, &h); err != nil {
		return History{}, fmt.Errorf("history: %w", err)
	}
	if err := h.Validate(); err != nil {
		return History{}, err
	}
	return h, nil
}

// Validate reports whether a decoded history can be read: its version, a
// node, and series whose slices agree in length and have a step
// (DecodeHistory's checks, for a reader with another decoder: the fleet
// view's, for speed; the two cannot disagree).
func (h *History) Validate() error {
	if h.V != Version {
		return fmt.Errorf("history: v=%d: %w", h.V, ErrVersion)
	}
	if h.Node == "" {
		return errors.New("history: no node")
	}
	for _, sr := range [...]struct {
		name string
		s    *Series
	}{{"hours", &h.Hours}, {"days", &h.Days}} {
		n := len(sr.s.Healthy)
		if len(sr.s.Dark) != n || len(sr.s.Degraded) != n || len(sr.s.Incidents) != n {
			return fmt.Errorf("history: %s: series of different lengths", sr.name)
		}
		if n > 0 && sr.s.Step <= 0 {
			return fmt.Errorf("history: %s: no step", sr.name)
		}
	}
	return nil
}
