package fleet

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/edgeheal/edgeheal/wire"
	"github.com/edgeheal/edgeheal/wire/wiretest"
)

func nodeMsg(node, kind string, payload []byte, at time.Time) Message {
	return Message{Topic: "edgeheal/v1/" + node + "/" + kind, Payload: payload, Received: at}
}

func siteStatus(state, site string, session uint64, ts time.Time) []byte {
	b, _ := json.Marshal(wire.Status{V: 1, State: state, Session: session, TS: ts, Site: site, Version: "1.4.0", ConfigRevision: "r1",
		Checks: &wire.ChecksSummary{Total: 1, Healthy: 1, Items: []wire.Check{{Kind: "uplink", Target: "wwan0", State: "ok", Healthy: true}}}})
	return b
}

func siteWill(site string, session uint64) []byte {
	b, _ := json.Marshal(wire.Status{V: 1, State: wire.StateLost, Session: session, Site: site, Version: "1.4.0"})
	return b
}

// The golden history is read with every field the API gives back: what
// the view keeps of it, in the wire format, is what the node published.
func TestTheViewKeepsTheGoldenHistory(t *testing.T) {
	s := NewStore(wire.DefaultTopicPrefix)
	want := wiretest.History()
	if r := s.Apply(nodeMsg(want.Node, wire.TopicHistory, wiretest.Golden(t, wiretest.HistoryFile), wiretest.When)); r != Applied {
		t.Fatalf("the golden history: %v", r)
	}
	d, ok := s.Detail(want.Node, wiretest.When)
	if !ok || d.History == nil {
		t.Fatal("no history kept")
	}
	if diff := cmp.Diff(want, *d.History); diff != "" {
		t.Errorf("the history as the view gives it back (-published +kept):\n%s", diff)
	}
	if d.Site != "plant-7" || d.Availability <= 0.99 || d.Availability >= 1 {
		t.Errorf("site %q availability %v: want plant-7 and just under 1", d.Site, d.Availability)
	}
	if r := s.Apply(nodeMsg(want.Node, wire.TopicHistory, wiretest.Golden(t, wiretest.HistoryFile), wiretest.When)); r != Duplicate {
		t.Errorf("the same history again: %v, want duplicate", r)
	}
}

// fullHistory is a history with every list at its bound: 48 hours, 90
// days, four targets and 20 incidents, ending at now.
func fullHistory(node, site string, now time.Time, darkPerDay int) wire.History {
	h := wire.History{V: 1, Node: node, Site: site, TS: now, Since: now.Add(-90 * 24 * time.Hour)}
	fill := func(start time.Time, step, n, dark int) wire.Series {
		sr := wire.Series{Start: start, Step: step}
		for range n {
			sr.Healthy, sr.Dark, sr.Degraded, sr.Incidents = append(sr.Healthy, step-dark), append(sr.Dark, dark), append(sr.Degraded, 0), append(sr.Incidents, min(dark, 1))
		}
		return sr
	}
	h.Hours = fill(now.Truncate(time.Hour).Add(-47*time.Hour), 3600, 48, darkPerDay/24)
	h.Days = fill(now.Truncate(24*time.Hour).Add(-89*24*time.Hour), 86400, 90, darkPerDay)
	for _, k := range []string{"peer", "workload", "uplink", "component"} {
		h.Targets = append(h.Targets, wire.TargetSummary{Kind: k, Target: k + "-0", HealthySeconds: 7000000, DarkSeconds: 300,
			Incidents: 10, OutageP50Seconds: 12, OutageP95Seconds: 40, OutageMaxSeconds: 60, MTTRSeconds: 15, Repairs: map[string]int{"handshake": 6, "itself": 4}})
	}
	for i := range wire.HistoryIncidents {
		start := now.Add(-time.Duration(i+1) * time.Hour)
		id := fmt.Sprintf("%s-%02d", node, i) // not the agent's form: kept as a string
		if i%2 == 0 {
			id = fmt.Sprintf("%024x", i*7919) // the agent's: 12 bytes
		}
		h.Incidents = append(h.Incidents, wire.Incident{ID: id, Kind: "peer", Target: "wg0/AbCdEfGh", Start: start,
			End: start.Add(20 * time.Second), DurationSeconds: 20, Diagnosis: "probe missed: timeout", Repairs: []string{"reassert", "handshake"}, HealedBy: "handshake"})
	}
	return h
}

