package agent

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/edgeheal/edgeheal/agent/core"
	"github.com/edgeheal/edgeheal/agent/core/coretest"
	"github.com/edgeheal/edgeheal/configs"
	"github.com/edgeheal/edgeheal/wire"
)

// fakeComponent is a component a test drives: it makes progress every
// 100 ms while it runs, and Run fails, panics or freezes as told.
type fakeComponent struct {
	name   string
	runs   atomic.Int32
	mu     sync.Mutex
	fail   error // Run returns it at once
	panic  any   // Run panics with it at once
	freeze bool  // Run stops making progress (and blocks until ctx ends)
	last   time.Time
}

func (c *fakeComponent) Name() string { return c.name }

func (c *fakeComponent) set(fn func(c *fakeComponent)) {
	c.mu.Lock()
	defer c.mu.Unlock()
	fn(c)
}

func (c *fakeComponent) Health() core.Health {
	c.mu.Lock()
	defer c.mu.Unlock()
	return core.Health{LastProgress: c.last, Deadline: time.Second, Detail: "fake"}
}

func (c *fakeComponent) Run(ctx context.Context) error {
	c.runs.Add(1)
	c.mu.Lock()
	fail, p := c.fail, c.panic
	c.mu.Unlock()
	if p != nil {
		panic(p)
	}
	if fail != nil {
		return fail
	}
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	for {
		c.mu.Lock()
		if !c.freeze {
			c.last = time.Now()
		}
		c.mu.Unlock()
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

func statusOf(st []componentStatus, name string) componentStatus {
	for _, s := range st {
		if s.Name == name {
			return s
		}
	}
	return componentStatus{}
}

func TestSupervisorRetriesAFailingComponentWithBackoffAndReportsItOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ev := &coretest.Events{}
		s := newSupervisor(slog.New(slog.DiscardHandler), ev.Emit, nil)
		bad := &fakeComponent{name: "mqtt", fail: errors.New("reading the broker CA: open /etc/edgeheal/ca.pem: no such file or directory")}
		good := &fakeComponent{name: "offload"}
		ctx, cancel := context.WithCancel(context.Background())
		defer func() { cancel(); s.Wait() }()
		s.Start(ctx, good)
		s.Start(ctx, bad)

		time.Sleep(2 * time.Minute)
		synctest.Wait()
		// Backoff 1, 2, 4, ... 60 s (each with jitter, at least half): at most
		// a few runs in two minutes, not a tight loop.
		if n := bad.runs.Load(); n < 4 || n > 9 {
			t.Errorf("the failing component ran %d times in 2 minutes, want a backoff (4..9)", n)
		}
		st := statusOf(s.Status(time.Now()), "mqtt")
		if st.State != ComponentFailed || !strings.Contains(st.Detail, "ca.pem: no such file") || !strings.Contains(st.Detail, "running it again in") {
			t.Errorf("status %+v, want failed with the reason and the retry", st)
		}
		var reported []string
		for _, e := range ev.All() {
			reported = append(reported, e.Kind+" "+e.Target+" "+e.Result)
		}
		if len(reported) != 1 || reported[0] != "component mqtt failed" {
			t.Errorf("events %v, want the failure reported once", reported)
		}
		if st := statusOf(s.Status(time.Now()), "offload"); st.State != ComponentOK || good.runs.Load() != 1 {
			t.Errorf("the other component: %+v after %d runs, want ok and never restarted", st, good.runs.Load())
		}

		// The file appears: the next run works, without a restart of anything else.
		bad.set(func(c *fakeComponent) { c.fail = nil })
		time.Sleep(time.Minute + time.Second)
		synctest.Wait()
		if st := statusOf(s.Status(time.Now()), "mqtt"); st.State != ComponentOK {
			t.Errorf("after the cause went away: %+v, want ok", st)
		}
	})
}

