package fleet

import (
	"slices"
	"time"
	"unicode/utf8"

	"github.com/edgeheal/edgeheal/wire"
)

// What the view keeps of one node is bounded whatever the node sends:
// memory, the series of /metrics and the size of a node's page do not
// grow on one node's say-so (docs/fleet.md, "What it keeps per node").
const (
	keepEvents       = 20      // recent events shown on a node's page
	keepActions      = 5       // last actions
	keepIDs          = 64      // event ids remembered to drop duplicates (as hashes)
	maxOpenIncidents = 32      // open incidents; more are counted, not kept
	maxChecks        = 32      // checks of the last status
	maxHistTargets   = 16      // targets of the retained history
	maxHistIncidents = 20      // incidents of the retained history (what a node publishes)
	historyDays      = 30      // days of the retained history kept: what the console charts
	historyHours     = 48      // hours of the retained history kept
	maxText          = 240     // bytes kept of any string a node sends (target, summary, detail, ...)
	maxName          = 128     // bytes kept of a name (site, kind, target, action, version)
	maxFailure       = 8 << 10 // bytes kept of the last panic and its stack (Health.LastFailure)
	bucketSize       = 10 * time.Minute
	countWindow      = 24 * time.Hour
)

// EventKinds are the event kinds the view counts by name; any other kind
// counts as KindOther, so that one node cannot make unbounded series.
var EventKinds = []string{"incident", "recovered", "action", "gave-up", "degraded", "offload-drift", "offload-fight",
	"component", "listen-port", KindOther}

// KindOther is the label of every event kind that is not in EventKinds,
// and of every incident kind that is not in IncidentKinds.
const KindOther = "other"

// IncidentKinds are the incident kinds the view counts by name.
var IncidentKinds = []string{wire.KindPeer, wire.KindWorkload, wire.KindPathMTU, KindOther}

// kindIndex is the index of kind in EventKinds (KindOther's for any other).
func kindIndex(kind string) int {
	for i, k := range EventKinds[:len(EventKinds)-1] {
		if k == kind {
			return i
		}
	}
	return len(EventKinds) - 1
}

// KindLabel is the event kind as a metric label: itself if known, else
// KindOther.
func KindLabel(kind string) string { return EventKinds[kindIndex(kind)] }

// IncidentLabel is an incident kind as a metric label.
func IncidentLabel(kind string) string {
	if slices.Contains(IncidentKinds, kind) {
		return kind
	}
	return KindOther
}

// clip cuts s to at most n bytes on a rune boundary, marking the cut.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	cut := n - len("…")
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}
