package tunnel

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"golang.zx2c4.com/wireguard/wgctrl/wgtypes"

	"github.com/edgeheal/edgeheal/agent/core"
	"github.com/edgeheal/edgeheal/configs"
	"github.com/edgeheal/edgeheal/netfix"
	"github.com/edgeheal/edgeheal/probes"
)

// Clock is the clock-sanity verdict the ladder reads before a disruptive
// rung (agent/clock's Guard): whether every such rung may run (ok), only
// the ones that do not bounce the tunnel (soft), and why not.
type Clock interface {
	Verdict() (ok, soft bool, cause string)
}

// Config is what a Monitor is made from.
type Config struct {
	Tunnel configs.Tunnel
	Policy configs.Policy
	// DryRun asks every action with dryRun set: nothing changes, and the
	// events say what would have been done.
	DryRun bool
	OS     core.OS
	// Clock is the clock verdict shared by the tunnels (agent/clock's
	// Guard); required.
	Clock Clock
	// Offload is the offload guard whose Enforce is the first half of the
	// reassert rung (it carries its own dry_run, the same config value).
	// Nil: reassert only re-applies the keepalive.
	Offload interface {
		Enforce(ctx context.Context) ([]netfix.Result, error)
	}
	// Ledger keeps the budget, the action in flight and the open
	// incidents across reloads and restarts; nil: a ledger of the
	// monitor's own, in memory (edgeheal check).
	Ledger *Ledger
	// OwnProbes are the host:port that edgeheal's other probes connect to
	// (the workloads' brokers): the path-MTU check's traffic watch does
	// not count them, nor this tunnel's own probe.
	OwnProbes []string
	Log       *slog.Logger           // nil: nothing is logged
	Emit      core.Emit              // nil: events are dropped; must not block
	OnProbe   func(core.ProbeSample) // nil: probes are not reported
}

// Monitor watches the peers of one WireGuard tunnel and runs the
// remediation ladder for the ones that go dark. It is the agent's
// component "tunnel/<interface>": one goroutine (Run) owns all its state,
// so a tunnel's slow repair never delays another tunnel. Nudge, Suspect,
// Health, Checks and Check are safe to call from any goroutine, before,
// during and after Run.
type Monitor struct {
	spec    tunnelSpec
	dryRun  bool
	os      core.OS
	clock   Clock
	offload interface {
		Enforce(context.Context) ([]netfix.Result, error)
	}
	log      *slog.Logger
	emit     core.Emit
	onProbe  func(core.ProbeSample)
	cooldown time.Duration
	window   time.Duration
	hosts    pathBook
	settle   time.Duration // policy.resume_grace
	book     tunnelBook    // this tunnel's policy state in the ledger
	pol      budgetPolicy

	wake chan struct{} // a suspicion or a nudge arrived: run a round now

	// owned by Run's goroutine
	round      uint64
	seeds      map[string]peerState // open incidents from the ledger, taken by track
	adopted    <-chan struct{}      // closed when an action a previous monitor started ends
	adoptPeer  string               // the peer that action serves
	peers      map[wgtypes.Key]*peerTrack
	order      []*peerTrack // selected peers in device order, this round
	readErr    error
	readMisses int // rounds in a row the device could not be read
	kaRetryAt  time.Time
	kaBackoff  time.Duration           // wait after a keepalive fix that did not change anything (failed, dry run)
	uplinks    map[string]ladderGuards // this round's guards, by host path target
	nudged     string                  // this round's nudge ("" none), evidence for the ladder
	ownDown    bool                    // the uplink's own state was down when last seen
	ownBack    time.Time               // when it came back
	upFailing  bool                    // bringUp failed in the last round
	listenPort int                     // the tunnel's listen port, this round
	rebound    int                     // the port the last rebind set, while it is still the tunnel's (0: none)
	watchers   sync.WaitGroup
	pathBack   chan struct{}               // a watched host path answered again (watchPathBack)
	guardsOf   map[*peerTrack]ladderGuards // this round's observed guards of the peers the ladder may act on
	pending    []core.Event                // this round's events, reported at its end
	mtu        mtuRun                      // the path-MTU check (pathmtu_run.go)

	mu        sync.Mutex
	suspicion string // a workload's confirmed report, drained by the loop
	nudge     string // an uplink was just fixed: why; drained by the loop
	views     []peerView
	viewErr   error
	blind     bool // the device could not be read for probe.misses rounds: the peers' states are unknown
	progress  time.Time
	busy      string          // the action running now, for Health
	paths     []pathTarget    // the host paths to learn, from the last round
	watching  map[string]bool // host paths watched for their return (watchPathBack)
	probeOK   time.Time       // the last round whose probe through the tunnel answered
	mtuHint   string          // a workload's hint that the path MTU is small, drained by the loop
	mtuView   mtuView         // the path-mtu check as of the last round
}

