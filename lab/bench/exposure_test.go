package bench

import (
	"context"
	"errors"
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

func TestTheLinkIsMadeAtTheBenchsLastEventBeforeAnotherProcesss(t *testing.T) {
	const self = 100
	ms := func(n float64) time.Duration { return time.Duration(n * float64(time.Millisecond)) }
	for _, tc := range []struct {
		name string
		evs  []ktrace.Event
		want time.Duration
	}{
		{"the lab's last step before the agent's first", []ktrace.Event{
			{At: ms(0.3), TGID: self}, {At: ms(0.9), TGID: self},
			{At: ms(1.0), TGID: 300, Kernel: true}, // linkwatch: not the agent
			{At: ms(1.1), TGID: self},
			{At: ms(4.0), TGID: 200}, {At: ms(5.0), TGID: self},
		}, ms(1.1)},
		{"before the request: not this re-plug's", []ktrace.Event{{At: -ms(1), TGID: self}, {At: ms(2), TGID: 200}}, 0},
		{"no other process: every step of the lab's", []ktrace.Event{{At: ms(0.5), TGID: self}, {At: ms(0.7), TGID: self}}, ms(0.7)},
	} {
		if got := madeAt(tc.evs, self, 0); got != tc.want {
			t.Errorf("%s: madeAt = %v, want %v", tc.name, got, tc.want)
		}
	}
}

// Side by side, one lab at a time re-plugs and times the fix: a second
// lab waits for the turn, and a bench that is stopped while it waits
// stops waiting.
func TestOneLabAtATimeTimesItsReplug(t *testing.T) {
	if err := takeReplugTurn(context.Background()); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if err := takeReplugTurn(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a second lab took the turn while the first held it: %v", err)
	}
	<-replugTurn
	if err := takeReplugTurn(context.Background()); err != nil {
		t.Fatalf("the turn given back could not be taken: %v", err)
	}
	<-replugTurn
}
