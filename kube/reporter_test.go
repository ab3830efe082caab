package kube

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// fakeClient is a Node and its events, with an API server that can be
// made to fail. It logs every call.
type fakeClient struct {
	mu     sync.Mutex
	down   bool
	cond   *Condition
	taints []Taint
	rv     int
	events map[string]Write
	calls  []string
}

var errDown = errors.New("connection refused")

func (f *fakeClient) call(name string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, name)
	if f.down {
		return errDown
	}
	return nil
}

func (f *fakeClient) Node(ctx context.Context, node string) (*Condition, []Taint, string, error) {
	if err := f.call("get"); err != nil {
		return nil, nil, "", err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.cond, append([]Taint{}, f.taints...), string(rune('0' + f.rv)), nil
}

func (f *fakeClient) PatchCondition(ctx context.Context, node string, c Condition) error {
	if err := f.call("patch-status"); err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.cond = &c
	return nil
}

func (f *fakeClient) SetTaints(ctx context.Context, node string, ts []Taint, rv string) error {
	if err := f.call("set-taints"); err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.taints = ts
	f.rv++
	return nil
}

func (f *fakeClient) CreateEvent(ctx context.Context, node string, w Write) error {
	if err := f.call("create-event"); err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.events == nil {
		f.events = map[string]Write{}
	}
	f.events[w.Name] = w
	return nil
}

func (f *fakeClient) PatchEvent(ctx context.Context, w Write) error {
	if err := f.call("patch-event"); err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.events[w.Name]; !ok {
		return ErrNotFound
	}
	f.events[w.Name] = w
	return nil
}

func (f *fakeClient) count(call string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	for _, c := range f.calls {
		if c == call {
			n++
		}
	}
	return n
}

func (f *fakeClient) state() (Condition, bool, []string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var c Condition
	if f.cond != nil {
		c = *f.cond
	}
	var reasons []string
	for _, w := range f.events {
		reasons = append(reasons, w.Reason)
	}
	return c, hasTaint(f.taints), reasons
}

// fakeAgent is the agent's status, settable.
type fakeAgent struct {
	mu    sync.Mutex
	st    Status
	polls int
}

func (a *fakeAgent) status(ctx context.Context) (*Status, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.polls++
	st := a.st
	st.LastProgress = time.Now()
	return &st, nil
}

func (a *fakeAgent) set(checks ...Check) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.st = Status{Ready: true, Checks: checks}
}

// TestReporterThroughAnOutageOfTheAPIServer: the condition follows the
// agent, the taint comes after the grace and goes when healthy, and while
// the API server is down the status is still read every interval and the
// condition is right soon after it is back.
func TestReporterThroughAnOutageOfTheAPIServer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		api := &fakeClient{}
		ag := &fakeAgent{}
		ag.set(peer("ok", ""))
		r := New(Options{Client: api, Node: "edge-1", Status: ag.status, Interval: time.Second,
			Taint: true, Grace: 10 * time.Second, Heartbeat: time.Minute})
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error)
		go func() { done <- r.Run(ctx) }()

		time.Sleep(2 * time.Second)
		synctest.Wait()
		if c, _, _ := api.state(); c.Status != True || c.Reason != ReasonHealthy {
			t.Fatalf("healthy agent: condition %+v", c)
		}

		// A minute of nothing new: one heartbeat, not a write per poll.
		first, _, _ := api.state()
		before := api.count("patch-status")
		time.Sleep(61 * time.Second)
		synctest.Wait()
		beat, _, _ := api.state()
		if n := api.count("patch-status") - before; n != 1 || !beat.LastHeartbeatTime.After(first.LastHeartbeatTime) || !beat.LastTransitionTime.Equal(first.LastTransitionTime) {
			t.Errorf("a quiet minute: %d status patches, heartbeat %v -> %v, transition %v -> %v; want 1, moved, kept",
				n, first.LastHeartbeatTime, beat.LastHeartbeatTime, first.LastTransitionTime, beat.LastTransitionTime)
		}

		ag.set(peer("down", "probe timeout"))
		time.Sleep(2 * time.Second)
		synctest.Wait()
		c, tainted, _ := api.state()
		if c.Status != False || c.Reason != ReasonTunnelDark || tainted {
			t.Fatalf("dark for 2 s: condition %+v, taint %v; want False TunnelDark, no taint yet", c, tainted)
		}
		time.Sleep(10 * time.Second)
		synctest.Wait()
		if _, tainted, _ := api.state(); !tainted {
			t.Fatal("dark beyond the grace: no taint")
		}

		api.mu.Lock()
		api.down = true
		api.mu.Unlock()
		ag.mu.Lock()
		polls := ag.polls
		ag.mu.Unlock()
		ag.mu.Lock()
		ag.st = Status{ReadyDetail: "reloading"} // the agent restarts: Unknown for a while
		ag.mu.Unlock()
		time.Sleep(3 * time.Second)
		ag.set(peer("ok", ""))
		time.Sleep(27 * time.Second)
		synctest.Wait()
		ag.mu.Lock()
		polled := ag.polls - polls
		ag.mu.Unlock()
		if polled < 29 {
			t.Errorf("the status was read %d times in the 30 s the API server was down, want one a second", polled)
		}
		api.mu.Lock()
		api.down = false
		api.mu.Unlock()
		time.Sleep(31 * time.Second) // at most one capped backoff
		synctest.Wait()
		c, tainted, reasons := api.state()
		if c.Status != True || tainted {
			t.Errorf("after the API server's return: condition %+v, taint %v; want True, no taint", c, tainted)
		}
		want := map[string]bool{ReasonTunnelDark: true, ReasonTaintAdded: true, ReasonRecovered: true, ReasonTaintRemoved: true}
		for _, r := range reasons {
			delete(want, r)
		}
		if len(want) > 0 {
			t.Errorf("events %v; missing %v", reasons, want)
		}
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run = %v, want nil when stopped", err)
		}
	})
}

