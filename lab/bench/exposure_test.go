package bench

import (
	"testing"
	"time"

	"github.com/edgeheal/edgeheal/lab/ktrace"
)

func TestTheFixIsTheLastEventOfAnotherProcessUpToTheRead(t *testing.T) {
	const self = 100
	ms := func(n float64) time.Duration { return time.Duration(n * float64(time.Millisecond)) }
	evs := []ktrace.Event{
		{At: ms(0.5), TGID: self},              // the bench creates the link
		{At: ms(1.0), TGID: 200},               // the agent's fix
		{At: ms(1.2), TGID: 300, Kernel: true}, // linkwatch
		{At: ms(1.5), TGID: self},              // the bench again
		{At: ms(9.0), TGID: 200},               // after the read and its slack
		{At: -ms(1), TGID: 200},                // before the request
	}
	for _, tc := range []struct {
		name     string
		from, to time.Duration
		want     time.Duration
	}{
		{"the fix", 0, ms(4), ms(1.0)},
		{"nothing of another process in the window", ms(1.1), ms(4), 0},
		{"a later change counts: never shorter than the exposure", 0, ms(10), ms(9.0)},
	} {
		if got := lastOtherEvent(evs, self, tc.from, tc.to); got != tc.want {
			t.Errorf("%s: lastOtherEvent = %v, want %v", tc.name, got, tc.want)
		}
	}
}
