package web

import (
	"runtime"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/edgeheal/edgeheal/fleet"
)

// Collector makes the fleet's metrics from the store at each scrape.
//
// Cardinality, for N nodes in S sites (docs/fleet.md, "Metrics"): two
// series per node (state, last seen), 5·S for the fleet counts, a few
// dozen for the view itself; per-node incident and last-hour event series
// exist only for nodes that have them, so a quiet fleet of 10,000 nodes is
// about 20,000 series.
type Collector struct {
	store   *fleet.Store
	version string
	now     func() time.Time
}

var (
	descBuild      = prometheus.NewDesc("edgeheal_fleet_build_info", "Always 1.", []string{"version", "goversion"}, nil)
	descNodes      = prometheus.NewDesc("edgeheal_fleet_nodes", "Nodes by site and state.", []string{"site", "state"}, nil)
	descNodeState  = prometheus.NewDesc("edgeheal_fleet_node_state", "1 for the node's current state.", []string{"node", "site", "state"}, nil)
	descLastSeen   = prometheus.NewDesc("edgeheal_fleet_node_last_seen_timestamp_seconds", "When the node itself last said something (status or event).", []string{"node", "site"}, nil)
	descNodeOpen   = prometheus.NewDesc("edgeheal_fleet_node_open_incidents", "Open incidents of a node by kind (peer, workload) and state (open, gave-up); only nodes that have any.", []string{"node", "site", "kind", "state"}, nil)
	descNodeEvents = prometheus.NewDesc("edgeheal_fleet_node_events_last_hour", "Events of a node in the last hour by kind; only nodes that sent any.", []string{"node", "site", "kind"}, nil)
	descOpen       = prometheus.NewDesc("edgeheal_fleet_open_incidents", "Open incidents in the fleet by kind.", []string{"kind"}, nil)
	descEvents     = prometheus.NewDesc("edgeheal_fleet_events_total", "Events applied since the view started, by kind.", []string{"kind"}, nil)
	descMessages   = prometheus.NewDesc("edgeheal_fleet_messages_total", "Messages received by type (status, will, event) and result (applied, stale, duplicate, invalid, removed).", []string{"type", "result"}, nil)
	descConnected  = prometheus.NewDesc("edgeheal_fleet_connected", "1 while the view is connected and subscribed to the broker.", nil, nil)
	descLag        = prometheus.NewDesc("edgeheal_fleet_lag_seconds", "The largest delay, over the last 10 s, between a live message's ts and its arrival.", nil, nil)
	descRate       = prometheus.NewDesc("edgeheal_fleet_messages_per_second", "Messages received per second over the last 10 s.", nil, nil)
	descLastMsg    = prometheus.NewDesc("edgeheal_fleet_last_message_timestamp_seconds", "When the view last received a message.", nil, nil)
)

// NewCollector returns the collector of store's metrics.
func NewCollector(store *fleet.Store, version string, now func() time.Time) *Collector {
	return &Collector{store: store, version: version, now: now}
}

// Describe sends every descriptor.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descBuild, descNodes, descNodeState, descLastSeen, descNodeOpen, descNodeEvents,
		descOpen, descEvents, descMessages, descConnected, descLag, descRate, descLastMsg} {
		ch <- d
	}
}

// Collect reads the store once and sends every metric.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	now := c.now()
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	gauge(descBuild, 1, c.version, runtime.Version())
	bySite := map[[2]string]int{}
	c.store.Each(now, func(n fleet.NodeMetrics) {
		bySite[[2]string{n.Site, n.State}]++
		gauge(descNodeState, 1, n.Name, n.Site, n.State)
		if !n.LastSeen.IsZero() {
			gauge(descLastSeen, float64(n.LastSeen.UnixMilli())/1e3, n.Name, n.Site)
		}
		for k, v := range n.Open {
			gauge(descNodeOpen, float64(v), n.Name, n.Site, k[0], k[1])
		}
		for k, v := range n.LastHour {
			gauge(descNodeEvents, float64(v), n.Name, n.Site, k)
		}
	})
	sites := map[string]bool{}
	for k, v := range bySite {
		sites[k[0]] = true
		gauge(descNodes, float64(v), k[0], k[1])
	}
	for site := range sites { // every state of a known site, 0 included: alerts divide by them
		for _, st := range fleet.States {
			if _, ok := bySite[[2]string{site, st}]; !ok {
				gauge(descNodes, 0, site, st)
			}
		}
	}
	h := c.store.Health(now)
	for _, kind := range []string{"peer", "workload"} {
		gauge(descOpen, float64(h.OpenIncidents[kind]), kind)
	}
	for k, v := range h.OpenIncidents {
		if k != "peer" && k != "workload" {
			gauge(descOpen, float64(v), k)
		}
	}
	for k, v := range h.Events {
		ch <- prometheus.MustNewConstMetric(descEvents, prometheus.CounterValue, float64(v), k)
	}
	for k, v := range h.Messages {
		typ, res, _ := strings.Cut(k, "/")
		ch <- prometheus.MustNewConstMetric(descMessages, prometheus.CounterValue, float64(v), typ, res)
	}
	connected := 0.0
	if h.Connected {
		connected = 1
	}
	gauge(descConnected, connected)
	gauge(descLag, h.LagSeconds)
	gauge(descRate, h.MessageRate)
	if !h.LastMessage.IsZero() {
		gauge(descLastMsg, float64(h.LastMessage.UnixMilli())/1e3)
	}
}
