// Package metrics holds edgeheal's Prometheus metrics: what the checks,
// probes and events say, in base units, and the standard go_* and
// process_* metrics, written in the text exposition format by the
// package itself (exposition.go says why). It only reads what it is
// handed; nothing in it decides or changes anything.
package metrics

import (
	"bytes"
	"net/http"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/edgeheal/edgeheal/agent/core"
	"github.com/edgeheal/edgeheal/wire"
)

// OutboxStats is the part of the outbox the metrics read.
type OutboxStats interface {
	Depth() int
	Dropped() uint64
	MemoryOnly() int // queued events not on disk yet
	Damaged() uint64 // bytes of damaged log moved aside since start
}

// Metrics are edgeheal's Prometheus metrics (plus the standard go_* and
// process_* ones, runtime.go), served in the text exposition format
// (exposition.go). Names start with edgeheal_ and use base units
// (seconds, totals). Every method is safe for concurrent use and cheap
// enough to call from the control loop.
type Metrics struct {
	funcs []funcMetric // read at each scrape

	mu            sync.Mutex // guards the vecs and checks
	buildInfo     *vec
	checkState    *vec
	checkHealthy  *vec
	handshakeAge  *vec
	probeDuration *vec
	remediations  *vec
	offloadDrift  *vec
	events        *vec
	reloadOK      *vec
	reloadTime    *vec
	incidentDur   *vec
	pathMTU       *vec
	clampMTU      *vec
	mtuChecks     *vec
	checks        map[[2]string]string   // (kind, target) → state, to delete stale series
	paths         map[string][][3]string // a path-mtu check's target → its path series' labels
	history       func() []TargetTotal
}

// TargetTotal is one target's account since the node's history began
// (agent/history: kept across restarts, so the counters only grow).
type TargetTotal struct {
	Kind, Target                 string
	DarkSeconds, DegradedSeconds float64
	Incidents                    int
}

// funcMetric is an unlabelled value read when scraped.
type funcMetric struct {
	family
	f func() float64
}

// Options wire the metrics that read live values.
type Options struct {
	Version string
	Outbox  OutboxStats          // nil: outbox metrics stay absent
	MQTT    func() bool          // connected; nil: absent
	History func() []TargetTotal // the history's totals; nil: absent
}

// incidentBuckets are edgeheal_incident_duration_seconds' upper bounds:
// the outages the field cares about run from seconds (a re-plug, a
// forced handshake) to minutes (a carrier outage) and hours (gave up).
var incidentBuckets = []float64{1, 2, 5, 10, 20, 30, 60, 120, 300, 600, 1800, 3600}

// probeBuckets are edgeheal_probe_duration_seconds' upper bounds: a
// probe on a healthy path takes milliseconds, a timeout seconds.
var probeBuckets = []float64{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5}

// New makes every metric.
func New(opts Options) *Metrics {
	m := &Metrics{
		buildInfo: newVec(typeGauge, "edgeheal_build_info",
			"Always 1; labels give the agent version and the Go version it was built with.", "goversion", "version"),
		checkState: newVec(typeGauge, "edgeheal_check_state",
			"1 for the current state of each check (ok, suspect, down, healing, degraded, ...), one series per state seen.", "kind", "target", "state"),
		checkHealthy: newVec(typeGauge, "edgeheal_check_healthy", "1 if the check is healthy, 0 if not.", "kind", "target"),
		handshakeAge: newVec(typeGauge, "edgeheal_wireguard_handshake_age_seconds", "Seconds since the last WireGuard handshake of a peer.", "interface", "peer"),
		probeDuration: newHistogramVec("edgeheal_probe_duration_seconds",
			"Duration of active probes (through a tunnel, from a pod namespace).", probeBuckets, "kind", "target", "result"),
		remediations: newVec(typeCounter, "edgeheal_remediations_total", "Remediation actions taken, by action (rung) and result.", "action", "result"),
		offloadDrift: newVec(typeCounter, "edgeheal_offload_drift_total", "Times TX checksum offload was found back on for an uplink.", "link"),
		events:       newVec(typeCounter, "edgeheal_events_total", "Events queued for the cloud, by kind.", "kind"),
		reloadOK: newVec(typeGauge, "edgeheal_config_last_reload_successful",
			"1 if the last configuration load or reload succeeded, 0 if it failed (the previous config stays in force)."),
		reloadTime: newVec(typeGauge, "edgeheal_config_last_reload_success_timestamp_seconds",
			"Unix time of the last successful configuration load or reload."),
		incidentDur: newHistogramVec("edgeheal_incident_duration_seconds",
			"How long closed incidents lasted, from the last good observation to the first good one again.", incidentBuckets, "kind"),
		pathMTU: newVec(typeGauge, "edgeheal_path_mtu_bytes",
			"The largest IP packet that crossed a tunnel's path (path tunnel: through it; uplink: over the uplink, outside it), measured with DF echoes.", "interface", "link", "path"),
		clampMTU: newVec(typeGauge, "edgeheal_path_mtu_clamp_bytes",
			"The path MTU edgeheal clamps a link's TCP MSS to, while the path carries less than the link sends.", "interface", "link", "path"),
		mtuChecks: newVec(typeCounter, "edgeheal_path_mtu_checks_total",
			"Path-MTU checks made since the agent started, each a full-size DF echo each way of each path when the full size crosses (about 6.3 KB on the uplink).", "interface"),
		checks:  map[[2]string]string{},
		paths:   map[string][][3]string{},
		history: opts.History,
	}
	m.buildInfo.with(runtime.Version(), opts.Version).v = 1
	m.reloadOK.with() // 0 until the first load, as the gauges were
	m.reloadTime.with()
	m.funcs = outboxMetrics(opts.Outbox)
	if opts.MQTT != nil {
		connected := opts.MQTT
		m.funcs = append(m.funcs, funcMetric{family{"edgeheal_mqtt_connected", "1 while the reporting broker connection is up.", typeGauge, nil}, func() float64 {
			if connected() {
				return 1
			}
			return 0
		}})
	}
	return m
}

