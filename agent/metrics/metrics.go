// Package metrics holds edgeheal's Prometheus metrics: what the checks,
// probes and events say, in base units, on a registry of their own. It
// only reads what it is handed; nothing in it decides or changes anything.
package metrics

import (
	"net/http"
	"runtime"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/edgeheal/edgeheal/agent"
)

// OutboxStats is the part of the outbox the metrics read.
type OutboxStats interface {
	Depth() int
	Dropped() uint64
	MemoryOnly() int // queued events not on disk yet
	Damaged() uint64 // bytes of damaged log moved aside since start
}

// Metrics are edgeheal's Prometheus metrics, on a registry of their own
// (plus the Go and process collectors). Names start with edgeheal_ and use
// base units (seconds, totals). Every method is safe for concurrent use and
// cheap enough to call from the control loop.
type Metrics struct {
	reg *prometheus.Registry

	checkState    *prometheus.GaugeVec
	checkHealthy  *prometheus.GaugeVec
	handshakeAge  *prometheus.GaugeVec
	probeDuration *prometheus.HistogramVec
	remediations  *prometheus.CounterVec
	offloadDrift  *prometheus.CounterVec
	events        *prometheus.CounterVec
	reloadOK      prometheus.Gauge
	reloadTime    prometheus.Gauge

	mu     sync.Mutex
	checks map[[2]string]string // (kind, target) → state, to delete stale series
}

// Options wire the metrics that read live values.
type Options struct {
	Version string
	Outbox  OutboxStats // nil: outbox metrics stay absent
	MQTT    func() bool // connected; nil: absent
}

// New registers every metric on a new registry.
func New(opts Options) *Metrics {
	m := &Metrics{reg: prometheus.NewRegistry(), checks: map[[2]string]string{}}
	m.reg.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	)
	bi := prometheus.NewGauge(prometheus.GaugeOpts{
		Name:        "edgeheal_build_info",
		Help:        "Always 1; labels give the agent version and the Go version it was built with.",
		ConstLabels: prometheus.Labels{"version": opts.Version, "goversion": runtime.Version()},
	})
	bi.Set(1)
	m.checkState = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "edgeheal_check_state",
		Help: "1 for the current state of each check (ok, suspect, down, healing, degraded, ...), one series per state seen.",
	}, []string{"kind", "target", "state"})
	m.checkHealthy = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "edgeheal_check_healthy",
		Help: "1 if the check is healthy, 0 if not.",
	}, []string{"kind", "target"})
	m.handshakeAge = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "edgeheal_wireguard_handshake_age_seconds",
		Help: "Seconds since the last WireGuard handshake of a peer.",
	}, []string{"interface", "peer"})
	m.probeDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "edgeheal_probe_duration_seconds",
		Help:    "Duration of active probes (through a tunnel, from a pod namespace).",
		Buckets: []float64{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5},
	}, []string{"kind", "target", "result"})
	m.remediations = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "edgeheal_remediations_total",
		Help: "Remediation actions taken, by action (rung) and result.",
	}, []string{"action", "result"})
	m.offloadDrift = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "edgeheal_offload_drift_total",
		Help: "Times TX checksum offload was found back on for an uplink.",
	}, []string{"link"})
	m.events = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "edgeheal_events_total",
		Help: "Events queued for the cloud, by kind.",
	}, []string{"kind"})
	m.reloadOK = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "edgeheal_config_last_reload_successful",
		Help: "1 if the last configuration load or reload succeeded, 0 if it failed (the previous config stays in force).",
	})
	m.reloadTime = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "edgeheal_config_last_reload_success_timestamp_seconds",
		Help: "Unix time of the last successful configuration load or reload.",
	})
	m.reg.MustRegister(bi, m.checkState, m.checkHealthy, m.handshakeAge, m.probeDuration,
		m.remediations, m.offloadDrift, m.events, m.reloadOK, m.reloadTime)
	if opts.Outbox != nil {
		m.reg.MustRegister(outboxMetrics(opts.Outbox)...)
	}
	if opts.MQTT != nil {
		connected := opts.MQTT
		m.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "edgeheal_mqtt_connected",
			Help: "1 while the reporting broker connection is up.",
		}, func() float64 {
			if connected() {
				return 1
			}
			return 0
		}))
	}
	return m
}

