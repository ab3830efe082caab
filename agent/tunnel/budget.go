package tunnel

import "time"

// actionBudget bounds the disruptive actions on one tunnel: at most max in
// any window, and at least cooldown between two of them. Its zero value
// allows nothing; use newActionBudget. It is owned by one goroutine.
type actionBudget struct {
	max      int
	window   time.Duration
	cooldown time.Duration
	spent    []time.Time // start times of the disruptive actions in the window, oldest first
	last     time.Time   // start of the last disruptive action, kept past the window
}

func newActionBudget(max int, window, cooldown time.Duration) *actionBudget {
	return &actionBudget{max: max, window: window, cooldown: cooldown}
}

// forget drops the actions that have left the window.
func (b *actionBudget) forget(now time.Time) {
	i := 0
	for i < len(b.spent) && now.Sub(b.spent[i]) >= b.window {
		i++
	}
	b.spent = b.spent[i:]
}

// left is how many disruptive actions the window still allows at now.
func (b *actionBudget) left(now time.Time) int {
	b.forget(now)
	return max(b.max-len(b.spent), 0)
}

// coolUntil is when the cooldown after the last disruptive action ends
// (zero when there was none).
func (b *actionBudget) coolUntil() time.Time {
	if b.last.IsZero() {
		return time.Time{}
	}
	return b.last.Add(b.cooldown)
}

// cooling reports whether a disruptive action at now would break the cooldown.
func (b *actionBudget) cooling(now time.Time) bool {
	return now.Before(b.coolUntil())
}

// spend records a disruptive action started at now.
func (b *actionBudget) spend(now time.Time) {
	b.forget(now)
	b.spent = append(b.spent, now)
	b.last = now
}

// used is how many disruptive actions are in the window at now.
func (b *actionBudget) used(now time.Time) int {
	b.forget(now)
	return len(b.spent)
}

// budgetFrom is the budget as the ledger records it: the disruptive
// actions spent in the window and the last one, so that a reload or a
// restart does not start from zero.
func budgetFrom(pol budgetPolicy, spent []time.Time, last time.Time) *actionBudget {
	b := newActionBudget(pol.max, pol.window, pol.cooldown)
	b.spent, b.last = spent, last
	return b
}

// budgetPolicy is what bounds a tunnel's disruptive actions (policy:
// max_disruptive per window, cooldown between two).
type budgetPolicy struct {
	max      int
	window   time.Duration
	cooldown time.Duration
}
