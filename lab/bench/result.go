package bench

import (
	"math"
	"slices"
	"sort"
	"time"

	"github.com/edgeheal/edgeheal/lab"
)

// Result is one contender in one scenario, on its own lab.
type Result struct {
	Scenario  string    `json:"scenario"`
	Contender string    `json:"contender"`
	Lab       string    `json:"lab"`                 // the lab's prefix
	Start     time.Time `json:"start"`               // contender started (S1) or the lab was up (others)
	FaultAt   time.Time `json:"fault_at,omitzero"`   // the (first) fault
	RestoreAt time.Time `json:"restore_at,omitzero"` // the path returned (blackhole over, broker back)
	End       time.Time `json:"end"`

	// DetectSeconds is the time from the fault to the contender's first
	// sign of noticing (an incident or drift event, or its first action).
	DetectSeconds *float64 `json:"detect_seconds,omitempty"`
	Detection     string   `json:"detection,omitempty"`
	// OutageSeconds is the longest telemetry outage from the fault on: the
	// send time of the first lost message to the arrival of the first
	// delivered one. OutageOngoing: it had not ended when the scenario did
	// (OutageSeconds is then a lower bound).
	OutageSeconds      float64 `json:"outage_seconds"`
	OutageOngoing      bool    `json:"outage_ongoing,omitempty"`
	TotalOutageSeconds float64 `json:"total_outage_seconds"`
	Outages            int     `json:"outages"`
	// RecoverSeconds is fault (or, with a restore, restore) to the first
	// delivered telemetry after it; nil: never within the scenario.
	RecoverSeconds *float64 `json:"recover_seconds,omitempty"`
	Sent           int      `json:"sent"`
	Delivered      int      `json:"delivered"`
	LossPct        float64  `json:"loss_pct"`

	Actions         []Action `json:"actions,omitempty"`
	NeedlessActions int      `json:"needless_actions"`

	// S2: offload exposure after each re-plug, from the link's creation to
	// TX checksum offload seen off; Unfixed counts re-plugs it stayed on.
	// ExposureKernelMs is the same by the kernel's clock, from the request
	// that created the link to the fix (ReplugExposure): one per fixed
	// re-plug when the kernel's trace could be read, else none.
	ExposureMs       []float64 `json:"exposure_ms,omitempty"`
	ExposureKernelMs []float64 `json:"exposure_kernel_ms,omitempty"`
	// ExposureSplit divides a kernel-clock exposure, for each re-plug
	// where the trace tells the two apart (not always as many as
	// ExposureKernelMs).
	ExposureSplit   []ExposureSplit `json:"exposure_split,omitempty"`
	ExposureUnfixed int             `json:"exposure_unfixed,omitempty"`
	// S3: restore to the first new handshake.
	HandshakeAfterRestoreSeconds *float64 `json:"handshake_after_restore_seconds,omitempty"`
	// S5: events that happened during the outage and reached the cloud after it.
	EventsQueued int `json:"events_queued,omitempty"`
	// QueuedDeliveredSeconds: the broker's return to the last of them
	// arriving at the cloud.
	QueuedDeliveredSeconds float64 `json:"queued_delivered_seconds,omitempty"`

	// S8: each kind of bulk transfer, and the fault to the arrival at the
	// cloud of the agent's first event after it (edgeheal: its own
	// reporting over the uplink).
	Transfers     []TransferResult `json:"transfers,omitempty"`
	ReportSeconds *float64         `json:"report_seconds,omitempty"`

	// Delivered telemetry per second of send time, from Start.
	Series []int `json:"series"`
	// FaultOffset is FaultAt - Start in seconds: charts align on it.
	FaultOffset float64 `json:"fault_offset_seconds"`

	Events []Event  `json:"events,omitempty"` // edgeheal's reports received by the cloud
	Notes  []string `json:"notes,omitempty"`
	Error  string   `json:"error,omitempty"`
	Marks  []Mark   `json:"marks,omitempty"` // faults on the chart
}

// Mark is a moment worth a line on the chart.
type Mark struct {
	At    float64 `json:"at_seconds"` // from FaultAt
	Label string  `json:"label"`
}

func seconds(d time.Duration) float64 { return math.Round(d.Seconds()*1000) / 1000 }

func ptr(f float64) *float64 { return &f }

// Series buckets samples by send time into per-second counts of messages
// delivered within lateAfter, from start to end.
func Series(samples []lab.Sample, start, end time.Time, lateAfter time.Duration) []int {
	// Only whole seconds whose messages have all been judged.
	n := int((end.Sub(start) - lateAfter) / time.Second)
	if n <= 0 {
		return nil
	}
	out := make([]int, n)
	for _, s := range samples {
		i := int(s.Sent.Sub(start) / time.Second)
		if i < 0 || i >= n || s.Received.IsZero() || s.Received.Sub(s.Sent) > lateAfter {
			continue
		}
		out[i]++
	}
	return out
}

// fillTelemetry sets loss, outages and recovery from the lab's telemetry.
// The outages that count are those still open at from (the fault) or
// starting after it.
func fillTelemetry(r *Result, st lab.Stats, from, recoverFrom, now time.Time) {
	r.Sent, r.Delivered, r.LossPct = st.Sent, st.Received, math.Round(st.LossPct*1000)/1000
	for _, o := range st.Outages {
		if !o.End.IsZero() && o.End.Before(from) {
			continue
		}
		d := o.Duration()
		if o.End.IsZero() {
			d = now.Sub(o.Start)
			r.OutageOngoing = true
		}
		r.Outages++
		r.TotalOutageSeconds += seconds(d)
		r.OutageSeconds = max(r.OutageSeconds, seconds(d))
		if !o.End.IsZero() && r.RecoverSeconds == nil && !o.End.Before(recoverFrom) {
			r.RecoverSeconds = ptr(seconds(o.End.Sub(recoverFrom)))
		}
	}
	r.TotalOutageSeconds = math.Round(r.TotalOutageSeconds*1000) / 1000
}

// Percentile is the nearest-rank percentile p (0–100) of xs.
func Percentile(xs []float64, p float64) float64 {
	if len(xs) == 0 {
		return math.NaN()
	}
	s := slices.Clone(xs)
	sort.Float64s(s)
	k := int(math.Ceil(p/100*float64(len(s)))) - 1
	return s[min(max(k, 0), len(s)-1)]
}

// Ratio is a/b, or nil when b is zero (nothing to compare against).
// Tables show it with 3 significant digits.
func Ratio(a, b float64) *float64 {
	if b == 0 {
		return nil
	}
	return ptr(a / b)
}

// ExposureSplit is one re-plug's kernel-clock exposure in two: until the
// link was made (the lab's last netdevice event before another process's
// first: the kernel's and the lab's time) and the rest (the agent waking
// to the new link, and its fix).
type ExposureSplit struct {
	MakingMs float64 `json:"making_ms"`
	AgentMs  float64 `json:"agent_ms"`
}
