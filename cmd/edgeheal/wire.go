package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/coreos/go-systemd/v22/dbus"
	"github.com/vishvananda/netlink"
	"golang.zx2c4.com/wireguard/wgctrl"

	"github.com/edgeheal/edgeheal/agent"
	"github.com/edgeheal/edgeheal/agent/evidence"
	"github.com/edgeheal/edgeheal/agent/httpapi"
	"github.com/edgeheal/edgeheal/agent/metrics"
	"github.com/edgeheal/edgeheal/agent/mqtt"
	"github.com/edgeheal/edgeheal/agent/outbox"
	"github.com/edgeheal/edgeheal/configs"
	"github.com/edgeheal/edgeheal/netfix"
	"github.com/edgeheal/edgeheal/probes"
)

// handles are the real OS adapters, opened once in the namespace the agent
// runs in and shared by every build of the components. A handle that could
// not be opened is nil, with the reason in errs; a component that needs it
// then fails to build, saying why.
type handles struct {
	nic     *netfix.Ethtool  // changes features
	nicRead *probes.Ethtool  // reads features
	links   *probes.Netlink  // link and route listing, subscriptions, evidence
	nl      *netlink.Handle  // bounce
	wg      *wgctrl.Client   // WireGuard
	clock   *probes.Clock    // clock sanity, across rounds
	locator *probes.Locator  // pod namespaces through CRI
	sd      *lazySystemd     // restart-unit, connected on first use
	errs    map[string]error // why a handle is nil
}

func openHandles() *handles {
	h := &handles{clock: &probes.Clock{}, locator: &probes.Locator{}, sd: &lazySystemd{}, errs: map[string]error{}}
	var err error
	if h.nic, err = netfix.NewEthtool(); err != nil {
		h.errs["ethtool"] = err
	}
	if h.nicRead, err = probes.NewEthtool(); err != nil {
		h.errs["ethtool"] = err
	}
	if h.links, err = probes.NewNetlink(); err != nil {
		h.errs["netlink"] = err
	}
	if h.nl, err = netlink.NewHandle(); err != nil {
		h.errs["netlink"] = err
	}
	if h.wg, err = wgctrl.New(); err != nil {
		h.errs["wireguard"] = err
	}
	return h
}

func (h *handles) need(name string) error {
	if err := h.errs[name]; err != nil {
		return fmt.Errorf("opening %s: %w", name, err)
	}
	return nil
}

func (h *handles) close() {
	if h.nic != nil {
		h.nic.Close()
	}
	if h.nicRead != nil {
		h.nicRead.Close()
	}
	if h.links != nil {
		h.links.Close()
	}
	if h.nl != nil {
		h.nl.Close()
	}
	if h.wg != nil {
		h.wg.Close()
	}
	h.locator.Close()
	h.sd.close()
}

// components builds the agent's components for cfg on the handles: the
// offload guard (uplinks), the tunnel monitor (tunnels) and the workload
// monitor (workloads), the last suspecting tunnels of the second.
func (h *handles) components(cfg *configs.Config, log *slog.Logger, emit agent.Emit) ([]agent.Part, error) {
	var comps []agent.Part
	var guard *agent.OffloadGuard
	var tunnels *agent.TunnelMonitor // set below, before anything runs
	if len(cfg.Uplinks) > 0 {
		if err := errors.Join(h.need("ethtool"), h.need("netlink")); err != nil {
			return nil, fmt.Errorf("offload guard: %w", err)
		}
		g, err := agent.NewOffloadGuard(agent.OffloadGuardConfig{
			Uplinks: cfg.Uplinks,
			DryRun:  cfg.DryRun,
			Floor:   offloadFloor(cfg.Interval.D()),
			NIC:     h.nic,
			Links:   h.links,
			Log:     log.With("component", "offload"),
			Emit:    emit,
			// A tunnel dark because of this uplink needs a fresh handshake now,
			// not after probe.misses more seconds.
			OnChanged: func(link string) {
				if tunnels != nil {
					tunnels.Nudge("TX checksum offload turned off on " + link)
				}
			},
		})
		if err != nil {
			return nil, err
		}
		guard = g
		comps = append(comps, g)
	}
	var suspector agent.TunnelSuspector // stays a nil interface without tunnels
	if len(cfg.Tunnels) > 0 {
		if err := errors.Join(h.need("wireguard"), h.need("netlink")); err != nil {
			return nil, fmt.Errorf("tunnel monitor: %w", err)
		}
		sys := &agent.TunnelSystem{
			WG:         h.wg,
			Links:      h.nl,
			Systemd:    h.sd,
			Uplinks:    h.links,
			ClockProbe: h.clock,
			// A tunnel repair never fixes the modem: when the endpoint stops
			// answering the host too, the ladder holds (see LearnedHostPath).
			HostPath: agent.LearnedHostPath(agent.ICMPHostPath(time.Second)),
		}
		if guard != nil {
			sys.Offload = guard
		}
		tm := agent.NewTunnelMonitor(cfg.Tunnels, cfg.Policy, cfg.DryRun, sys, log.With("component", "tunnel"), emit)
		tunnels = tm
		suspector = tm
		comps = append(comps, tm)
	}
	if len(cfg.Workloads) > 0 {
		wm := agent.NewWorkloadMonitor(cfg.Workloads, agent.ProbesWorkloadProber{Locator: h.locator}, suspector, emit, log.With("component", "workload"))
		comps = append(comps, wm)
	}
	return comps, nil
}

