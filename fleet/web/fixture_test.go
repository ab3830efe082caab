package web

import (
	"encoding/json"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/edgeheal/edgeheal/fleet"
	"github.com/edgeheal/edgeheal/wire"
)

var now = time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)

// open is the handler with the door open (the tests of the door are
// auth_test.go's).
func open(s *fleet.Store) http.Handler {
	return Handler(Options{Store: s, Now: func() time.Time { return now }, Auth: fleet.Auth{Disabled: true}})
}

func apply(t testing.TB, s *fleet.Store, node, topic string, at time.Time, v any) {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	if r := s.Apply(fleet.Message{Topic: "edgeheal/v1/" + node + "/" + topic, Payload: b, Received: at}); r != fleet.Applied {
		t.Fatalf("%s %s: %s", node, topic, r)
	}
}

// fixture is a store with a small fleet as the broker would have fed it:
// two sites, a node of each state, and plant7-gw-02 with an incident, an
// action and its recovery.
func fixture(t testing.TB) *fleet.Store {
	t.Helper()
	s := fleet.NewStore("edgeheal/v1")
	status := func(node, site, state string, at time.Time, healthy bool) {
		apply(t, s, node, "status", at, map[string]any{"v": 1, "state": state, "session": 3, "ts": at, "site": site, "version": "1.4.0",
			"checks": map[string]any{"total": 2, "healthy": map[bool]int{true: 2, false: 1}[healthy], "items": []any{
				map[string]any{"kind": "uplink", "target": "wwan0", "state": "ok", "healthy": true, "since": at},
				map[string]any{"kind": "peer", "target": "wg0/AbCd", "state": map[bool]string{true: "ok", false: "healing"}[healthy], "healthy": healthy, "since": at},
			}}})
	}
	for i, site := range []string{"plant-7", "plant-9"} {
		for j := 1; j <= 3; j++ {
			status(fmt.Sprintf("%s-gw-%02d", site[:1]+site[6:], j), site, "online", now.Add(-time.Duration(10*i+j)*time.Minute), true)
		}
	}
	status("p7-gw-02", "plant-7", "degraded", now.Add(-30*time.Second), false)
	event := func(id, kind, action, result, summary string, at time.Time) {
		apply(t, s, "p7-gw-02", "event", at, map[string]any{"v": 1, "node": "p7-gw-02", "site": "plant-7", "id": id, "ts": at,
			"kind": kind, "target": "wg0/AbCd", "action": action, "result": result, "summary": summary})
	}
	event("e1", "incident", "", "opened", "wg0/AbCd dark: probe missed: timeout", now.Add(-4*time.Minute))
	event("e2", "action", "handshake", "changed", "handshake on wg0/AbCd changed", now.Add(-3*time.Minute))
	apply(t, s, "p9-gw-03", "status", now.Add(-45*time.Second), map[string]any{"v": 1, "state": "lost", "session": 3})
	s.SetConnected(true, "connected to ssl://mqtt.example.net:8883")
	return s
}

