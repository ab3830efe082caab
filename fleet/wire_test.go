package fleet

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/edgeheal/edgeheal/agent"
	"github.com/edgeheal/edgeheal/agent/mqtt"
)

// The agent's own payload types, marshalled as the agent does, decode into
// the view's types with every field the view uses: the JSON is the
// contract between the two (the view does not link the agent).
func TestTheAgentsPayloadsDecode(t *testing.T) {
	ts := time.Date(2026, 11, 29, 12, 0, 3, 512e6, time.UTC)
	st := mqtt.StatusMessage{V: mqtt.PayloadVersion, State: "degraded", Session: 17, TS: ts, Node: "edge-17", Site: "plant-7",
		Version: "1.4.0", ConfigRevision: "r42", Checks: &mqtt.ChecksSummary{Total: 1, Healthy: 0, Items: []mqtt.CheckSummary{
			{Kind: "peer", Target: "wg0/AbCd", State: "healing", Healthy: false, Detail: "probe failed", LastAction: "handshake", Since: ts}}}}
	b, _ := json.Marshal(st)
	got, err := DecodeStatus(b)
	if err != nil {
		t.Fatal(err)
	}
	want := Status{V: 1, State: "degraded", Session: 17, TS: ts, Node: "edge-17", Site: "plant-7", Version: "1.4.0", ConfigRevision: "r42",
		Checks: &Checks{Total: 1, Items: []Check{{Kind: "peer", Target: "wg0/AbCd", State: "healing", Detail: "probe failed", LastAction: "handshake", Since: ts}}}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("status (-want +got):\n%s", diff)
	}

	b, _ = json.Marshal(mqtt.StatusMessage{V: mqtt.PayloadVersion, State: mqtt.StateLost, Session: 17})
	if w, err := DecodeStatus(b); err != nil || w.State != StateLost || w.Session != 17 || !w.TS.IsZero() {
		t.Errorf("the Will decodes as %+v, %v", w, err)
	}

	ev := mqtt.EventMessage{V: mqtt.PayloadVersion, Node: "edge-17", Site: "plant-7", Event: agent.Event{
		ID: "5f0c", Time: ts, Kind: "action", Target: "wg0/AbCd", Action: "handshake", Result: "changed", Duration: 0.004,
		Summary: "handshake on wg0/AbCd changed", Evidence: map[string]any{"reason": "probe"}}}
	b, _ = json.Marshal(ev)
	e, err := DecodeEvent(b)
	if err != nil {
		t.Fatal(err)
	}
	wantE := Event{V: 1, Node: "edge-17", Site: "plant-7", ID: "5f0c", TS: ts, Kind: "action", Target: "wg0/AbCd", Action: "handshake",
		Result: "changed", Duration: 0.004, Summary: "handshake on wg0/AbCd changed", Evidence: map[string]any{"reason": "probe"}}
	if diff := cmp.Diff(wantE, e); diff != "" {
		t.Errorf("event (-want +got):\n%s", diff)
	}
	for _, s := range []string{mqtt.StateOffline, mqtt.StateLost, agent.StateOnline, agent.StateDegraded} {
		found := false
		for _, v := range States {
			found = found || v == s
		}
		if !found {
			t.Errorf("agent state %q is not one the view knows", s)
		}
	}
}

func TestParseTopic(t *testing.T) {
	for _, tt := range []struct{ topic, node, kind string }{
		{"edgeheal/v1/edge-17/status", "edge-17", "status"},
		{"edgeheal/v1/edge-17/event", "edge-17", "event"},
		{"edgeheal/v1/edge-17/other", "", ""},
		{"edgeheal/v1//status", "", ""},
		{"edgeheal/v1/a/b/status", "", ""},
		{"elsewhere/edge-17/status", "", ""},
	} {
		node, kind, err := ParseTopic("edgeheal/v1", tt.topic)
		if node != tt.node || kind != tt.kind || (err == nil) != (tt.node != "") {
			t.Errorf("ParseTopic(%q) = %q, %q, %v", tt.topic, node, kind, err)
		}
	}
}

func FuzzDecode(f *testing.F) {
	f.Add([]byte(`{"v":1,"state":"online","session":1,"ts":"2026-11-29T12:00:00Z"}`))
	f.Add([]byte(`{"v":1,"id":"a","kind":"incident","seq":3,"session":2}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		s := NewStore("p")
		s.Apply(Message{Topic: "p/n/status", Payload: b, Received: t0})
		s.Apply(Message{Topic: "p/n/event", Payload: b, Received: t0})
		s.Health(t0)
		s.Detail("n", t0)
	})
}
