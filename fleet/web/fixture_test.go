package web

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/edgeheal/edgeheal/fleet"
)

var now = time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)

// fixture is a store with a small fleet as the broker would have fed it:
// two sites, a node of each state, and plant7-gw-02 with an incident, an
// action and its recovery.
func fixture(t testing.TB) *fleet.Store {
	t.Helper()
	s := fleet.NewStore("edgeheal/v1")
	apply := func(node, topic string, at time.Time, v map[string]any) {
		b, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		if r := s.Apply(fleet.Message{Topic: "edgeheal/v1/" + node + "/" + topic, Payload: b, Received: at}); r != fleet.Applied {
			t.Fatalf("%s %s: %s", node, topic, r)
		}
	}
	status := func(node, site, state string, at time.Time, healthy bool) {
		apply(node, "status", at, map[string]any{"v": 1, "state": state, "session": 3, "ts": at, "site": site, "version": "1.4.0",
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
		apply("p7-gw-02", "event", at, map[string]any{"v": 1, "node": "p7-gw-02", "site": "plant-7", "id": id, "ts": at,
			"kind": kind, "target": "wg0/AbCd", "action": action, "result": result, "summary": summary})
	}
	event("e1", "incident", "", "opened", "wg0/AbCd dark: probe missed: timeout", now.Add(-4*time.Minute))
	event("e2", "action", "handshake", "changed", "handshake on wg0/AbCd changed", now.Add(-3*time.Minute))
	apply("p9-gw-03", "status", now.Add(-45*time.Second), map[string]any{"v": 1, "state": "lost", "session": 3})
	s.SetConnected(true, "connected to ssl://mqtt.example.net:8883")
	return s
}