// outboxMetrics are the metrics read from the outbox; none without one.
func outboxMetrics(ob OutboxStats) []funcMetric {
	if ob == nil {
		return nil
	}
	return []funcMetric{
		{family{"edgeheal_outbox_depth", "Events queued on disk, not yet acknowledged by the broker.", typeGauge, nil},
			func() float64 { return float64(ob.Depth()) }},
		{family{"edgeheal_outbox_dropped_total", "Events dropped, least important first, because the outbox was full (kept across restarts).", typeCounter, nil},
			func() float64 { return float64(ob.Dropped()) }},
		{family{"edgeheal_outbox_memory_only", "Queued events kept in memory only, because the state directory cannot be written.", typeGauge, nil},
			func() float64 { return float64(ob.MemoryOnly()) }},
		{family{"edgeheal_outbox_damaged_bytes_total", "Bytes of damaged outbox log moved aside (the records around them kept) since the agent started.", typeCounter, nil},
			func() float64 { return float64(ob.Damaged()) }},
	}
}

// Handler serves the metrics in the Prometheus text format, version
// 0.0.4, which every Prometheus scraper accepts (there is no protobuf or
// OpenMetrics negotiation, and no gzip: the endpoint is on localhost).
func (m *Metrics) Handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var b bytes.Buffer
		m.WriteText(&b)
		w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
		w.Header().Set("Content-Length", strconv.Itoa(b.Len()))
		_, _ = w.Write(b.Bytes())
	})
}

// WriteText appends every family to b in the text format, in name
// order. The values read from elsewhere (outbox, broker) are read first,
// without the lock, so that no other part's lock is ever taken while this
// one is held. The lock is held while b is filled, never while a client
// reads.
func (m *Metrics) WriteText(b *bytes.Buffer) {
	type entry struct {
		name  string
		write func()
	}
	var es []entry
	for _, f := range m.funcs {
		v := f.f()
		es = append(es, entry{f.name, func() {
			writeHeader(b, f.family)
			writeSample(b, f.name, nil, nil, "", "", v)
		}})
	}
	for _, v := range historyMetrics(m.history) {
		es = append(es, entry{v.name, func() { v.write(b) }})
	}
	m.mu.Lock()
	for _, v := range []*vec{m.buildInfo, m.checkState, m.checkHealthy, m.handshakeAge, m.probeDuration,
		m.remediations, m.offloadDrift, m.events, m.reloadOK, m.reloadTime, m.incidentDur, m.pathMTU, m.clampMTU, m.mtuChecks} {
		es = append(es, entry{v.name, func() { v.write(b) }})
	}
	slices.SortFunc(es, func(a, b entry) int { return strings.Compare(a.name, b.name) })
	for _, e := range es {
		e.write()
	}
	m.mu.Unlock()
	writeGoMetrics(b) // go_* and process_* sort after edgeheal_*
	writeProcessMetrics(b)
}

