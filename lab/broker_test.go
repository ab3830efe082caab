package lab

import (
	"errors"
	"strings"
	"testing"
	"time"
)

// blockingCloser is a broker whose Close never returns, as mochi-mqtt's
// can when it deadlocks on its clients' lock.
type blockingCloser struct{ release chan struct{} }

func (b blockingCloser) Close() error { <-b.release; return nil }

type closer func() error

func (c closer) Close() error { return c() }

// A broker that never closes costs the lab a bounded wait and an error
// that says so, not the whole benchmark.
func TestABrokerThatDoesNotCloseIsLeftBehind(t *testing.T) {
	b := blockingCloser{release: make(chan struct{})}
	defer close(b.release)
	err := closeWithin(b, 20*time.Millisecond)
	if err == nil || !strings.Contains(err.Error(), "did not close within 20ms") {
		t.Fatalf("closeWithin = %v, want it to give up after 20ms", err)
	}
}

func TestABrokerThatClosesReportsHowItClosed(t *testing.T) {
	boom := errors.New("boom")
	if err := closeWithin(closer(func() error { return boom }), time.Minute); !errors.Is(err, boom) {
		t.Fatalf("closeWithin = %v, want the Close error", err)
	}
	if err := closeWithin(closer(func() error { return nil }), time.Minute); err != nil {
		t.Fatalf("closeWithin = %v, want nil", err)
	}
}