func TestTheSummaryFromHistories(t *testing.T) {
	s := NewStore(wire.DefaultTopicPrefix)
	for i := range 6 {
		name := fmt.Sprintf("n%d", i)
		s.Apply(nodeMsg(name, "status", siteStatus("online", []string{"a", "b"}[i%2], 1, t0), t0))
		b, _ := json.Marshal(fullHistory(name, "", t0, i*600))
		if r := s.Apply(nodeMsg(name, "history", b, t0)); r != Applied {
			t.Fatalf("history of %s: %v", name, r)
		}
	}
	sum := s.Summary(t0)
	f := sum.Fleet
	if len(f.Days) != glanceDays || f.WithHistory != 6 || f.Days[len(f.Days)-1].Day != t0.Truncate(24*time.Hour) {
		t.Fatalf("days %d, with history %d, last day %v", len(f.Days), f.WithHistory, f.Days[len(f.Days)-1].Day)
	}
	// 0+600+...+3000 = 9000 dark seconds a day over 6 nodes.
	if want := 1 - 9000.0/(6*86400); fmt.Sprintf("%.6f", f.Days[0].Availability) != fmt.Sprintf("%.6f", want) {
		t.Errorf("a day's availability %v, want %v", f.Days[0].Availability, want)
	}
	if len(f.Worst) != 6 || f.Worst[0].Node != "n5" || f.Worst[5].Node != "n0" {
		t.Errorf("worst nodes %+v, want n5 first and n0 last", f.Worst)
	}
	if f.MTTRSeconds != 15 || f.OutageP50 != 20 || f.Outages[1].Count != 6*wire.HistoryIncidents {
		t.Errorf("MTTR %v, outage p50 %v, buckets %+v", f.MTTRSeconds, f.OutageP50, f.Outages)
	}
	if len(sum.Sites) != 2 || sum.Sites[0].Nodes != 3 || sum.Sites[0].Availability <= 0 {
		t.Errorf("sites %+v", sum.Sites)
	}
	nodes, _ := s.ListAt(Filter{Sort: SortAvailability}, t0)
	if nodes[0].Name != "n5" || nodes[5].Name != "n0" {
		t.Errorf("by availability: %s first, %s last", nodes[0].Name, nodes[5].Name)
	}
}

// The triage during a site outage: the gave-up node first, the degraded
// node with its incident, the site once, and the one lost node of
// another site on its own.
func TestTriageFoldsASiteLostTogether(t *testing.T) {
	s := NewStore(wire.DefaultTopicPrefix)
	for i := range 40 {
		site := "site-3"
		if i >= 30 {
			site = "site-4"
		}
		s.Apply(nodeMsg(fmt.Sprintf("n%02d", i), "status", siteStatus("online", site, 1, t0), t0))
	}
	for i := range 30 { // the whole of site-3, within a minute
		s.Apply(nodeMsg(fmt.Sprintf("n%02d", i), "status", siteWill("site-3", 1), t0.Add(time.Duration(i)*2*time.Second)))
	}
	s.Apply(nodeMsg("n30", "status", siteWill("site-4", 1), t0.Add(6*time.Minute)))
	s.Apply(nodeMsg("n31", "event", event("g1", "gave-up", "wg0/k", t0.Add(time.Minute), nil), t0.Add(time.Minute)))
	s.Apply(nodeMsg("n32", "status", siteStatus("degraded", "site-4", 1, t0.Add(time.Minute)), t0.Add(time.Minute)))
	s.Apply(nodeMsg("n32", "event", event("i1", "incident", "telemetry", t0.Add(time.Minute), nil), t0.Add(time.Minute)))
	tr := s.Summary(t0.Add(10 * time.Minute)).Triage
	var got []string
	for _, it := range tr.Items {
		got = append(got, it.Kind+" "+it.Node+"@"+it.Site)
	}
	want := []string{"gave-up n31@site-4", "incident n32@site-4", "site-lost @site-3", "lost n30@site-4"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("triage (-want +got):\n%s", diff)
	}
	if len(tr.Items) > 2 && !strings.HasPrefix(tr.Items[2].Detail, "30 of 30 lost since 12:00, likely the site's uplink") {
		t.Errorf("the site's line: %q", tr.Items[2].Detail)
	}
}

