package fleet

import (
	"encoding/hex"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/edgeheal/edgeheal/wire"
)

// nodeHistory is a node's retained history (wire.History) as the view
// keeps it: the last historyDays days and historyHours hours of the node
// as a whole, its targets' totals and its newest incidents, in a compact
// form whose strings the store shares between nodes.
type nodeHistory struct {
	ts, since int64 // unix milliseconds
	day0      int64 // unix day of days[0]
	days      []dayRec
	hour0     int64 // unix hour of hours[0]
	hours     []hourRec
	targets   []histTarget
	incidents []histIncident // newest first, as published
}

type dayRec struct{ healthy, dark, degraded, incidents uint32 }

type hourRec struct{ healthy, dark, degraded, incidents uint16 }

type histTarget struct {
	kind, target, repairs     string // repairs: "rung=n,rung=n", shared
	healthy, dark, degraded   uint32
	incidents, gaveUps        uint32
	p50, p95, maxOutage, mttr float32
}

// histIncident is an incident of the history: its kind, target,
// diagnosis, the rung that healed it and the rungs tried (joined by ",")
// are one string the store shares (joined by unitSep), and its id, when
// it is the agent's (24 hex digits), 12 bytes in place: an incident costs
// 48 bytes. Another id is the string's sixth part.
type histIncident struct {
	start        int64 // unix milliseconds
	duration     float32
	open, gaveUp bool
	hexID        bool
	id           [12]byte
	what         string // kind, target, diagnosis, healed by, repairs[, id]
}

const (
	daySeconds  = 86400
	hourSeconds = 3600
)

// compactHistory keeps what the console shows of h, every string shared
// through intern and clipped, every list bounded.
func (s *Store) compactHistory(h wire.History) *nodeHistory {
	nh := &nodeHistory{ts: h.TS.UnixMilli(), since: h.Since.UnixMilli()}
	nh.day0, nh.days = compactDays(h.Days)
	nh.hour0, nh.hours = compactHours(h.Hours)
	nh.targets = make([]histTarget, 0, min(len(h.Targets), maxHistTargets))
	for i, t := range h.Targets {
		if i == maxHistTargets {
			break
		}
		nh.targets = append(nh.targets, histTarget{kind: s.intern(clip(t.Kind, maxName)), target: s.intern(clip(t.Target, maxName)),
			repairs: s.intern(joinRepairs(t.Repairs)), healthy: sec32(t.HealthySeconds), dark: sec32(t.DarkSeconds), degraded: sec32(t.DegradedSeconds),
			incidents: uint32(max(t.Incidents, 0)), gaveUps: uint32(max(t.GaveUps, 0)), p50: float32(t.OutageP50Seconds),
			p95: float32(t.OutageP95Seconds), maxOutage: float32(t.OutageMaxSeconds), mttr: float32(t.MTTRSeconds)})
	}
	nh.incidents = make([]histIncident, 0, min(len(h.Incidents), maxHistIncidents))
	var what []byte // one buffer for every incident: most of them find their string shared already
	for i, in := range h.Incidents {
		if i == maxHistIncidents {
			break
		}
		hi := histIncident{start: in.Start.UnixMilli(), duration: float32(max(in.DurationSeconds, 0)), open: in.End.IsZero(), gaveUp: in.GaveUp}
		if len(in.ID) == 2*len(hi.id) && lowerHex(in.ID) {
			_, err := hex.Decode(hi.id[:], []byte(in.ID))
			hi.hexID = err == nil
		}
		what = appendWhat(what[:0], in)
		if hi.hexID {
			hi.what = s.internBytes(what) // shared: the same kind of incident on many nodes
		} else {
			hi.what = string(what) + unitSep + clip(in.ID, maxName) // its own: an id of another form
		}
		nh.incidents = append(nh.incidents, hi)
	}
	return nh
}

// appendWhat appends an incident's shared string to b: its kind, target,
// diagnosis, the rung that healed it and the rungs tried (joined by ","),
// each clipped, joined by unitSep.
func appendWhat(b []byte, in wire.Incident) []byte {
	b = append(append(b, clip(in.Kind, maxName)...), unitSep...)
	b = append(append(b, clip(in.Target, maxName)...), unitSep...)
	b = append(append(b, clip(in.Diagnosis, maxText)...), unitSep...)
	b = append(append(b, clip(in.HealedBy, maxName)...), unitSep...)
	start := len(b)
	for i, r := range in.Repairs {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, r...)
	}
	if len(b)-start > maxText {
		b = append(b[:start], clip(string(b[start:]), maxText)...)
	}
	return b
}