// history is a node's retained history over 30 days ending at now: dark
// seconds a day and incidents healed by a handshake (the last one open
// or given up on, if asked).
func history(node, site string, darkPerDay int, incidents int, last string) wire.History {
	day := now.Truncate(24 * time.Hour)
	h := wire.History{V: 1, Node: node, Site: site, TS: now, Since: day.Add(-29 * 24 * time.Hour),
		Days: wire.Series{Start: day.Add(-29 * 24 * time.Hour), Step: 86400}, Hours: wire.Series{Start: now.Truncate(time.Hour).Add(-47 * time.Hour), Step: 3600}}
	for i := range 30 {
		dark := darkPerDay * (1 + (i*7+len(node))%5) / 3
		h.Days.Healthy, h.Days.Dark = append(h.Days.Healthy, 86400-dark), append(h.Days.Dark, dark)
		h.Days.Degraded, h.Days.Incidents = append(h.Days.Degraded, 0), append(h.Days.Incidents, (i+len(node))%3)
	}
	for range 48 {
		h.Hours.Healthy, h.Hours.Dark, h.Hours.Degraded, h.Hours.Incidents = append(h.Hours.Healthy, 3600), append(h.Hours.Dark, 0), append(h.Hours.Degraded, 0), append(h.Hours.Incidents, 0)
	}
	h.Targets = []wire.TargetSummary{{Kind: "peer", Target: "wg0/AbCd", HealthySeconds: 2590000, DarkSeconds: int64(darkPerDay * 30), Incidents: incidents,
		OutageP50Seconds: 12, OutageP95Seconds: 48, OutageMaxSeconds: 95, MTTRSeconds: 18, Repairs: map[string]int{"handshake": incidents / 2, "itself": incidents - incidents/2}}}
	for i := range incidents {
		start := now.Add(-time.Duration(3*i+2) * time.Hour)
		in := wire.Incident{ID: fmt.Sprintf("%s-%d", node, i), Kind: "peer", Target: "wg0/AbCd", Start: start, End: start.Add(time.Duration(10+5*i) * time.Second),
			DurationSeconds: float64(10 + 5*i), Diagnosis: "probe missed: timeout", Repairs: []string{"reassert", "handshake"}, HealedBy: "handshake"}
		if i == 0 && last != "" {
			in.End, in.HealedBy, in.DurationSeconds, in.GaveUp = time.Time{}, "", 2*3600, last == "gave-up"
			in.Repairs = []string{"reassert", "handshake", "rebind", "bounce", "restart-unit"}
		}
		h.Incidents = append(h.Incidents, in)
	}
	return h
}

// outage is the console during a site outage: site-3's twelve nodes lost
// together, one node of site-1 where edgeheal gave up, one degraded with
// an open incident, one lone lost node of site-2, every node with a
// history.
func outage(t testing.TB) *fleet.Store {
	t.Helper()
	s := fleet.NewStore("edgeheal/v1")
	for site, count := range map[string]int{"site-1": 8, "site-2": 6, "site-3": 12} {
		for i := range count {
			name := fmt.Sprintf("%s-n%02d", site, i)
			seen := now.Add(-5 * time.Minute)
			if site == "site-3" {
				seen = now.Add(-21 * time.Minute)
			}
			apply(t, s, name, "status", seen, wire.Status{V: 1, State: "online", Session: 2, TS: seen, Site: site,
				Version: "1.4.0", ConfigRevision: "3f2a9c1d", Checks: &wire.ChecksSummary{Total: 2, Healthy: 2, Items: []wire.Check{
					{Kind: "uplink", Target: "wwan0", State: "ok", Healthy: true}, {Kind: "peer", Target: "wg0/AbCd", State: "ok", Healthy: true}}}})
			last := ""
			if name == "site-1-n03" {
				last = "gave-up"
			}
			apply(t, s, name, "history", now.Add(-time.Hour), history(name, site, 40+10*i+map[string]int{"site-1": 0, "site-2": 100, "site-3": 400}[site], 6, last))
			if site == "site-3" {
				apply(t, s, name, "status", now.Add(-20*time.Minute+time.Duration(i)*time.Second), wire.Status{V: 1, State: "lost", Session: 2, Site: site, Version: "1.4.0"})
			}
		}
	}
	apply(t, s, "site-1-n03", "event", now.Add(-50*time.Minute), wire.EventMessage{V: 1, Node: "site-1-n03", Event: wire.Event{ID: "g", Time: now.Add(-50 * time.Minute),
		Kind: "gave-up", Target: "wg0/AbCd", Result: "degraded", Summary: "wg0/AbCd: gave up after restart-unit: the hub answers nothing"}})
	apply(t, s, "site-1-n05", "status", now.Add(-4*time.Minute), wire.Status{V: 1, State: "degraded", Session: 2, TS: now.Add(-4 * time.Minute), Site: "site-1",
		Checks: &wire.ChecksSummary{Total: 2, Healthy: 1, Items: []wire.Check{{Kind: "workload", Target: "telemetry", State: "down", Detail: "overlay: pod probe timeout", Since: now.Add(-6 * time.Minute)}}}})
	apply(t, s, "site-2-n04", "status", now.Add(-90*time.Minute), wire.Status{V: 1, State: "lost", Session: 2, Site: "site-2"})
	s.SetConnected(true, "connected to ssl://mqtt.example.net:8883")
	return s
}