// A view restarted during an outage reads the retained Wills: each
// carries the node's site, and the node's retained history says when it
// was last heard.
func TestALostNodeKeepsItsIdentityFromTheRetainedWill(t *testing.T) {
	s := NewStore(wire.DefaultTopicPrefix)
	w := nodeMsg("n1", "status", siteWill("site-3", 4), t0.Add(time.Hour))
	w.Retained = true
	s.Apply(w)
	b, _ := json.Marshal(fullHistory("n1", "site-3", t0, 0))
	h := nodeMsg("n1", "history", b, t0.Add(time.Hour))
	h.Retained = true
	s.Apply(h)
	d, _ := s.Detail("n1", t0.Add(time.Hour))
	if d.Site != "site-3" || d.State != StateLost || d.Version != "1.4.0" || !d.Since.Equal(t0) || !d.LastSeen.Equal(t0) {
		t.Errorf("after a restart: site %q state %s version %q since %v last seen %v; want site-3, lost, 1.4.0, since and last seen at the history's time",
			d.Site, d.State, d.Version, d.Since, d.LastSeen)
	}
	// A Will without identity keeps what the view knew.
	s.Apply(nodeMsg("n2", "status", siteStatus("online", "site-9", 1, t0), t0))
	s.Apply(nodeMsg("n2", "status", will(1), t0.Add(time.Minute)))
	if d, _ := s.Detail("n2", t0); d.Site != "site-9" || d.Version != "1.4.0" || d.ConfigRevision != "r1" {
		t.Errorf("a bare Will: site %q version %q revision %q, want what the status said", d.Site, d.Version, d.ConfigRevision)
	}
}

// The lag is the view's: one late replay or one node with a skewed clock
// does not move it; every node late does.
func TestLagIgnoresOneReplayAndOneSkewedClock(t *testing.T) {
	s := NewStore(wire.DefaultTopicPrefix)
	at := t0
	for i := range 10 { // a fleet whose messages take 50 ms
		s.Apply(nodeMsg(fmt.Sprintf("n%d", i), "status", siteStatus("online", "a", 1, at.Add(-50*time.Millisecond)), at))
	}
	skewed := func(at time.Time) { // n9's clock is 90 s behind
		s.Apply(nodeMsg("n9", "status", siteStatus("online", "a", 2, at.Add(-90*time.Second)), at))
	}
	at = at.Add(10 * time.Minute)
	skewed(at)
	for i := range 10 {
		at = at.Add(time.Second)
		skewed(at)
		s.Apply(nodeMsg("n1", "event", event(fmt.Sprint("ev", i), "action", "t", at.Add(-50*time.Millisecond), nil), at))
	}
	// One replay from the outbox, queued an hour ago.
	s.Apply(nodeMsg("n2", "event", event("old", "action", "t", at.Add(-time.Hour), nil), at))
	if h := s.Health(at); h.LagSeconds > 1 || h.LagMaxSeconds < 90 {
		t.Errorf("lag %v s (max %v s): want under 1 s, the skewed clock only in the max", h.LagSeconds, h.LagMaxSeconds)
	}
	// The view itself falls 2 minutes behind: every node's message is late.
	for i := range 8 {
		at = at.Add(time.Second)
		s.Apply(nodeMsg(fmt.Sprintf("n%d", i), "status", siteStatus("online", "a", 1, at.Add(-2*time.Minute)), at))
	}
	if h := s.Health(at); h.LagSeconds < 100 {
		t.Errorf("lag %v s with every message 2 minutes late: want about 120", h.LagSeconds)
	}
}

