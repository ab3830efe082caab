// Package workload is the agent's workload monitor: it probes each
// workload's MQTT broker from inside the pod's network namespace and from
// the host, diagnoses a failure (the overlay, the uplink, the broker, the
// credentials), and tells the tunnel that carries the workload when the
// diagnosis says the overlay is dark. It never acts on the system itself.
package workload

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync"
	"time"

	"github.com/edgeheal/edgeheal/agent/core"
	"github.com/edgeheal/edgeheal/broker"
	"github.com/edgeheal/edgeheal/configs"
	"github.com/edgeheal/edgeheal/probes"
	"github.com/edgeheal/edgeheal/wire"
)

// Tunnels is how the workloads speak to the tunnels they depend on (the
// agent's wiring implements it over the tunnel monitors). Suspect tells a
// tunnel that a workload's path through it is dark while the host's path
// is fine; it must not block. TunnelHealthy says whether the tunnel's own
// probe answers (and what it saw): then a workload's failure is its own
// path's, and never a reason to touch the tunnel. HintPathMTU tells a
// tunnel that a workload's TLS handshake stalled after TCP connected: its
// path MTU is checked at once (never a repair by itself); it must not
// block.
type Tunnels interface {
	Suspect(tunnel, reason string)
	TunnelHealthy(tunnel string) (bool, string)
	HintPathMTU(tunnel, reason string)
}

var (
	_ core.Component = (*Monitor)(nil)
	_ core.Checker   = (*Monitor)(nil)
)

// Workload defaults, used when the config leaves a value zero.
const (
	defaultInterval = 5 * time.Second
	defaultMisses   = 2
)

// Monitor probes each configured workload's broker from inside the
// pod's network namespace and from the host, diagnoses failures, tells the
// tunnel monitor about a confirmed overlay failure, and keeps per-workload
// state for Checks, Ready and events. Run owns the rounds; Checks, Ready
// and Check are safe to call from any goroutine.
type Monitor struct {
	os      core.OS
	suspect Tunnels // nil: no tunnel action
	emit    core.Emit
	log     *slog.Logger
	onProbe func(core.ProbeSample)

	mu  sync.Mutex
	wls []*run
}

// workloadRun is one workload's config and last round.
type run struct {
	cfg    configs.Workload
	where  probes.Where
	pod    probes.MQTTConfig
	host   *probes.MQTTConfig
	every  time.Duration
	misses int

	// Guarded by Monitor.mu.
	progress   time.Time
	st         status
	target     probes.Target
	located    bool
	podRes     *probes.Result
	hostRes    *probes.Result
	lastAction string
}

// Config is what a Monitor is made from. Only Workloads and OS are
// required.
type Config struct {
	Workloads []configs.Workload
	OS        core.OS                // Pods, Net and Clock are used
	Tunnels   Tunnels                // nil: no tunnel is told anything
	Emit      core.Emit              // nil: events are dropped
	Log       *slog.Logger           // nil: nothing is logged
	OnProbe   func(core.ProbeSample) // nil: probes are not reported
}

// New returns a monitor for the workloads; it starts nothing until Run.
func New(cfg Config) *Monitor {
	m := &Monitor{os: cfg.OS, suspect: cfg.Tunnels, emit: cfg.Emit, log: cfg.Log, onProbe: cfg.OnProbe}
	if m.emit == nil {
		m.emit = core.Discard
	}
	if m.log == nil {
		m.log = slog.New(slog.DiscardHandler)
	}
	for _, w := range cfg.Workloads {
		r := &run{cfg: w, where: where(w), every: w.Interval.D(), misses: w.Misses}
		if r.every <= 0 {
			r.every = defaultInterval
		}
		if r.misses <= 0 {
			r.misses = defaultMisses
		}
		r.pod, r.host = brokerProbes(w.MQTT)
		r.st.State = stateUnknown
		m.wls = append(m.wls, r)
	}
	return m
}

