package agent

import (
	"context"
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/edgeheal/edgeheal/agent/core"
	"github.com/edgeheal/edgeheal/agent/tunnel"
	"github.com/edgeheal/edgeheal/configs"
	"github.com/edgeheal/edgeheal/wire"
)

// Options are what an Agent runs with besides its config.
type Options struct {
	OS   core.OS
	Log  *slog.Logger // nil: nothing is logged
	Emit core.Emit    // events (the recorder's Emit, which never blocks); nil: dropped
	// Reporting are the components that live as long as the process and
	// do not follow the config's uplinks, tunnels and workloads: the
	// outbox, the MQTT publisher, the HTTP API. A reload keeps them.
	Reporting []core.Component
	// OnRound, if set, is called after every sweep with the current checks
	// (from the agent's goroutine: it must not block): the wiring feeds
	// metrics, the MQTT status and systemd's STATUS= from it.
	OnRound func(checks []wire.Check)
	// OnProbe, if set, receives every active probe (the metrics).
	OnProbe func(core.ProbeSample)
	// Ledger keeps the policy state (budgets, actions in flight, open
	// incidents) across reloads and, from its file, restarts; nil: one in
	// memory, which reloads share.
	Ledger *tunnel.Ledger
}

// Agent runs the components for its config under a supervisor, swaps them
// on reload, and keeps the progress and readiness that /livez, /readyz and
// the systemd watchdog report. All methods are safe to call from any
// goroutine.
type Agent struct {
	opts   Options
	log    *slog.Logger
	reload chan reloadReq

	mu       sync.Mutex
	cfg      *configs.Config
	sup      *supervisor
	parts    *parts
	status   []componentStatus // as of the last sweep
	progress time.Time         // the last sweep at which every running component was fresh
	swept    bool
}

type reloadReq struct {
	cfg  *configs.Config
	done chan error
}

// New returns an agent for cfg (loaded and validated). It starts nothing
// until Run.
func New(cfg *configs.Config, opts Options) *Agent {
	if opts.Log == nil {
		opts.Log = slog.New(slog.DiscardHandler)
	}
	if opts.Emit == nil {
		opts.Emit = func(core.Event) {}
	}
	if opts.Ledger == nil {
		opts.Ledger, _ = tunnel.OpenLedger("", time.Time{}, opts.Log)
	}
	return &Agent{opts: opts, log: opts.Log, reload: make(chan reloadReq), cfg: cfg}
}

// Report adds components that live as long as the process (see
// Options.Reporting). Call it before Run.
func (a *Agent) Report(cs ...core.Component) {
	a.opts.Reporting = append(a.opts.Reporting, cs...)
}

// Config returns the config the agent runs with.
func (a *Agent) Config() *configs.Config {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.cfg
}

// Run starts the reporting components and the config's components, sweeps
// their health at the config's interval, and swaps the config's components
// on Reload, until ctx ends; then it stops everything and returns nil. A
// component that cannot start does not stop the others: the supervisor
// reports it and runs it again.
func (a *Agent) Run(ctx context.Context) error {
	sup := newSupervisor(a.log.With("component", "supervisor"), a.opts.Emit, a.opts.OS.Clock.Now)
	// The config's components first: the offload guard is what keeps the
	// node's tunnel alive, so it starts before anything else.
	p := buildParts(a.Config(), a.opts)
	a.mu.Lock()
	a.sup, a.parts = sup, p
	a.mu.Unlock()
	p.start(ctx, sup)
	go a.forget(ctx, a.Config())
	for _, c := range a.opts.Reporting {
		sup.Start(ctx, c)
	}
	defer sup.Wait()

	interval := a.Config().Interval.D()
	t := time.NewTicker(interval)
	defer t.Stop()
	a.sweep()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			a.sweep()
		case req := <-a.reload:
			a.swap(ctx, req.cfg)
			if d := req.cfg.Interval.D(); d != interval {
				interval = d
				t.Reset(interval)
			}
			req.done <- nil
			a.sweep()
		}
	}
}

// swap stops the config's components and starts those of cfg.
func (a *Agent) swap(ctx context.Context, cfg *configs.Config) {
	next := buildParts(cfg, a.opts)
	a.mu.Lock()
	old, sup := a.parts, a.sup
	a.mu.Unlock()
	sup.Stop(old.owns)
	a.mu.Lock()
	a.cfg, a.parts = cfg, next
	a.mu.Unlock()
	next.start(ctx, sup)
	go a.forget(ctx, cfg)
}

// forgetTimeout bounds Forget: a few nftables requests and link MTUs.
const forgetTimeout = 30 * time.Second

