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
// exist only for nodes that have them, and their kinds come from closed
// sets (fleet.EventKinds, fleet.IncidentKinds: anything else is "other"),
// so no node can make more than a bounded number of series.
type Collector struct {
	store   *fleet.Store
	version string
	now     func() time.Time
	sub     Subscription
}

// Subscription is how this instance gets the events, for the alert rules
// that must add up several instances: Events is "shared" (a share group:
// the instances of one Group each get a part) or "all" (this instance
// gets every event; Group is its own client id).
type Subscription struct {
	Events string
	Group  string
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
	descMessages   = prometheus.NewDesc("edgeheal_fleet_messages_total", "Messages received by type (status, will, event) and result (applied, stale, duplicate, invalid, removed, failed).", []string{"type", "result"}, nil)
	descConnected  = prometheus.NewDesc("edgeheal_fleet_connected", "1 while the view is connected and subscribed to the broker.", nil, nil)
	descLag        = prometheus.NewDesc("edgeheal_fleet_lag_seconds", "The median delay of the live messages of the last 10 s, each above its node's clock offset, outbox replays left out.", nil, nil)
	descLagMax     = prometheus.NewDesc("edgeheal_fleet_lag_max_seconds", "The largest raw delay (arrival - ts) of the live messages of the last 10 s, clock offsets included.", nil, nil)
	descSub        = prometheus.NewDesc("edgeheal_fleet_subscription_info", "Always 1: how this instance gets the events (events: shared or all) and its group (the share group, or its client id).", []string{"events", "group"}, nil)
	descRate       = prometheus.NewDesc("edgeheal_fleet_messages_per_second", "Messages received per second over the last 10 s.", nil, nil)
	descLastMsg    = prometheus.NewDesc("edgeheal_fleet_last_message_timestamp_seconds", "When the view last received a message.", nil, nil)
)

// NewCollector returns the collector of store's metrics.
func NewCollector(store *fleet.Store, version string, now func() time.Time, sub Subscription) *Collector {
	if sub.Events == "" {
		sub.Events = "all"
	}
	return &Collector{store: store, version: version, now: now, sub: sub}
}

// Describe sends every descriptor.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descBuild, descNodes, descNodeState, descLastSeen, descNodeOpen, descNodeEvents,
		descOpen, descEvents, descMessages, descConnected, descLag, descLagMax, descSub, descRate, descLastMsg} {
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
	for _, kind := range fleet.IncidentKinds {
		gauge(descOpen, float64(h.OpenIncidents[kind]), kind)
	}
	for _, k := range fleet.EventKinds {
		ch <- prometheus.MustNewConstMetric(descEvents, prometheus.CounterValue, float64(h.Events[k]), k)
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
	gauge(descLagMax, h.LagMaxSeconds)
	gauge(descSub, 1, c.sub.Events, c.sub.Group)
	gauge(descRate, h.MessageRate)
	if !h.LastMessage.IsZero() {
		gauge(descLastMsg, float64(h.LastMessage.UnixMilli())/1e3)
	}
}
