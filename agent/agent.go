package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"sync"
	"time"

	"github.com/edgeheal/edgeheal/configs"
)

// Part is one part of the agent (the offload guard, the tunnel monitor,
// the workload monitor). Run owns the part's state in its own goroutine
// and returns nil when ctx is cancelled; Checks returns a snapshot and is
// safe to call from any goroutine.
type Part interface {
	Run(ctx context.Context) error
	Checks() []Check
}

// Builder makes the components for a config. The wiring (which real
// adapters to use) lives in cmd/edgeheal; the agent only runs what it gets.
type Builder func(cfg *configs.Config) ([]Part, error)

// Agent supervises the components built for the current config, swaps them
// on reload, and keeps the progress and readiness that /livez, /readyz and
// the systemd watchdog report.
type Agent struct {
	log   *slog.Logger
	build Builder
	now   func() time.Time

	reload chan reloadReq

	// OnRound, if set before Run, is called after every tick with the
	// current checks (from the loop's goroutine: it must not block): the
	// wiring feeds metrics, the MQTT status and systemd's STATUS= from it.
	OnRound func(checks []Check)

	mu         sync.Mutex
	cfg        *configs.Config
	components []Part
	progress   time.Time // the loop's last tick
	rounds     uint64
	ready      bool
	notReady   string
}

type reloadReq struct {
	cfg  *configs.Config
	done chan error
}

// New returns an agent for cfg. It starts nothing until Run.
func New(cfg *configs.Config, build Builder, log *slog.Logger) *Agent {
	return &Agent{
		log:      log,
		build:    build,
		now:      time.Now,
		reload:   make(chan reloadReq),
		cfg:      cfg,
		notReady: "starting",
	}
}

// Config returns the config the agent runs with.
func (a *Agent) Config() *configs.Config {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.cfg
}

// Run builds and starts the components, ticks at cfg.Interval to mark
// progress, and swaps components on Reload. It returns nil once ctx is
// cancelled and every component has returned; an error only if the first
// build fails.
func (a *Agent) Run(ctx context.Context) error {
	comps, err := a.build(a.Config())
	if err != nil {
		a.setNotReady(err.Error())
		return fmt.Errorf("starting components: %w", err)
	}
	stop := a.start(ctx, comps)
	defer func() { stop() }()

	interval := a.Config().Interval.D()
	t := time.NewTicker(interval)
	defer t.Stop()
	a.tick()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			a.tick()
		case req := <-a.reload:
			comps, err := a.build(req.cfg)
			if err != nil {
				// Keep the running components: they work with the old config.
				req.done <- fmt.Errorf("applying new config: %w", err)
				continue
			}
			stop()
			a.mu.Lock()
			a.cfg = req.cfg
			a.mu.Unlock()
			stop = a.start(ctx, comps)
			if d := req.cfg.Interval.D(); d != interval {
				interval = d
				t.Reset(interval)
			}
			req.done <- nil
		}
	}
}

// start runs comps, each in a goroutine, and returns a func that stops and
// waits for them.
func (a *Agent) start(ctx context.Context, comps []Part) (stop func()) {
	cctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for _, c := range comps {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := c.Run(cctx); err != nil && !errors.Is(err, context.Canceled) {
				a.log.Error("component stopped", "component", fmt.Sprintf("%T", c), "error", err)
			}
		}()
	}
	a.mu.Lock()
	a.components = comps
	a.mu.Unlock()
	return func() {
		cancel()
		wg.Wait()
	}
}

func (a *Agent) tick() {
	a.mu.Lock()
	a.progress = a.now()
	a.rounds++
	if !a.ready {
		a.ready, a.notReady = true, ""
	}
	a.mu.Unlock()
	if a.OnRound != nil {
		a.OnRound(a.Checks())
	}
}

func (a *Agent) setNotReady(reason string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.ready, a.notReady = false, reason
}

// Reload swaps in cfg (already loaded and validated by the caller). If the
// components cannot be built for it, the running ones stay and the error
// says why. It blocks until the agent applied or refused cfg, or ctx ends.
func (a *Agent) Reload(ctx context.Context, cfg *configs.Config) error {
	req := reloadReq{cfg: cfg, done: make(chan error, 1)}
	select {
	case a.reload <- req:
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case err := <-req.done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// LastProgress is when the loop last ticked; the zero time before the first.
func (a *Agent) LastProgress() time.Time {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.progress
}

// Rounds counts loop ticks.
func (a *Agent) Rounds() uint64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.rounds
}

// Ready reports whether the config is loaded, the components are running and
// the first round is done; if not, why.
func (a *Agent) Ready() (bool, string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.ready, a.notReady
}

// Checks gathers every component's checks, sorted by kind and target.
func (a *Agent) Checks() []Check {
	a.mu.Lock()
	comps := a.components
	a.mu.Unlock()
	var out []Check
	for _, c := range comps {
		out = append(out, c.Checks()...)
	}
	sort.SliceStable(out, func(i, j int) bool {
		if out[i].Kind != out[j].Kind {
			return out[i].Kind < out[j].Kind
		}
		return out[i].Target < out[j].Target
	})
	return out
}