// forget removes what edgeheal left for tunnels cfg no longer has (Forget),
// on a goroutine of its own: nftables never holds up a start or a reload.
func (a *Agent) forget(ctx context.Context, cfg *configs.Config) {
	ctx, cancel := context.WithTimeout(ctx, forgetTimeout)
	defer cancel()
	keep := make([]string, 0, len(cfg.Tunnels))
	for _, t := range cfg.Tunnels {
		keep = append(keep, t.Interface)
	}
	rs, err := Forget(ctx, a.opts.OS, keep, cfg.DryRun)
	for _, r := range rs {
		a.log.Info("removed what a tunnel no longer configured left", "action", r.Action, "target", r.Target, "changes", r.Changes, "dry_run", r.DryRun)
	}
	if err != nil {
		a.log.Warn("removing what a tunnel no longer configured left", "err", err)
	}
}

// sweep reads every component's health: progress moves only while every
// running component makes progress within its deadline (a component stuck
// in netlink, D-Bus or disk I/O stops the watchdog).
func (a *Agent) sweep() {
	a.mu.Lock()
	sup := a.sup
	a.mu.Unlock()
	now := a.opts.OS.Clock.Now()
	st := sup.Status(now)
	fresh := true
	for _, c := range st {
		if c.State == ComponentStale {
			fresh = false
		}
	}
	a.mu.Lock()
	a.status, a.swept = st, true
	if fresh {
		a.progress = now
	}
	a.mu.Unlock()
	if a.opts.OnRound != nil {
		a.opts.OnRound(a.Checks())
	}
}

// Reload swaps in cfg (already loaded and validated by the caller). It
// blocks until the agent applied it, or ctx ends.
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

// Unfinished names the components told to stop whose Run has not
// returned: what holds a stop up.
func (a *Agent) Unfinished() []string {
	a.mu.Lock()
	sup := a.sup
	a.mu.Unlock()
	if sup == nil {
		return nil
	}
	return sup.Unfinished()
}

// LivenessLimit is how long /livez lets the agent go without progress
// before it fails: three sweeps, and never less than 30 s (the watchdog,
// WatchdogSec=30s, is the sharper tool).
func LivenessLimit(cfg *configs.Config) time.Duration {
	return max(3*cfg.Interval.D(), 30*time.Second)
}

// LastProgress is the last sweep at which every running component made
// progress within its deadline; the zero time before the first.
func (a *Agent) LastProgress() time.Time {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.progress
}

// Ready reports whether every component runs and has made progress (the
// config is loaded, its handles open, its first round done); if not,
// which components are not and why.
func (a *Agent) Ready() (bool, string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if !a.swept {
		return false, "starting"
	}
	var why []string
	for _, c := range a.status {
		if c.State != ComponentOK {
			why = append(why, fmt.Sprintf("%s: %s: %s", c.Name, c.State, c.Detail))
		}
	}
	if len(why) > 0 {
		return false, strings.Join(why, "; ")
	}
	return true, ""
}

// WorkloadReady answers /readyz/workload/<name> (see workload.Monitor.Ready).
func (a *Agent) WorkloadReady(name string) (bool, string, bool) {
	a.mu.Lock()
	p := a.parts
	a.mu.Unlock()
	if p == nil || p.workloads == nil {
		return false, "", false
	}
	return p.workloads.Ready(name)
}

// Checks gathers the component checks (as of the last sweep) and every
// component's checks of its targets, sorted by kind and target.
func (a *Agent) Checks() []wire.Check {
	a.mu.Lock()
	st, sup := a.status, a.sup
	a.mu.Unlock()
	var out []wire.Check
	for _, c := range st {
		out = append(out, c.Check())
	}
	if sup != nil {
		for _, c := range sup.Components() {
			if ch, ok := c.(core.Checker); ok {
				out = append(out, ch.Checks()...)
			}
		}
	}
	sort.SliceStable(out, func(i, j int) bool {
		if out[i].Kind != out[j].Kind {
			return out[i].Kind < out[j].Kind
		}
		return out[i].Target < out[j].Target
	})
	return out
}

// Evidence collects an incident's evidence sections for what the running
// config watches, by ctx's deadline: the recorder's Collect.
func (a *Agent) Evidence(ctx context.Context) map[string]any {
	cfg := a.Config()
	src := evidenceSources{WG: a.opts.OS.WireGuard, Net: a.opts.OS.Links, SNMPPath: a.opts.OS.SNMPPath,
		Checks: a.Checks, Now: a.opts.OS.Clock.Now}
	for _, t := range cfg.Tunnels {
		src.Tunnels = append(src.Tunnels, t.Interface)
	}
	return src.Collect(ctx)
}