// peerTrack is the monitor's state for one peer.
type peerTrack struct {
	key        wgtypes.Key
	id         string // "wg0/AbCdEfGh"
	selected   bool
	round      uint64
	sig        peerSignals
	st         peerState
	probe      string // this round's probe result for the peer, "" if none covers it
	lastAction string
	holdKind   string
	hold       string
	reported   map[string]bool // hold kinds already reported in this incident
	alertAt    time.Time
	alertEvery time.Duration
	// Since this incident's last forced handshake (or rebind): when it
	// returned, and the bytes sent to and received from the peer after it
	// (forcedFresh: not read yet). For the rebind rule.
	forcedAt           time.Time
	forcedTx, forcedRx int64
	forcedFresh        bool
}

var (
	_ core.Component = (*Monitor)(nil)
	_ core.Checker   = (*Monitor)(nil)
)

// NewTunnelMonitor returns a monitor for one tunnel; it starts nothing
// until Run. Zero probe interval, misses and verify_timeout fall back to
// the package defaults (1 s, 3, 15 s).
func New(cfg Config) *Monitor {
	m := &Monitor{
		spec:     newTunnelSpec(cfg.Tunnel, cfg.Policy),
		dryRun:   cfg.DryRun,
		os:       cfg.OS,
		clock:    cfg.Clock,
		offload:  cfg.Offload,
		log:      cfg.Log,
		emit:     cfg.Emit,
		onProbe:  cfg.OnProbe,
		cooldown: cfg.Policy.Cooldown.D(),
		settle:   cfg.Policy.ResumeGrace.D(),
		window:   cfg.Policy.Window.D(),
		wake:     make(chan struct{}, 1),
		pathBack: make(chan struct{}, 1),
		pol:      budgetPolicy{max: cfg.Policy.MaxDisruptive, window: cfg.Policy.Window.D(), cooldown: cfg.Policy.Cooldown.D()},
		peers:    map[wgtypes.Key]*peerTrack{},
	}
	ledger := cfg.Ledger
	if ledger == nil {
		ledger, _ = OpenLedger("", time.Time{}, nil)
	}
	m.spec.mtu.own = append(m.spec.mtu.own, cfg.OwnProbes...)
	m.book = ledger.book(cfg.Tunnel.Interface)
	m.seeds = m.book.peers(cfg.Tunnel.Heal)
	if m.log == nil {
		m.log = slog.New(slog.DiscardHandler)
	}
	m.log = m.log.With("tunnel", cfg.Tunnel.Interface)
	if m.emit == nil {
		m.emit = func(core.Event) {}
	}
	return m
}

// Name implements Component.
func (m *Monitor) Name() string { return "tunnel/" + m.spec.cfg.Interface }

// Health implements Component. A round is due every probe interval; an
// action may hold the monitor's goroutine for its whole timeout (a unit
// restart up to two minutes), so the deadline allows for the longest one.
func (m *Monitor) Health() core.Health {
	m.mu.Lock()
	defer m.mu.Unlock()
	h := core.Health{LastProgress: m.progress, Deadline: 3*m.spec.interval + m.longestAction()}
	in, _ := m.book.inFlight()
	switch {
	case m.busy != "":
		h.Detail = "running " + m.busy
	case in != nil:
		h.Detail = fmt.Sprintf("waiting for %s on %s, started %s by the previous config", in.Rung, in.Target, in.Started.UTC().Format(time.RFC3339))
	case m.viewErr != nil:
		// It cannot watch its tunnel: a state of the component, named by
		// /readyz (a device that gives no answer, an interface gone).
		h.Degraded = true
		h.Detail = "reading peers: " + m.viewErr.Error()
	default:
		h.Detail = "watching " + m.spec.cfg.Interface
	}
	if err := m.book.l.Err(); err != nil {
		h.Degraded = true
		h.Detail += "; policy state not saved (budgets hold until a restart): " + err.Error()
	}
	return h
}

