package kube

import "time"

// The taint edgeheal may set: never NoExecute, which would evict the
// node's pods because of an overlay that edgeheal is repairing.
const (
	TaintKey    = "edgeheal.io/overlay-dark"
	TaintEffect = "NoSchedule"
)

// Taint is a Node taint as the API server writes it.
type Taint struct {
	Key       string     `json:"key"`
	Value     string     `json:"value,omitempty"`
	Effect    string     `json:"effect"`
	TimeAdded *time.Time `json:"timeAdded,omitempty"`
}

// TaintWant says what to do about the taint.
type TaintWant int

// What WantTaint asks for.
const (
	TaintKeep   TaintWant = iota // leave it as it is
	TaintAdd                     // put it on (if absent)
	TaintRemove                  // take it off (if present)
)

// WantTaint decides the taint, a pure function: on once the overlay has
// been dark (v.Dark) for grace since darkSince, off once the condition is
// True again, and left as it is otherwise (an Unknown verdict, a problem
// that is not the overlay's, a dark spell younger than grace). With the
// taint turned off in the config it only ever removes one edgeheal left.
func WantTaint(enabled bool, v Verdict, darkSince, now time.Time, grace time.Duration) TaintWant {
	switch {
	case v.Status == True || (!enabled && v.Status != Unknown):
		return TaintRemove
	case enabled && v.Dark && !darkSince.IsZero() && now.Sub(darkSince) >= grace:
		return TaintAdd
	}
	return TaintKeep
}

// ApplyTaint is taints with edgeheal's taint added or removed, and whether
// that changed anything. Other taints are kept as they are, in order.
func ApplyTaint(taints []Taint, want TaintWant, now time.Time) ([]Taint, bool) {
	i := -1
	for j, t := range taints {
		if t.Key == TaintKey && t.Effect == TaintEffect {
			i = j
		}
	}
	switch {
	case want == TaintAdd && i < 0:
		at := now.UTC().Truncate(time.Second)
		return append(append([]Taint{}, taints...), Taint{Key: TaintKey, Effect: TaintEffect, TimeAdded: &at}), true
	case want == TaintRemove && i >= 0:
		out := append([]Taint{}, taints[:i]...)
		return append(out, taints[i+1:]...), true
	}
	return taints, false
}