// One node cannot grow the view without bound: distinct incidents,
// unknown event kinds, long strings and many checks are all bounded.
func TestOneNodeCannotGrowTheView(t *testing.T) {
	s := NewStore(wire.DefaultTopicPrefix)
	long := strings.Repeat("x", 10000)
	for i := range 1000 {
		s.Apply(nodeMsg("n1", "event", event(fmt.Sprint(i), "incident", fmt.Sprintf("wg0/%d%s", i, long), t0, map[string]any{"summary": long}), t0))
		s.Apply(nodeMsg("n1", "event", event(fmt.Sprint("k", i), fmt.Sprint("kind-", i), "t", t0, nil), t0))
	}
	var checks []wire.Check
	for i := range 500 {
		checks = append(checks, wire.Check{Kind: "peer", Target: fmt.Sprint("wg0/", i), State: "ok", Healthy: true, Detail: long[:300]})
	}
	b, _ := json.Marshal(wire.Status{V: 1, State: "online", Session: 1, TS: t0, Checks: &wire.ChecksSummary{Total: 500, Items: checks}})
	s.Apply(nodeMsg("n1", "status", b, t0))
	d, _ := s.Detail("n1", t0)
	if len(d.Incidents) != maxOpenIncidents || d.IncidentsNotKept != 1000-maxOpenIncidents || len(d.Checks) != maxChecks {
		t.Errorf("kept %d incidents (%d not kept) and %d checks", len(d.Incidents), d.IncidentsNotKept, len(d.Checks))
	}
	for _, in := range d.Incidents {
		if len(in.Target) > maxName || len(in.Summary) > maxText {
			t.Fatalf("an incident of %d and %d bytes", len(in.Target), len(in.Summary))
		}
	}
	if len(d.Checks[0].Detail) > maxText {
		t.Errorf("a check's detail of %d bytes", len(d.Checks[0].Detail))
	}
	h := s.Health(t0)
	if len(h.Events) != 2 || h.Events[KindOther] != 1000 {
		t.Errorf("events by kind: %v, want incident and other", h.Events)
	}
	s.Each(t0, func(m NodeMetrics) {
		if len(m.LastHour) != 2 || m.LastHour[KindOther] != 1000 {
			t.Errorf("last hour: %v", m.LastHour)
		}
	})
	if r := s.Apply(nodeMsg("n1", "status", []byte(`{"v":1,"state":"`+long+`","session":9}`), t0)); r != Invalid {
		t.Errorf("a status with a state of its own: %v, want invalid", r)
	}
	if r := s.Apply(nodeMsg("n1", "event", make([]byte, MaxPayload+1), t0)); r != Invalid {
		t.Errorf("a payload over the limit: %v, want invalid", r)
	}
	if len(EventKinds) != numEventKinds {
		t.Errorf("EventKinds has %d kinds, numEventKinds says %d", len(EventKinds), numEventKinds)
	}
}

// The fleet's counts, kept as messages come, are what a walk over the
// nodes finds, whatever the messages.
func TestHealthCountsAreWhatTheNodesSay(t *testing.T) {
	s := NewStore(wire.DefaultTopicPrefix)
	r := rand.New(rand.NewPCG(1, 2))
	for i := range 5000 {
		name := fmt.Sprintf("n%d", r.IntN(20))
		at := t0.Add(time.Duration(i) * time.Second)
		switch r.IntN(6) {
		case 0:
			s.Apply(nodeMsg(name, "status", siteStatus([]string{"online", "degraded", "offline"}[r.IntN(3)], "a", uint64(r.IntN(3)), at), at))
		case 1:
			s.Apply(nodeMsg(name, "status", siteWill("a", uint64(r.IntN(3))), at))
		case 2:
			s.Apply(nodeMsg(name, "status", nil, at))
		default:
			kind := []string{"incident", "recovered", "gave-up", "action"}[r.IntN(4)]
			target := []string{"wg0/k", "telemetry", "x"}[r.IntN(3)]
			s.Apply(nodeMsg(name, "event", event(fmt.Sprint(i), kind, target, at, nil), at))
		}
	}
	byState, open := map[string]int{}, map[string]int{}
	s.mu.RLock()
	for _, n := range s.nodes {
		byState[n.State]++
		for _, in := range n.incidents {
			open[IncidentLabel(in.Kind)]++
		}
	}
	s.mu.RUnlock()
	h := s.Health(t0)
	if diff := cmp.Diff(byState, h.ByState); diff != "" {
		t.Errorf("by state (-walk +kept):\n%s", diff)
	}
	if diff := cmp.Diff(open, h.OpenIncidents); diff != "" {
		t.Errorf("open incidents (-walk +kept):\n%s", diff)
	}
}