// offloadFloor is the offload guard's periodic check: netlink events do the
// fast work, the floor catches what sends no event (a driver reset, another
// tool), at most every 10 s and never faster than the loop.
func offloadFloor(interval time.Duration) time.Duration {
	return max(interval, 10*time.Second)
}

// lazySystemd is a netfix.Systemd that connects to systemd's D-Bus API on
// first use, so the agent starts (and runs every other rung) where systemd
// is not reachable, and reconnects after an error.
type lazySystemd struct {
	mu   sync.Mutex
	conn *dbus.Conn
}

var _ netfix.Systemd = (*lazySystemd)(nil)

func (l *lazySystemd) get(ctx context.Context) (*dbus.Conn, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.conn != nil && l.conn.Connected() {
		return l.conn, nil
	}
	// The private socket needs no dbus-daemon; the system bus is the fallback.
	c, err := dbus.NewSystemdConnectionContext(ctx)
	if err != nil {
		var err2 error
		if c, err2 = dbus.NewWithContext(ctx); err2 != nil {
			return nil, fmt.Errorf("connecting to systemd over D-Bus: %w", errors.Join(err, err2))
		}
	}
	l.conn = c
	return c, nil
}

func (l *lazySystemd) ListUnitsByNamesContext(ctx context.Context, units []string) ([]dbus.UnitStatus, error) {
	c, err := l.get(ctx)
	if err != nil {
		return nil, err
	}
	return c.ListUnitsByNamesContext(ctx, units)
}

func (l *lazySystemd) ResetFailedUnitContext(ctx context.Context, name string) error {
	c, err := l.get(ctx)
	if err != nil {
		return err
	}
	return c.ResetFailedUnitContext(ctx, name)
}

func (l *lazySystemd) RestartUnitContext(ctx context.Context, name, mode string, ch chan<- string) (int, error) {
	c, err := l.get(ctx)
	if err != nil {
		return 0, err
	}
	return c.RestartUnitContext(ctx, name, mode, ch)
}

func (l *lazySystemd) close() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.conn != nil {
		l.conn.Close()
	}
}

// reporting is everything that tells the world: the outbox and its
// publisher, evidence, metrics, the HTTP endpoints and systemd. It lives
// for the whole process; a reload does not rebuild it.
type reporting struct {
	outbox    *outbox.Outbox
	session   *mqtt.Session
	evidence  *evidence.Store
	metrics   *metrics.Metrics
	recorder  *agent.Recorder
	publisher *mqtt.Publisher // nil: report.mqtt.broker is empty
	server    *httpapi.Server // nil: report.http.listen is empty
	notifier  *notifier
}

func openReporting(cfg *configs.Config, h *handles, log *slog.Logger) (*reporting, error) {
	r := &reporting{}
	var err error
	if r.outbox, err = outbox.Open(cfg.Report.StateDir, outbox.Options{}); err != nil {
		return nil, fmt.Errorf("opening the outbox in report.state_dir %s: %w", cfg.Report.StateDir, err)
	}
	if n := r.outbox.Truncated(); n > 0 {
		log.Warn("outbox: cut a torn write at its tail (the agent was killed while writing)", "bytes", n)
	}
	r.session = mqtt.OpenSession(cfg.Report.StateDir, nil)
	if r.evidence, err = evidence.Open(cfg.Report.StateDir, 0); err != nil {
		log.Warn("incident evidence will not be kept", "error", err)
		r.evidence = nil
	}
	if cfg.Report.MQTT.Broker != "" {
		r.publisher, err = mqtt.NewPublisher(mqtt.Options{
			Config:  cfg.Report.MQTT,
			Node:    cfg.Node,
			Version: version,
			Outbox:  r.outbox,
			Session: r.session,
			Logger:  log.With("component", "mqtt"),
		})
		if err != nil {
			return nil, err
		}
		r.publisher.SetConfigRevision(cfg.Revision)
	}
	mopts := metrics.Options{Version: version, Outbox: r.outbox}
	if r.publisher != nil {
		mopts.MQTT = r.publisher.Connected
	}
	r.metrics = metrics.New(mopts)
	r.recorder = &agent.Recorder{
		Store:   r.outbox,
		OnEvent: r.metrics.ObserveEvent,
		Log:     log.With("component", "events"),
	}
	if r.evidence != nil {
		r.recorder.Evidence = r.evidence
	}
	if r.notifier, err = newNotifier(log); err != nil {
		log.Warn("systemd watchdog off", "error", err)
	}
	return r, nil
}

// evidenceFor points the recorder's evidence at what cfg watches.
func (r *reporting) evidenceFor(cfg *configs.Config, h *handles, checks func() []agent.Check) {
	src := agent.EvidenceSources{SNMPPath: "/proc/net/snmp", Checks: checks}
	if h.wg != nil {
		src.WG = h.wg
		for _, t := range cfg.Tunnels {
			src.Tunnels = append(src.Tunnels, t.Interface)
		}
	}
	if h.links != nil {
		src.Net = h.links
	}
	r.recorder.SetCollect(src.Collect)
}

// agentState adapts the agent to report.AgentState.
type agentState struct {
	*agent.Agent
	mu       sync.Mutex
	workload func(name string) (bool, string, bool)
}

func (s *agentState) WorkloadReady(name string) (bool, string, bool) {
	s.mu.Lock()
	f := s.workload
	s.mu.Unlock()
	if f == nil {
		return false, "", false
	}
	return f(name)
}

func (s *agentState) setWorkloads(f func(name string) (bool, string, bool)) {
	s.mu.Lock()
	s.workload = f
	s.mu.Unlock()
}