// lowerHex reports whether s is lower-case hex digits only (so that
// it comes back from its bytes the same).
func lowerHex(s string) bool {
	for i := range len(s) {
		if c := s[i]; (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

func sec32(v int64) uint32 { return uint32(min(max(v, 0), 1<<32-1)) }

func joinRepairs(m map[string]int) string {
	if len(m) == 0 {
		return ""
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	for i, k := range keys {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(clip(k, maxName))
		b.WriteByte('=')
		b.WriteString(strconv.Itoa(m[k]))
	}
	return clip(b.String(), maxText)
}

// compactDays keeps the last historyDays days of a daily series.
func compactDays(sr wire.Series) (int64, []dayRec) {
	if sr.Step != daySeconds || len(sr.Healthy) == 0 {
		return 0, nil
	}
	first := max(len(sr.Healthy)-historyDays, 0)
	out := make([]dayRec, 0, len(sr.Healthy)-first)
	for i := first; i < len(sr.Healthy); i++ {
		c := func(v int) uint32 { return uint32(min(max(v, 0), daySeconds)) }
		out = append(out, dayRec{c(sr.Healthy[i]), c(sr.Dark[i]), c(sr.Degraded[i]), uint32(max(sr.Incidents[i], 0))})
	}
	return floorDiv(sr.Start.Unix(), daySeconds) + int64(first), out
}

// compactHours keeps the last historyHours hours of an hourly series.
func compactHours(sr wire.Series) (int64, []hourRec) {
	if sr.Step != hourSeconds || len(sr.Healthy) == 0 {
		return 0, nil
	}
	first := max(len(sr.Healthy)-historyHours, 0)
	out := make([]hourRec, 0, len(sr.Healthy)-first)
	for i := first; i < len(sr.Healthy); i++ {
		c := func(v int) uint16 { return uint16(min(max(v, 0), hourSeconds)) }
		out = append(out, hourRec{c(sr.Healthy[i]), c(sr.Dark[i]), c(sr.Degraded[i]), uint16(min(max(sr.Incidents[i], 0), 65535))})
	}
	return floorDiv(sr.Start.Unix(), hourSeconds) + int64(first), out
}

func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && a < 0 {
		q--
	}
	return q
}

// wire is the history as the API returns it: what the view kept, in the
// wire format.
func (h *nodeHistory) wire(node, site string) wire.History {
	out := wire.History{V: wire.Version, Node: node, Site: site, TS: time.UnixMilli(h.ts).UTC(), Since: time.UnixMilli(h.since).UTC(),
		Targets: []wire.TargetSummary{}, Incidents: []wire.Incident{}}
	out.Days = wire.Series{Start: time.Unix(h.day0*daySeconds, 0).UTC(), Step: daySeconds}
	for _, d := range h.days {
		out.Days.Healthy = append(out.Days.Healthy, int(d.healthy))
		out.Days.Dark = append(out.Days.Dark, int(d.dark))
		out.Days.Degraded = append(out.Days.Degraded, int(d.degraded))
		out.Days.Incidents = append(out.Days.Incidents, int(d.incidents))
	}
	out.Hours = wire.Series{Start: time.Unix(h.hour0*hourSeconds, 0).UTC(), Step: hourSeconds}
	for _, d := range h.hours {
		out.Hours.Healthy = append(out.Hours.Healthy, int(d.healthy))
		out.Hours.Dark = append(out.Hours.Dark, int(d.dark))
		out.Hours.Degraded = append(out.Hours.Degraded, int(d.degraded))
		out.Hours.Incidents = append(out.Hours.Incidents, int(d.incidents))
	}
	for _, t := range h.targets {
		out.Targets = append(out.Targets, wire.TargetSummary{Kind: t.kind, Target: t.target, HealthySeconds: int64(t.healthy),
			DarkSeconds: int64(t.dark), DegradedSeconds: int64(t.degraded), Incidents: int(t.incidents), GaveUps: int(t.gaveUps),
			OutageP50Seconds: float64(t.p50), OutageP95Seconds: float64(t.p95), OutageMaxSeconds: float64(t.maxOutage),
			MTTRSeconds: float64(t.mttr), Repairs: splitRepairs(t.repairs)})
	}
	for _, in := range h.incidents {
		out.Incidents = append(out.Incidents, in.wire())
	}
	return out
}

func (in histIncident) wire() wire.Incident {
	p := fields(in.what, 6)
	id := p[5]
	if in.hexID {
		id = hex.EncodeToString(in.id[:])
	}
	w := wire.Incident{ID: id, Kind: p[0], Target: p[1], Start: time.UnixMilli(in.start).UTC(),
		DurationSeconds: float64(in.duration), Diagnosis: p[2], HealedBy: p[3], GaveUp: in.gaveUp}
	if !in.open {
		w.End = w.Start.Add(time.Duration(float64(in.duration) * float64(time.Second)))
	}
	if p[4] != "" {
		w.Repairs = strings.Split(p[4], ",")
	}
	return w
}

func splitRepairs(s string) map[string]int {
	if s == "" {
		return nil
	}
	out := map[string]int{}
	for _, kv := range strings.Split(s, ",") {
		k, v, _ := strings.Cut(kv, "=")
		n := 0
		for _, c := range v {
			if c >= '0' && c <= '9' {
				n = n*10 + int(c-'0')
			}
		}
		out[k] = n
	}
	return out
}

// availability is the healthy share of the observed seconds of the days
// in [from, to) (unix days), and the observed seconds.
func (h *nodeHistory) availability(from, to int64) (healthy, observed uint64) {
	for i, d := range h.days {
		day := h.day0 + int64(i)
		if day >= from && day < to {
			healthy += uint64(d.healthy)
			observed += uint64(d.healthy) + uint64(d.dark) + uint64(d.degraded)
		}
	}
	return healthy, observed
}