// Run observes the tunnel at its probe interval and acts, until ctx is
// done; then it returns nil. It must be called once.
func (m *Monitor) Run(ctx context.Context) error {
	tick := time.NewTicker(m.spec.interval)
	defer tick.Stop()
	lctx, stopLearning := context.WithCancel(ctx)
	var learner sync.WaitGroup
	learner.Go(func() {
		if err := core.Recovered(func() error { m.learnPaths(lctx); return nil }); err != nil {
			// The learner is an aid: without it paths stay unknown, and
			// unknown holds (never worse than doing nothing).
			m.log.Error("host path learning stopped", "error", err)
		}
	})
	defer learner.Wait()
	defer m.watchers.Wait()
	defer stopLearning()
	back := false
	for {
		m.runRound(ctx, back)
		if back {
			// A round at once too: it verifies what the ladder just did.
			back = false
			continue
		}
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		case <-m.wake:
		case <-m.adopted: // an adopted action ended: verify it now
		case <-m.pathBack:
			back = true
		}
	}
}

// Suspect reports that a workload's path through the tunnel is dark while
// the host's path is fine (the workload monitor confirmed it with its own
// streak). The next round, which starts at once, treats it as a confirmed
// bad observation of the peer that carries the tunnel's probe target, or of
// every selected peer when no probe target identifies one.
func (m *Monitor) Suspect(reason string) {
	m.mu.Lock()
	m.suspicion = reason
	m.mu.Unlock()
	m.poke()
}

// Nudge reports that something known to darken tunnels was just fixed (the
// offload guard turned an uplink's TX checksum offload off). The next round
// starts at once, and in it a probe miss of a peer without a valid session
// is confirmed on the spot instead of after probe.misses in a row (see
// tunnelSpec.observePeer). A probe that answers changes nothing.
func (m *Monitor) Nudge(reason string) {
	m.mu.Lock()
	m.nudge = reason
	m.mu.Unlock()
	m.poke()
}

// ProbeHealthy reports whether the tunnel's own probe answered in its last
// round (within three intervals), and when: false without a probe target.
func (m *Monitor) ProbeHealthy() (bool, string) {
	m.mu.Lock()
	at := m.probeOK
	m.mu.Unlock()
	if at.IsZero() || m.os.Clock.Now().Sub(at) > 3*m.spec.interval {
		return false, ""
	}
	return true, fmt.Sprintf("its probe %s answered at %s", m.spec.cfg.Probe.Target, at.UTC().Format(time.RFC3339))
}

func (m *Monitor) poke() {
	select {
	case m.wake <- struct{}{}:
	default:
	}
}

func (m *Monitor) take() (suspicion, nudge string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	suspicion, nudge = m.suspicion, m.nudge
	m.suspicion, m.nudge = "", ""
	return suspicion, nudge
}

// runRound observes, then updates state and acts, in this goroutine.
func (m *Monitor) runRound(ctx context.Context, back bool) {
	m.adoptEnded()
	suspicion, nudge := m.take()
	r := m.readRound(ctx, back)
	if ctx.Err() != nil {
		return // stopping: these observations were cut short
	}
	m.reportProbe(r.probe)
	if r.probe != nil && r.probe.Err == nil {
		m.mu.Lock()
		m.probeOK = time.Time{}
		if tunnelProbeOK(*r.probe) {
			m.probeOK = m.os.Clock.Now()
		}
		m.mu.Unlock()
	}
	// A nudge that arrived while this round observed applies to it too: a
	// probe that missed after the uplink was fixed, or while it was being
	// fixed, is all the evidence a fresh handshake needs.
	if s, n := m.take(); n != "" || s != "" {
		if n != "" {
			nudge = n
		}
		if s != "" {
			suspicion = s
		}
	}
	now := m.os.Clock.Now()
	m.uplinks, m.nudged = nil, nudge
	m.update(ctx, &r, suspicion, nudge, now)
	m.publish(now)
}

// reportProbe hands the round's probe to the probe duration metric.
func (m *Monitor) reportProbe(p *probes.ProbeResult) {
	if p == nil || m.onProbe == nil {
		return
	}
	result := "ok"
	switch {
	case p.Err != nil:
		result = "error"
	case !tunnelProbeOK(*p):
		result = "fail"
	}
	m.onProbe(core.ProbeSample{Kind: "tunnel", Target: m.spec.cfg.Interface, Result: result, Duration: p.Latency})
}

func (m *Monitor) setBusy(what string) {
	m.mu.Lock()
	m.busy = what
	m.mu.Unlock()
}