// outboxMetrics are the metrics read from the outbox.
func outboxMetrics(ob OutboxStats) []prometheus.Collector {
	return []prometheus.Collector{
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "edgeheal_outbox_depth",
			Help: "Events queued on disk, not yet acknowledged by the broker.",
		}, func() float64 { return float64(ob.Depth()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "edgeheal_outbox_dropped_total",
			Help: "Events dropped, least important first, because the outbox was full (kept across restarts).",
		}, func() float64 { return float64(ob.Dropped()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "edgeheal_outbox_memory_only",
			Help: "Queued events kept in memory only, because the state directory cannot be written.",
		}, func() float64 { return float64(ob.MemoryOnly()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "edgeheal_outbox_damaged_bytes_total",
			Help: "Bytes of damaged outbox log moved aside (the records around them kept) since the agent started.",
		}, func() float64 { return float64(ob.Damaged()) }),
	}
}

// Registry is the metrics' own registry.
func (m *Metrics) Registry() *prometheus.Registry { return m.reg }

// Handler serves the registry in the Prometheus exposition formats.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{Registry: m.reg})
}

// SetChecks sets the check gauges from the agent's current checks; series of
// checks that disappeared (or states left) are deleted. A peer check also
// sets its handshake age, while the peer has a handshake.
func (m *Metrics) SetChecks(checks []agent.Check) {
	m.mu.Lock()
	defer m.mu.Unlock()
	seen := map[[2]string]bool{}
	for _, c := range checks {
		k := [2]string{c.Kind, c.Target}
		seen[k] = true
		if old, ok := m.checks[k]; ok && old != c.State {
			m.checkState.DeleteLabelValues(c.Kind, c.Target, old)
		}
		m.checks[k] = c.State
		m.checkState.WithLabelValues(c.Kind, c.Target, c.State).Set(1)
		h := 0.0
		if c.Healthy {
			h = 1
		}
		m.checkHealthy.WithLabelValues(c.Kind, c.Target).Set(h)
		if c.Peer != nil {
			iface, peer := splitTarget(c.Target)
			if c.Peer.LastHandshake.IsZero() {
				m.handshakeAge.DeleteLabelValues(iface, peer)
			} else {
				m.handshakeAge.WithLabelValues(iface, peer).Set(c.Peer.HandshakeAgeSeconds)
			}
		}
	}
	for k, state := range m.checks {
		if !seen[k] {
			m.checkState.DeleteLabelValues(k[0], k[1], state)
			m.checkHealthy.DeleteLabelValues(k[0], k[1])
			iface, peer := splitTarget(k[1])
			m.handshakeAge.DeleteLabelValues(iface, peer)
			delete(m.checks, k)
		}
	}
}

func splitTarget(t string) (iface, peer string) {
	iface, peer, _ = strings.Cut(t, "/")
	return iface, peer
}

// ObserveProbe records one active probe (agent.Options.OnProbe).
func (m *Metrics) ObserveProbe(p agent.ProbeSample) {
	m.probeDuration.WithLabelValues(p.Kind, p.Target, p.Result).Observe(p.Duration.Seconds())
}

// ObserveEvent counts an event by kind, and derives the remediation and
// offload-drift counters from events of kind "action" and "offload-drift",
// so that the wiring can feed every event here and call nothing else.
func (m *Metrics) ObserveEvent(e agent.Event) {
	m.events.WithLabelValues(e.Kind).Inc()
	switch e.Kind {
	case "action":
		m.remediations.WithLabelValues(e.Action, e.Result).Inc()
	case "offload-drift":
		m.offloadDrift.WithLabelValues(e.Target).Inc()
	case "offload-fight":
		// A fight reports its flips in batches (agent.EventOffloadFight).
		switch n := e.Evidence["new_fixes"].(type) {
		case int:
			m.offloadDrift.WithLabelValues(e.Target).Add(float64(n))
		case float64:
			m.offloadDrift.WithLabelValues(e.Target).Add(n)
		}
	}
}

// ConfigLoaded records the result of a configuration load or reload.
func (m *Metrics) ConfigLoaded(ok bool, at time.Time) {
	if ok {
		m.reloadOK.Set(1)
		m.reloadTime.Set(float64(at.UnixNano()) / 1e9)
		return
	}
	m.reloadOK.Set(0)
}
