package fleetsim

import (
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"time"

	"github.com/edgeheal/edgeheal/configs"
)

// Result is what one simulation measured. Times are seconds from the
// broker's return (its listening again).
type Result struct {
	Name           string          `json:"name"`
	Nodes          int             `json:"nodes"`
	EventsPerNode  int             `json:"events_per_node"`
	OutageSeconds  float64         `json:"outage_seconds"`
	Reconnect      ReconnectLimits `json:"reconnect"`
	MemoryOutboxes bool            `json:"memory_outboxes"` // the process's file limit did not allow a log per node

	// MQTT connects the broker accepted after its return: the peak in one
	// second (from its log), and all of them.
	PeakConnectsPerSecond int `json:"peak_connects_per_second"`
	ConnectsAfterReturn   int `json:"connects_after_return"`
	// TCP connection attempts of the fleet (checks of the broker's port
	// and full connects), counted by the nodes: the peak in one second
	// after the return and during the outage, and all after the return.
	PeakDialsPerSecond             int `json:"peak_dials_per_second"`
	PeakDialsPerSecondDuringOutage int `json:"peak_dials_per_second_during_outage"`
	DialsAfterReturn               int `json:"dials_after_return"`

	// AllEventsSeconds is when the last node's last event arrived; -1 if
	// some never did within the wait.
	AllEventsSeconds float64 `json:"all_events_seconds"`
	NodeP50Seconds   float64 `json:"node_p50_seconds"` // per node: its last event
	NodeP95Seconds   float64 `json:"node_p95_seconds"`
	NodeMaxSeconds   float64 `json:"node_max_seconds"`

	Events     int `json:"events"`
	Delivered  int `json:"delivered"`  // distinct events that arrived
	Duplicates int `json:"duplicates"` // arrivals beyond the first
	// Lost are the events that had not arrived when the wait (Options.Wait)
	// ended: lost to the cloud as far as this run can tell.
	Lost       int `json:"lost"`
	OutOfOrder int `json:"out_of_order_nodes"` // nodes whose first arrivals are not in sequence order

	// The design targets (docs/performance.md, "A fleet of nodes"): attempts per second under N / 10 s,
	// every event within 15 s of the return, none lost.
	AttemptsLimitPerSecond float64 `json:"attempts_limit_per_second"`
	AttemptsTargetMet      bool    `json:"attempts_target_met"`
	ArrivalTargetMet       bool    `json:"arrival_target_met"`
	NoLossTargetMet        bool    `json:"no_loss_target_met"`
}

// ReconnectLimits are report.mqtt.reconnect as written in a config.
type ReconnectLimits struct {
	ProbeInterval string `json:"probe_interval"`
	ConnectJitter string `json:"connect_jitter"`
	MinDelay      string `json:"min_delay"`
	MaxDelay      string `json:"max_delay"`
	StableAfter   string `json:"stable_after"`
	StartJitter   string `json:"start_jitter"`
}

func limits(r configs.Reconnect) ReconnectLimits {
	return ReconnectLimits{r.ProbeInterval.String(), r.ConnectJitter.String(), r.MinDelay.String(),
		r.MaxDelay.String(), r.StableAfter.String(), r.StartJitter.String()}
}

// ArrivalTarget and the attempts target are the fleet's design targets.
const ArrivalTarget = 15 * time.Second

func (f *fleet) result(back time.Time, arrivals []arrival, brokerLog string) Result {
	o := f.opts
	r := Result{
		Name: o.Name, Nodes: o.Nodes, EventsPerNode: o.EventsPerNode, OutageSeconds: o.Outage.Seconds(),
		Reconnect: limits(o.Reconnect), MemoryOutboxes: f.memory,
		PeakDialsPerSecond: f.dials.peakSince(back), DialsAfterReturn: f.dials.total,
		AttemptsLimitPerSecond: float64(o.Nodes) / 10,
	}
	r.PeakConnectsPerSecond, r.ConnectsAfterReturn = connectsPerSecond(brokerLog, back)
	want := f.allIDs()
	r.Events = len(want)
	first := map[string]arrival{}
	for _, a := range arrivals {
		if _, ok := want[a.id]; !ok {
			continue
		}
		if _, seen := first[a.id]; seen {
			r.Duplicates++
			continue
		}
		first[a.id] = a
	}
	r.Delivered, r.Lost = len(first), len(want)-len(first)
	var perNode []time.Duration
	for _, n := range f.nodes {
		last, complete, ordered := nodeArrivals(n.ids, first)
		if complete {
			perNode = append(perNode, last.Sub(back))
		}
		if !ordered {
			r.OutOfOrder++
		}
	}
	slices.Sort(perNode)
	if len(perNode) > 0 {
		r.NodeP50Seconds = quantile(perNode, 0.5).Seconds()
		r.NodeP95Seconds = quantile(perNode, 0.95).Seconds()
		r.NodeMaxSeconds = perNode[len(perNode)-1].Seconds()
	}
	r.AllEventsSeconds = -1
	if r.Lost == 0 {
		r.AllEventsSeconds = r.NodeMaxSeconds
	}
	r.AttemptsTargetMet = float64(r.PeakConnectsPerSecond) < r.AttemptsLimitPerSecond
	r.ArrivalTargetMet = r.Lost == 0 && r.AllEventsSeconds <= ArrivalTarget.Seconds()
	r.NoLossTargetMet = r.Lost == 0
	return r
}

// nodeArrivals is when a node's last event first arrived, whether all of
// them did, and whether they arrived in the order of their sequence numbers.
func nodeArrivals(ids []string, first map[string]arrival) (last time.Time, complete, ordered bool) {
	var got []arrival
	for _, id := range ids {
		if a, ok := first[id]; ok {
			got = append(got, a)
			if a.at.After(last) {
				last = a.at
			}
		}
	}
	slices.SortStableFunc(got, func(a, b arrival) int { return a.at.Compare(b.at) })
	ordered = true
	for i := 1; i < len(got); i++ {
		if got[i].seq < got[i-1].seq {
			ordered = false
		}
	}
	return last, len(got) == len(ids), ordered
}

// connectLine is how mosquitto 2.0.11 (Debian 12, 2026-12) logs a client's
// CONNECT: "<unix seconds>: New client connected from <addr> as <id> (p2, c1, k30)."
var connectLine = regexp.MustCompile(`(?m)^(\d+): New client connected from \S+ as edgeheal-fleet-\d+`)

// connectsPerSecond counts the fleet's MQTT connects in a mosquitto log
// from since on: the peak in one second, and all.
func connectsPerSecond(log string, since time.Time) (peak, total int) {
	perSec := map[int64]int{}
	for _, m := range connectLine.FindAllStringSubmatch(log, -1) {
		sec, err := strconv.ParseInt(m[1], 10, 64)
		if err != nil || sec < since.Unix() {
			continue
		}
		perSec[sec]++
		total++
	}
	for _, n := range perSec {
		peak = max(peak, n)
	}
	return peak, total
}

// quantile of sorted durations, nearest rank.
func quantile(sorted []time.Duration, q float64) time.Duration {
	i := int(q*float64(len(sorted))+0.999999) - 1
	return sorted[max(0, min(i, len(sorted)-1))]
}

// verdict is a table cell for a target.
func verdict(met bool) string {
	if met {
		return "met"
	}
	return "**missed**"
}

func seconds(s float64) string {
	if s < 0 {
		return "never"
	}
	return fmt.Sprintf("%.1f s", s)
}