// SetChecks sets the check gauges from the agent's current checks; series of
// checks that disappeared (or states left) are deleted. A peer check also
// sets its handshake age, while the peer has a handshake.
func (m *Metrics) SetChecks(checks []wire.Check) {
	m.mu.Lock()
	defer m.mu.Unlock()
	seen := map[[2]string]bool{}
	for _, c := range checks {
		k := [2]string{c.Kind, c.Target}
		seen[k] = true
		if old, ok := m.checks[k]; ok && old != c.State {
			m.checkState.delete(c.Kind, c.Target, old)
		}
		m.checks[k] = c.State
		m.checkState.with(c.Kind, c.Target, c.State).v = 1
		h := 0.0
		if c.Healthy {
			h = 1
		}
		m.checkHealthy.with(c.Kind, c.Target).v = h
		if c.Kind == wire.KindPathMTU {
			m.setPaths(c.Target, c.PathMTU)
		}
		if c.Peer != nil {
			iface, peer := splitTarget(c.Target)
			if c.Peer.LastHandshake.IsZero() {
				m.handshakeAge.delete(iface, peer)
			} else {
				m.handshakeAge.with(iface, peer).v = c.Peer.HandshakeAgeSeconds
			}
		}
	}
	for k, state := range m.checks {
		if !seen[k] {
			m.checkState.delete(k[0], k[1], state)
			m.checkHealthy.delete(k[0], k[1])
			iface, peer := splitTarget(k[1])
			m.handshakeAge.delete(iface, peer)
			if k[0] == wire.KindPathMTU {
				m.setPaths(k[1], nil)
			}
			delete(m.checks, k)
		}
	}
}

// setPaths sets a tunnel's path MTU series from its path-mtu check, and
// deletes those it no longer has (a path not measured, a clamp removed, an
// uplink that changed). Called with m.mu held.
func (m *Metrics) setPaths(tunnel string, info *wire.PathMTUInfo) {
	for _, l := range m.paths[tunnel] {
		m.pathMTU.delete(l[:]...)
		m.clampMTU.delete(l[:]...)
	}
	delete(m.paths, tunnel)
	if info == nil {
		m.mtuChecks.delete(tunnel)
		return
	}
	m.mtuChecks.with(tunnel).v = float64(info.Checks)
	for _, p := range []struct {
		name string
		info *wire.PathInfo
	}{{"tunnel", info.Tunnel}, {"uplink", info.Uplink}} {
		if p.info == nil || p.info.PathMTU == 0 {
			continue
		}
		l := [3]string{tunnel, p.info.Link, p.name}
		m.paths[tunnel] = append(m.paths[tunnel], l)
		m.pathMTU.with(l[:]...).v = float64(p.info.PathMTU)
		if p.info.ClampMTU > 0 {
			m.clampMTU.with(l[:]...).v = float64(p.info.ClampMTU)
		}
	}
}

func splitTarget(t string) (iface, peer string) {
	iface, peer, _ = strings.Cut(t, "/")
	return iface, peer
}

// ObserveProbe records one active probe (agent.Options.OnProbe).
func (m *Metrics) ObserveProbe(p core.ProbeSample) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.probeDuration.observe(m.probeDuration.with(p.Kind, p.Target, p.Result), p.Duration.Seconds())
}

// ObserveEvent counts an event by kind, and derives the remediation and
// offload-drift counters from events of kind "action" and "offload-drift",
// so that the wiring can feed every event here and call nothing else.
func (m *Metrics) ObserveEvent(e core.Event) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.events.with(e.Kind).v++
	switch e.Kind {
	case "action":
		m.remediations.with(e.Action, e.Result).v++
	case "offload-drift":
		m.offloadDrift.with(e.Target).v++
	case "recovered":
		if e.Target == "outbox" {
			break // the outbox's own trouble: not a target's outage
		}
		kind := wire.KindWorkload
		if strings.Contains(e.Target, "/") {
			kind = wire.KindPeer
		}
		m.incidentDur.observe(m.incidentDur.with(kind), e.Duration)
	case "offload-fight":
		// A fight reports its flips in batches (wire.EventOffloadFight).
		switch n := e.Evidence["new_fixes"].(type) {
		case int:
			m.offloadDrift.with(e.Target).v += float64(n)
		case float64:
			m.offloadDrift.with(e.Target).v += n
		}
	}
}

// historyMetrics are the counters read from the history at a scrape.
func historyMetrics(read func() []TargetTotal) []*vec {
	if read == nil {
		return nil
	}
	dark := newVec(typeCounter, "edgeheal_dark_seconds_total",
		"Seconds a target was dark (from its last good observation to its first good one again), since the node's history began.", "kind", "target")
	degraded := newVec(typeCounter, "edgeheal_degraded_seconds_total",
		"Seconds a target was given up on or broken in a way edgeheal cannot fix, since the node's history began.", "kind", "target")
	incidents := newVec(typeCounter, "edgeheal_incidents_total", "Incidents of a target since the node's history began.", "kind", "target")
	for _, t := range read() {
		dark.with(t.Kind, t.Target).v = t.DarkSeconds
		degraded.with(t.Kind, t.Target).v = t.DegradedSeconds
		incidents.with(t.Kind, t.Target).v = float64(t.Incidents)
	}
	return []*vec{dark, degraded, incidents}
}

// ConfigLoaded records the result of a configuration load or reload.
func (m *Metrics) ConfigLoaded(ok bool, at time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if ok {
		m.reloadOK.with().v = 1
		m.reloadTime.with().v = float64(at.UnixNano()) / 1e9
		return
	}
	m.reloadOK.with().v = 0
}