func TestSupervisorRecoversAPanicAndReportsItsStack(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ev := &coretest.Events{}
		s := newSupervisor(slog.New(slog.DiscardHandler), ev.Emit, nil)
		c := &fakeComponent{name: "tunnel/wg0", panic: "index out of range [3] with length 3"}
		ctx, cancel := context.WithCancel(context.Background())
		defer func() { cancel(); s.Wait() }()
		s.Start(ctx, c)
		synctest.Wait()
		c.set(func(c *fakeComponent) { c.panic = nil })
		time.Sleep(2 * time.Second)
		synctest.Wait()
		evs := ev.All()
		if len(evs) != 1 || evs[0].Result != "panic" || evs[0].Target != "tunnel/wg0" {
			t.Fatalf("events %+v, want one panic of tunnel/wg0", evs)
		}
		stack, _ := evs[0].Evidence["stack"].(string)
		if !strings.Contains(stack, "fakeComponent).Run") {
			t.Errorf("the stack in the evidence does not show where it panicked:\n%s", stack)
		}
		if st := statusOf(s.Status(time.Now()), "tunnel/wg0"); st.State != ComponentOK || c.runs.Load() != 2 {
			t.Errorf("after the panic: %+v after %d runs, want ok on the second run", st, c.runs.Load())
		}
	})
}

func TestSupervisorCallsAComponentThatStopsMakingProgressStale(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newSupervisor(slog.New(slog.DiscardHandler), nil, nil)
		c := &fakeComponent{name: "workloads"}
		ctx, cancel := context.WithCancel(context.Background())
		defer func() { cancel(); s.Wait() }()
		s.Start(ctx, c)
		time.Sleep(500 * time.Millisecond)
		if st := statusOf(s.Status(time.Now()), "workloads"); st.State != ComponentOK || !st.Fresh {
			t.Errorf("running: %+v, want ok and fresh", st)
		}
		c.set(func(c *fakeComponent) { c.freeze = true })
		time.Sleep(2 * time.Second)
		st := statusOf(s.Status(time.Now()), "workloads")
		if st.State != ComponentStale || st.Fresh || !strings.Contains(st.Detail, "no progress for") {
			t.Errorf("frozen: %+v, want stale", st)
		}
		if st.Check().Healthy {
			t.Errorf("the stale component's check %+v is healthy", st.Check())
		}
	})
}

// The agent: the watchdog is fed (LastProgress moves) only while every
// running component makes progress; /readyz names what is not ok; a reload
// swaps the config's components and keeps the reporting ones.
func TestAgentProgressReadinessAndReload(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg, err := configs.Parse("test.yaml", []byte("version: 1\nnode: {name: n1}\ninterval: 1s\n"))
		if err != nil {
			t.Fatal(err)
		}
		rep := &fakeComponent{name: "outbox"}
		a := New(cfg, Options{OS: coretest.OS()})
		a.Report(rep)
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- a.Run(ctx) }()
		defer func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("Run = %v, want nil", err)
			}
		}()
		time.Sleep(1500 * time.Millisecond)
		if ok, why := a.Ready(); !ok {
			t.Errorf("not ready with every component ok: %s", why)
		}
		fed := a.LastProgress()
		if time.Since(fed) > time.Second {
			t.Errorf("last progress %v ago, want within the interval", time.Since(fed))
		}

		rep.set(func(c *fakeComponent) { c.freeze = true })
		time.Sleep(3 * time.Second)
		if p := a.LastProgress(); time.Since(p) < 2*time.Second {
			t.Errorf("progress still moves (%v ago) while the outbox is frozen", time.Since(p))
		}
		ok, why := a.Ready()
		if ok || !strings.Contains(why, "outbox: stale") {
			t.Errorf("Ready = %v %q, want not ready naming the stale outbox", ok, why)
		}
		rep.set(func(c *fakeComponent) { c.freeze = false })

		next, err := configs.Parse("test.yaml", []byte("version: 1\nnode: {name: n1}\ninterval: 1s\ntunnels:\n  - interface: wg0\n"))
		if err != nil {
			t.Fatal(err)
		}
		if err := a.Reload(ctx, next); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		var names []string
		for _, c := range a.Checks() {
			if c.Kind == wire.KindComponent {
				names = append(names, c.Target)
			}
		}
		if got := strings.Join(names, " "); got != "clock outbox tunnel/wg0" {
			t.Errorf("components after the reload: %s, want clock outbox tunnel/wg0", got)
		}
		if rep.runs.Load() != 1 {
			t.Errorf("the reporting component ran %d times: a reload must not restart it", rep.runs.Load())
		}
	})
}
