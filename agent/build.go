package agent

import (
	"context"
	"log/slog"
	"strings"

	"github.com/edgeheal/edgeheal/agent/clock"
	"github.com/edgeheal/edgeheal/agent/core"
	"github.com/edgeheal/edgeheal/agent/offload"
	"github.com/edgeheal/edgeheal/agent/tunnel"
	"github.com/edgeheal/edgeheal/agent/workload"
	"github.com/edgeheal/edgeheal/broker"
	"github.com/edgeheal/edgeheal/configs"
	"github.com/edgeheal/edgeheal/wire"
)

// parts are the components a config asks for: the offload guard (uplinks),
// the clock guard and one monitor per tunnel (tunnels), the workload
// monitor (workloads), wired to each other: an offload fix nudges every
// tunnel, a workload's confirmed overlay failure is a suspicion for its
// tunnel, and reassert re-runs the offload guard. The components never
// import each other; these few lines are all they know of one another.
type parts struct {
	offload   *offload.Guard
	clock     *clock.Guard
	tunnels   []*tunnel.Monitor
	byName    map[string]*tunnel.Monitor
	workloads *workload.Monitor
	log       *slog.Logger
	all       []core.Component
}

// buildParts makes the components for cfg. It cannot fail: a handle a
// component needs is opened (and its failure reported) when it runs.
func buildParts(cfg *configs.Config, o Options) *parts {
	p := &parts{byName: map[string]*tunnel.Monitor{}, log: o.Log}
	if len(cfg.Uplinks) > 0 {
		p.offload = offload.New(offload.Config{
			Uplinks: cfg.Uplinks, DryRun: cfg.DryRun, Floor: offload.Floor(cfg.Interval.D()), OS: o.OS,
			Log: o.Log.With("component", "offload"), Emit: o.Emit,
			// A tunnel dark because of this uplink needs a fresh handshake now,
			// not after probe.misses more seconds.
			OnChanged: func(link string) { p.nudge("TX checksum offload turned off on " + link) },
		})
		p.all = append(p.all, p.offload)
	}
	if len(cfg.Tunnels) > 0 {
		p.clock = clock.New(o.OS.Clock)
		p.all = append(p.all, p.clock)
	}
	own := ownProbes(cfg)
	for _, t := range cfg.Tunnels {
		tc := tunnel.Config{Tunnel: t, Policy: cfg.Policy, DryRun: cfg.DryRun, OS: o.OS, Clock: p.clock,
			Ledger: o.Ledger, OwnProbes: own, Log: o.Log.With("component", "tunnel"), Emit: o.Emit, OnProbe: o.OnProbe}
		if p.offload != nil {
			tc.Offload = p.offload
		}
		m := tunnel.New(tc)
		p.tunnels = append(p.tunnels, m)
		p.byName[t.Interface] = m
		p.all = append(p.all, m)
	}
	if len(cfg.Workloads) > 0 {
		wc := workload.Config{Workloads: cfg.Workloads, OS: o.OS, Emit: o.Emit, Log: o.Log.With("component", "workload"), OnProbe: o.OnProbe}
		if len(p.tunnels) > 0 {
			wc.Tunnels = p // stays a nil interface without tunnels
		}
		p.workloads = workload.New(wc)
		p.all = append(p.all, p.workloads)
	}
	return p
}

// start runs every part under sup.
func (p *parts) start(ctx context.Context, sup *supervisor) {
	for _, c := range p.all {
		sup.Start(ctx, c)
	}
}

// owns reports whether c is one of the parts (for Supervisor.Stop).
func (p *parts) owns(c core.Component) bool {
	for _, x := range p.all {
		if x == c {
			return true
		}
	}
	return false
}

func (p *parts) nudge(reason string) {
	for _, m := range p.tunnels {
		m.Nudge(reason)
	}
}

// Suspect implements workload.Tunnels: the suspicion goes to the tunnel by
// its interface; an unknown one is logged and ignored.
func (p *parts) Suspect(tunnel, reason string) {
	m, ok := p.byName[tunnel]
	if !ok {
		p.log.Warn("suspicion for a tunnel that is not configured", "tunnel", tunnel, "reason", reason)
		return
	}
	m.Suspect(reason)
}

// HintPathMTU implements workload.Tunnels: the tunnel checks its path MTU
// at once; an unknown one is logged and ignored.
func (p *parts) HintPathMTU(tunnel, reason string) {
	m, ok := p.byName[tunnel]
	if !ok {
		p.log.Warn("a path-MTU hint for a tunnel that is not configured", "tunnel", tunnel, "reason", reason)
		return
	}
	m.HintPathMTU(reason)
}

// TunnelHealthy implements workload.Tunnels: whether the tunnel's own probe
// answers. An unknown tunnel is not healthy (nothing says it is).
func (p *parts) TunnelHealthy(tunnel string) (bool, string) {
	m, ok := p.byName[tunnel]
	if !ok {
		return false, ""
	}
	return m.ProbeHealthy()
}

// NodeReport is `edgeheal check`: one observation of the node with the
// daemon's own components, changing nothing.
type NodeReport struct {
	Healthy bool            `json:"healthy"`
	Uplinks *offload.Report `json:"uplinks,omitempty"`
	Checks  []wire.Check    `json:"checks"`
}

// CheckNode builds the components cfg asks for, as a dry run, and asks
// each for its one-shot check: the offload guard's reconciler without
// changes, one reading of every tunnel and the clock, one probe round of
// every workload. An error means the uplinks could not even be listed.
func CheckNode(ctx context.Context, cfg *configs.Config, os core.OS, log *slog.Logger) (NodeReport, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	dry := *cfg
	dry.DryRun = true
	p := buildParts(&dry, Options{OS: os, Log: log, Emit: core.Discard})
	rep := NodeReport{Healthy: true, Checks: []wire.Check{}}
	if p.offload != nil {
		up, err := p.offload.Check(ctx)
		if err != nil {
			return rep, err
		}
		rep.Uplinks = &up
		rep.Checks = append(rep.Checks, up.Checks()...)
	}
	for _, m := range p.tunnels {
		rep.Checks = append(rep.Checks, m.Check(ctx)...)
	}
	if p.clock != nil {
		rep.Checks = append(rep.Checks, p.clock.Check())
	}
	if p.workloads != nil {
		rep.Checks = append(rep.Checks, p.workloads.Check(ctx)...)
	}
	for _, c := range rep.Checks {
		rep.Healthy = rep.Healthy && c.Healthy
	}
	return rep, nil
}

// ownProbes are the host:port every probe of edgeheal's connects to (the
// tunnels' TCP probes, the workloads' brokers from the pod and from the
// host): they open a connection every round, which the path-MTU check's
// traffic watch must not take for traffic.
func ownProbes(cfg *configs.Config) []string {
	var out []string
	for _, t := range cfg.Tunnels {
		if hp, ok := strings.CutPrefix(t.Probe.Target, "tcp://"); ok {
			out = append(out, hp)
		}
	}
	for _, w := range cfg.Workloads {
		for _, b := range []string{w.MQTT.Broker, w.MQTT.HostBroker} {
			if u, err := broker.ParseURL(b); err == nil && b != "" {
				out = append(out, u.Addr())
			}
		}
	}
	return out
}