// A queue full while the API server is away gives up what matters least
// first, oldest first within a class: information, then actions, and
// incidents last; a new event that matters less than everything queued
// is the one given up.
func TestAFullEventQueueKeepsIncidentsLongest(t *testing.T) {
	now := time.Date(2026, 12, 2, 3, 0, 0, 0, time.UTC)
	note := func(kind, msg string) Note {
		switch kind {
		case "incident":
			return Note{Type: Warning, Reason: "TunnelDark", Message: msg, Time: now}
		case "action":
			return Note{Type: Normal, Reason: ReasonRepair, Message: msg, Time: now}
		case "recovered":
			return Note{Type: Normal, Reason: ReasonRecovered, Message: msg, Time: now}
		}
		return Note{Type: Normal, Reason: ReasonTaintAdded, Message: msg, Time: now}
	}
	for _, tc := range []struct {
		name string
		in   []string // kind:message, in the order noted
		want []string // messages queued afterwards
	}{
		{"info goes first, the oldest", []string{"incident:i1", "info:n1", "action:a1", "info:n2", "incident:i2"}, []string{"i1", "a1", "n2", "i2"}},
		{"then actions", []string{"incident:i1", "action:a1", "recovered:r1", "incident:i2", "incident:i3"}, []string{"i1", "r1", "i2", "i3"}},
		{"incidents last, the oldest", []string{"incident:i1", "incident:i2", "incident:i3", "incident:i4", "incident:i5"}, []string{"i2", "i3", "i4", "i5"}},
		{"a new event below everything queued is itself given up", []string{"incident:i1", "action:a1", "incident:i2", "action:a2", "info:n1"}, []string{"i1", "a1", "i2", "a2"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var log strings.Builder
			r := New(Options{Node: "edge-1", QueueLimit: 4, Log: slog.New(slog.NewTextHandler(&log, nil))})
			for _, in := range tc.in {
				kind, msg, _ := strings.Cut(in, ":")
				r.mu.Lock()
				r.noteLocked(note(kind, msg))
				r.mu.Unlock()
			}
			var got []string
			for _, w := range r.queue {
				got = append(got, w.Message)
			}
			if strings.Join(got, " ") != strings.Join(tc.want, " ") {
				t.Errorf("queued %v, want %v", got, tc.want)
			}
			if d := r.Dropped(); d != len(tc.in)-len(tc.want) {
				t.Errorf("Dropped() = %d, want %d", d, len(tc.in)-len(tc.want))
			}
			if n := strings.Count(log.String(), "kubernetes event given up"); n != len(tc.in)-len(tc.want) {
				t.Errorf("%d events logged as given up, want %d:\n%s", n, len(tc.in)-len(tc.want), log.String())
			}
		})
	}
}