// where says how to find w's network namespace.
func where(w configs.Workload) probes.Where {
	return probes.Where{
		Pod:       probes.PodSelector{Namespace: w.Pod.Namespace, Name: w.Pod.Name, Labels: w.Pod.Labels},
		CRISocket: w.CRISocket,
		Netns:     w.Netns,
		PID:       w.PID,
	}
}

// brokerProbes returns the probe of the broker as the pod reaches it and,
// if host_broker is set, as the host reaches it. Without a TLS server name
// the host probe verifies the name of the pod's broker address: the
// certificate is for the broker's name, whichever address reaches it.
func brokerProbes(b configs.Broker) (pod probes.MQTTConfig, host *probes.MQTTConfig) {
	pod = probes.MQTTConfig{
		Broker:       b.Broker,
		Username:     b.Username,
		PasswordFile: b.PasswordFile,
		TLS:          b.TLS,
		Timeout:      b.Timeout.D(),
	}
	if b.HostBroker == "" {
		return pod, nil
	}
	h := pod
	h.Broker = b.HostBroker
	if h.TLS.ServerName == "" {
		if u, err := broker.ParseURL(b.Broker); err == nil && net.ParseIP(u.Host) == nil {
			h.TLS.ServerName = u.Host
		}
	}
	return pod, &h
}

// reportProbe hands a probe to the probe duration metric.
func (m *Monitor) reportProbe(kind, name string, r probes.Result, err error) {
	if m.onProbe == nil {
		return
	}
	result := "ok"
	switch {
	case err != nil:
		result = "error"
	case !r.OK():
		result = "fail"
	}
	m.onProbe(core.ProbeSample{Kind: kind, Target: name, Result: result, Duration: r.Latency})
}

// Name implements Component.
func (m *Monitor) Name() string { return "workloads" }

// Health implements Component: every workload must complete a round within
// three of its intervals and probe timeouts.
func (m *Monitor) Health() core.Health {
	m.mu.Lock()
	defer m.mu.Unlock()
	var h core.Health
	for i, r := range m.wls {
		if i == 0 || r.progress.Before(h.LastProgress) {
			h.LastProgress = r.progress
		}
		timeout := r.pod.Timeout
		if timeout <= 0 {
			timeout = probes.DefaultTimeout
		}
		h.Deadline = max(h.Deadline, 3*(r.every+2*timeout))
	}
	h.Detail = fmt.Sprintf("probing %d workloads", len(m.wls))
	// A workload that could not be observed (the container runtime or a
	// probe gave no answer) is a state of the component, named by /readyz.
	var blind []string
	for _, r := range m.wls {
		if r.st.State == stateUnknown && r.st.Detail != "" {
			blind = append(blind, r.cfg.Name+": "+r.st.Detail)
		}
	}
	if len(blind) > 0 {
		h.Degraded = true
		h.Detail += "; not observed: " + strings.Join(blind, "; ")
	}
	return h
}

// Run probes every workload at its interval (the first round at once) until
// ctx is done, then returns nil. Each workload has its own goroutine, which
// Run waits for.
func (m *Monitor) Run(ctx context.Context) error {
	var wg sync.WaitGroup
	for _, r := range m.wls {
		wg.Go(func() { m.supervise(ctx, r) })
	}
	<-ctx.Done() // also with no workloads: a component runs until stopped
	wg.Wait()
	return nil
}

// supervise runs one workload's loop until ctx ends. A panic in it (a bug
// in one workload's round) is recovered, reported with its stack, and the
// loop runs again after a second; the other workloads never notice.
func (m *Monitor) supervise(ctx context.Context, r *run) {
	for ctx.Err() == nil {
		err := core.Recovered(func() error { m.loop(ctx, r); return nil })
		var pe *core.PanicError
		if !errors.As(err, &pe) {
			return
		}
		m.log.Error("a workload's round panicked; running it again", "workload", r.cfg.Name, "panic", fmt.Sprint(pe.Value), "stack", string(pe.Stack))
		m.emit(core.Event{ID: core.NewEventID(), Time: m.os.Clock.Now(), Kind: wire.EventComponent, Target: m.Name() + "/" + r.cfg.Name, Result: "panic",
			Summary:  fmt.Sprintf("workload %s: its round panicked: %v; running it again in 1s", r.cfg.Name, pe.Value),
			Evidence: map[string]any{"error": err.Error(), "stack": string(pe.Stack)}})
		t := time.NewTimer(time.Second)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}

func (m *Monitor) loop(ctx context.Context, r *run) {
	tick := time.NewTicker(r.every)
	defer tick.Stop()
	for {
		m.round(ctx, r)
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// roundResult is what one round observed.
type roundResult struct {
	target  probes.Target
	located bool
	obs     observation
	pod     *probes.Result
	host    *probes.Result
}

// observe resolves the namespace and probes from the pod and the host.
// The host probe runs only when the pod probe failed: it is needed only to
// tell overlay from broker.
func (m *Monitor) observe(ctx context.Context, r *run, alwaysHost bool) roundResult {
	var rr roundResult
	// A container runtime that does not answer is this workload's
	// problem, reported as such, not a round that never ends: the
	// watchdog would restart the whole agent for it, again and again.
	// Its bound is the probe's, which Health's deadline allows for.
	timeout := r.pod.Timeout
	if timeout <= 0 {
		timeout = probes.DefaultTimeout
	}
	lctx, cancel := context.WithTimeout(ctx, timeout)
	t, err := m.os.Pods.Locate(lctx, r.where)
	if err != nil && ctx.Err() == nil && errors.Is(lctx.Err(), context.DeadlineExceeded) {
		who := "the container runtime"
		if r.where.CRISocket != "" {
			who += " at " + r.where.CRISocket // where to look: systemctl status k3s, crictl info
		}
		err = fmt.Errorf("%s gave no answer within %s: %w", who, timeout, err)
	}
	cancel()
	rr.obs.ResolveErr = err
	if err != nil {
		return rr
	}
	rr.target, rr.located = t, true
	res, err := m.os.Net.MQTT(ctx, t.Netns, r.pod)
	m.reportProbe("workload-pod", r.cfg.Name, res, err)
	rr.obs.Pod, rr.obs.PodErr = res, err
	if err == nil {
		rr.pod = &res
	}
	if r.host != nil && (alwaysHost || (err == nil && !res.OK())) {
		h, err := m.os.Net.MQTT(ctx, probes.Netns{}, *r.host)
		m.reportProbe("workload-host", r.cfg.Name, h, err)
		rr.obs.HostErr = err
		if err == nil {
			rr.host = &h
			rr.obs.Host = &h
		}
	}
	return rr
}

// round is one observe → decide → act → report cycle for one workload.
func (m *Monitor) round(ctx context.Context, r *run) {
	rr := m.observe(ctx, r, false)
	if ctx.Err() != nil {
		return // being stopped: a cancelled probe is no observation
	}
	d, detail := diagnose(rr.obs)
	if d == diagOverlay && m.suspect != nil && r.cfg.Tunnel != "" {
		healthy, why := m.suspect.TunnelHealthy(r.cfg.Tunnel)
		d, detail = podPathOrOverlay(d, detail, healthy, why)
	}
	now := m.os.Clock.Now()
	log := m.log.With("workload", r.cfg.Name)

	m.mu.Lock()
	r.progress = now
	prev := r.st
	prevTarget, wasLocated := r.target, r.located
	next, act := next(prev, d, detail, rr.target.ID, r.misses, now)
	r.st = next
	if rr.located {
		r.target, r.located = rr.target, true
	} else if d == diagNoPod {
		r.located = false
	}
	if d != diagUnknown {
		r.podRes, r.hostRes = rr.pod, rr.host
	}
	sendSuspect := act && m.suspect != nil && r.cfg.Tunnel != ""
	firstSuspect := sendSuspect && !next.SuspectSent
	if firstSuspect {
		r.st.SuspectSent = true
		r.lastAction = "suspect " + r.cfg.Tunnel
	}
	m.mu.Unlock()

	if d == diagUnknown {
		log.Warn("workload probe could not be made", "detail", detail)
	}
	if rr.located && wasLocated && prevTarget.ID != rr.target.ID {
		m.event(core.Event{Time: now, Kind: "workload", Target: r.cfg.Name, Result: "re-resolved",
			Summary:  fmt.Sprintf("workload %s: network namespace changed (%s), probing the new one", r.cfg.Name, describeTarget(rr.target)),
			Evidence: map[string]any{"netns": rr.target, "previous_netns": prevTarget}})
	}
	if next.State != prev.State {
		m.stateEvent(r, prev, next, rr, now)
	}
	if d == diagPathMTU && prev.Diagnosis != diagPathMTU && m.suspect != nil && r.cfg.Tunnel != "" {
		log.Info("path MTU suspected from workload probes", "tunnel", r.cfg.Tunnel, "detail", detail)
		m.suspect.HintPathMTU(r.cfg.Tunnel, fmt.Sprintf("workload %s: %s", r.cfg.Name, detail))
	}
	if sendSuspect {
		reason := fmt.Sprintf("workload %s: %s", r.cfg.Name, detail)
		m.suspect.Suspect(r.cfg.Tunnel, reason)
		if firstSuspect {
			log.Info("tunnel suspected from workload probes", "tunnel", r.cfg.Tunnel, "detail", detail)
			m.event(core.Event{Time: now, Kind: "action", Target: r.cfg.Name, Action: "suspect-tunnel", Result: "ok",
				Summary:  fmt.Sprintf("workload %s: overlay diagnosis confirmed %d rounds in a row, tunnel %s marked suspect", r.cfg.Name, next.Overlay, r.cfg.Tunnel),
				Evidence: m.evidence(rr, d)})
		}
	}
}

func (m *Monitor) stateEvent(r *run, prev, next status, rr roundResult, now time.Time) {
	ev := core.Event{Time: now, Target: r.cfg.Name, Evidence: m.evidence(rr, next.Diagnosis)}
	switch {
	case next.State == stateDown:
		ev.Kind = "incident"
		ev.Summary = fmt.Sprintf("workload %s: broker path down (%s): %s", r.cfg.Name, next.Diagnosis, next.Detail)
		ev.Evidence["began"] = next.Began.UTC().Format(time.RFC3339Nano) // the last good observation
	case prev.State == stateDown && next.State == stateOK:
		ev.Kind = "recovered"
		took := now.Sub(prev.Began)
		ev.Duration = took.Seconds()
		ev.Summary = fmt.Sprintf("workload %s: broker reachable from the pod again after %s", r.cfg.Name, took.Round(time.Second))
	case next.State == stateSuspect:
		return // not confirmed yet: logged in Checks, not an event
	default:
		ev.Kind = "workload"
		ev.Result = next.State
		ev.Summary = fmt.Sprintf("workload %s: %s → %s: %s", r.cfg.Name, prev.State, next.State, next.Detail)
	}
	m.event(ev)
}

func (m *Monitor) evidence(rr roundResult, d diagnosis) map[string]any {
	ev := map[string]any{"diagnosis": string(d)}
	if rr.located {
		ev["netns"] = rr.target
	}
	if rr.pod != nil {
		ev["pod_probe"] = *rr.pod
	}
	if rr.host != nil {
		ev["host_probe"] = *rr.host
	}
	return ev
}

func (m *Monitor) event(ev core.Event) {
	if ev.ID == "" {
		ev.ID = core.NewEventID()
	}
	m.emit(ev)
}

func describeTarget(t probes.Target) string {
	switch t.Source {
	case probes.SourceCRI:
		return fmt.Sprintf("pod %s sandbox %.12s via cri: %s", t.Pod, t.SandboxID, t.Path)
	case probes.SourcePID:
		return fmt.Sprintf("pid %d: %s", t.PID, t.Path)
	}
	return t.Path
}
