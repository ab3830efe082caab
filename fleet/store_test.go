package fleet

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/edgeheal/edgeheal/wire"
)

var t0 = time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)

func status(state string, session uint64, ts time.Time) []byte {
	b, _ := json.Marshal(map[string]any{"v": 1, "state": state, "session": session, "ts": ts, "site": "plant-7",
		"checks": map[string]any{"total": 1, "healthy": 1, "items": []any{}}})
	return b
}

func will(session uint64) []byte {
	return []byte(fmt.Sprintf(`{"v":1,"state":"lost","session":%d}`, session))
}

func event(id, kind, target string, ts time.Time, extra map[string]any) []byte {
	m := map[string]any{"v": 1, "node": "n1", "site": "plant-7", "id": id, "ts": ts, "kind": kind, "target": target, "summary": kind + " " + target}
	for k, v := range extra {
		m[k] = v
	}
	b, _ := json.Marshal(m)
	return b
}

func msg(topic string, payload []byte, at time.Time) Message {
	return Message{Topic: "edgeheal/v1/n1/" + topic, Payload: payload, Received: at}
}

func TestStatusOrdering(t *testing.T) {
	tests := []struct {
		name  string
		msgs  []Message
		want  []Result
		state string
	}{
		{"a first status is applied", []Message{msg("status", status("online", 5, t0), t0)}, []Result{Applied}, "online"},
		{"the Will of the current session makes the node lost",
			[]Message{msg("status", status("online", 5, t0), t0), msg("status", will(5), t0.Add(time.Minute))},
			[]Result{Applied, Applied}, "lost"},
		{"a late Will of an older session is stale",
			[]Message{msg("status", status("online", 6, t0), t0), msg("status", will(5), t0.Add(time.Second))},
			[]Result{Applied, Stale}, "online"},
		{"a status of the old session after its Will is stale",
			[]Message{msg("status", will(5), t0), msg("status", status("online", 5, t0.Add(-time.Second)), t0.Add(time.Second))},
			[]Result{Applied, Stale}, "lost"},
		{"a higher session revives a lost node",
			[]Message{msg("status", will(5), t0), msg("status", status("online", 6, t0.Add(time.Second)), t0.Add(time.Second))},
			[]Result{Applied, Applied}, "online"},
		{"the same status twice is a duplicate",
			[]Message{msg("status", status("online", 5, t0), t0), msg("status", status("online", 5, t0), t0.Add(time.Second))},
			[]Result{Applied, Duplicate}, "online"},
		{"an older status of the same session is stale",
			[]Message{msg("status", status("degraded", 5, t0), t0), msg("status", status("online", 5, t0.Add(-time.Minute)), t0)},
			[]Result{Applied, Stale}, "degraded"},
		{"a payload of another version is invalid",
			[]Message{msg("status", []byte(`{"v":2,"state":"online","session":1}`), t0)}, []Result{Invalid}, ""},
		{"a topic outside the prefix is invalid",
			[]Message{{Topic: "other/n1/status", Payload: status("online", 1, t0), Received: t0}}, []Result{Invalid}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := NewStore("edgeheal/v1")
			var got []Result
			for _, m := range tt.msgs {
				got = append(got, s.Apply(m))
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("results (-want +got):\n%s", diff)
			}
			d, _ := s.Detail("n1", t0)
			if d.State != tt.state {
				t.Errorf("state = %q, want %q", d.State, tt.state)
			}
		})
	}
}

func TestSinceAndLastSeen(t *testing.T) {
	s := NewStore("edgeheal/v1")
	retained := msg("status", status("online", 5, t0.Add(-3*time.Minute)), t0)
	retained.Retained = true
	s.Apply(retained)
	s.Apply(msg("status", status("online", 5, t0.Add(time.Minute)), t0.Add(time.Minute)))
	s.Apply(msg("status", will(5), t0.Add(2*time.Minute)))
	d, _ := s.Detail("n1", t0)
	if !d.Since.Equal(t0.Add(2 * time.Minute)) {
		t.Errorf("since = %v, want the Will's arrival", d.Since)
	}
	if !d.LastSeen.Equal(t0.Add(time.Minute)) {
		t.Errorf("last seen = %v, want the last live status (a Will is not the node speaking)", d.LastSeen)
	}
}

func TestEventsDeduplicatedByIDAndSeq(t *testing.T) {
	seq := func(session, n uint64) map[string]any { return map[string]any{"session": session, "seq": n} }
	tests := []struct {
		name string
		msgs [][]byte
		want []Result
	}{
		{"an id seen before is a duplicate", [][]byte{
			event("a", "action", "wg0/k", t0, nil), event("a", "action", "wg0/k", t0, nil)}, []Result{Applied, Duplicate}},
		{"without seq, distinct ids are applied in any order", [][]byte{
			event("b", "action", "wg0/k", t0.Add(time.Second), nil), event("a", "action", "wg0/k", t0, nil)}, []Result{Applied, Applied}},
		{"a replayed seq with a new id is stale", [][]byte{
			event("a", "action", "t", t0, seq(3, 7)), event("b", "action", "t", t0, seq(3, 7))}, []Result{Applied, Stale}},
		{"a lower seq of the same session is stale", [][]byte{
			event("a", "action", "t", t0, seq(3, 8)), event("b", "action", "t", t0, seq(3, 2))}, []Result{Applied, Stale}},
		{"seq without session still orders", [][]byte{
			event("a", "action", "t", t0, map[string]any{"seq": 5}), event("b", "action", "t", t0, map[string]any{"seq": 4})}, []Result{Applied, Stale}},
		{"seq without session starts again once the node's status has a higher session", [][]byte{
			event("a", "action", "t", t0, map[string]any{"seq": 5}), status("online", 9, t0), event("b", "action", "t", t0, map[string]any{"seq": 1})},
			[]Result{Applied, Applied, Applied}},
		{"an event counts in its own session, also before the status of that session came", [][]byte{
			status("online", 5, t0), event("a", "action", "t", t0, seq(5, 100)), event("b", "action", "t", t0, seq(6, 50))},
			[]Result{Applied, Applied, Applied}},
		{"an event of a session before one seen is stale", [][]byte{
			event("a", "action", "t", t0, seq(6, 1)), event("b", "action", "t", t0, seq(5, 100))}, []Result{Applied, Stale}},
		{"an event without an id is invalid", [][]byte{[]byte(`{"v":1,"kind":"action"}`)}, []Result{Invalid}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := NewStore("edgeheal/v1")
			var got []Result
			for _, p := range tt.msgs {
				topic := "event"
				if strings.Contains(string(p), `"state"`) {
					topic = "status"
				}
				got = append(got, s.Apply(msg(topic, p, t0)))
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("results (-want +got):\n%s", diff)
			}
		})
	}
}

func TestIncidents(t *testing.T) {
	peerDown := func(state string, healthy bool, ts time.Time) []byte {
		b, _ := json.Marshal(map[string]any{"v": 1, "state": "degraded", "session": 1, "ts": ts,
			"checks": map[string]any{"total": 1, "items": []any{map[string]any{
				"kind": "peer", "target": "wg0/k", "state": state, "healthy": healthy, "since": t0}}}})
		return b
	}
	tests := []struct {
		name string
		msgs []Message
		want []Incident
	}{
		{"an incident event opens one", []Message{msg("event", event("a", "incident", "wg0/k", t0, nil), t0)},
			[]Incident{{Target: "wg0/k", Kind: "peer", Opened: t0, Summary: "incident wg0/k"}}},
		{"recovered closes it", []Message{
			msg("event", event("a", "incident", "wg0/k", t0, nil), t0),
			msg("event", event("b", "recovered", "wg0/k", t0.Add(time.Minute), nil), t0.Add(time.Minute))}, nil},
		{"gave-up marks it", []Message{
			msg("event", event("a", "incident", "wg0/k", t0, nil), t0),
			msg("event", event("b", "gave-up", "wg0/k", t0.Add(time.Minute), nil), t0.Add(time.Minute))},
			[]Incident{{Target: "wg0/k", Kind: "peer", Opened: t0, Summary: "incident wg0/k", GaveUp: true}}},
		{"a workload's incident is of kind workload", []Message{msg("event", event("a", "incident", "telemetry", t0, nil), t0)},
			[]Incident{{Target: "telemetry", Kind: "workload", Opened: t0, Summary: "incident telemetry"}}},
		{"an unhealthy peer in the status opens one when no event was seen", []Message{
			msg("status", peerDown("down", false, t0.Add(time.Second)), t0)},
			[]Incident{{Target: "wg0/k", Kind: "peer", Opened: t0, Summary: "peer wg0/k down: ", FromStatus: true}}},
		{"a path MTU nothing repairs in the status opens one of kind path-mtu", []Message{
			msg("status", func() []byte {
				b, _ := json.Marshal(map[string]any{"v": 1, "state": "degraded", "session": 1, "ts": t0.Add(time.Second),
					"checks": map[string]any{"total": 1, "items": []any{map[string]any{
						"kind": "path-mtu", "target": "wg0", "state": "low", "healthy": false, "since": t0, "detail": "path MTU 1328"}}}})
				return b
			}(), t0)},
			[]Incident{{Target: "wg0", Kind: "path-mtu", Opened: t0, Summary: "path-mtu wg0 low: path MTU 1328", FromStatus: true}}},
		{"a healthy check in a newer status closes it", []Message{
			msg("event", event("a", "incident", "wg0/k", t0, nil), t0),
			msg("status", peerDown("ok", true, t0.Add(time.Minute)), t0.Add(time.Minute))}, nil},
		{"a healthy check in an older status does not", []Message{
			msg("event", event("a", "incident", "wg0/k", t0, nil), t0),
			msg("status", peerDown("ok", true, t0.Add(-time.Minute)), t0)},
			[]Incident{{Target: "wg0/k", Kind: "peer", Opened: t0, Summary: "incident wg0/k"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := NewStore("edgeheal/v1")
			for _, m := range tt.msgs {
				s.Apply(m)
			}
			d, _ := s.Detail("n1", t0)
			if len(d.Incidents) == 0 {
				d.Incidents = nil
			}
			if diff := cmp.Diff(tt.want, d.Incidents); diff != "" {
				t.Errorf("incidents (-want +got):\n%s", diff)
			}
		})
	}
}

func TestHistoryIsBoundedAndInTimeOrder(t *testing.T) {
	s := NewStore("edgeheal/v1")
	for i := range keepEvents + 20 {
		// Arrive in reverse: the page still lists them oldest first.
		ts := t0.Add(-time.Duration(i) * time.Minute)
		s.Apply(msg("event", event(fmt.Sprint(i), "action", "wg0/k", ts, nil), t0))
	}
	d, _ := s.Detail("n1", t0)
	if len(d.Events) != keepEvents || len(d.Actions) != keepActions {
		t.Fatalf("kept %d events and %d actions, want %d and %d", len(d.Events), len(d.Actions), keepEvents, keepActions)
	}
	for i := 1; i < len(d.Events); i++ {
		if d.Events[i].TS.Before(d.Events[i-1].TS) {
			t.Fatalf("events out of order at %d: %v before %v", i, d.Events[i].TS, d.Events[i-1].TS)
		}
	}
	if !d.Events[len(d.Events)-1].TS.Equal(t0) {
		t.Errorf("the newest event was dropped")
	}
	// Counts cover 24 h: 70 events one minute apart are all in.
	if d.Counts["action"] != keepEvents+20 {
		t.Errorf("counts = %v, want %d actions", d.Counts, keepEvents+20)
	}
	later, _ := s.Detail("n1", t0.Add(25*time.Hour))
	if later.Counts["action"] != 0 {
		t.Errorf("counts 25 h later = %v, want none", later.Counts)
	}
}

func TestEmptyRetainedStatusRemovesTheNode(t *testing.T) {
	s := NewStore("edgeheal/v1")
	s.Apply(msg("status", status("online", 1, t0), t0))
	if got := s.Apply(msg("status", nil, t0)); got != Removed {
		t.Fatalf("empty status: %s, want removed", got)
	}
	if _, ok := s.Detail("n1", t0); ok {
		t.Error("node still known")
	}
}

func TestHealthCountsLagOnlyForLiveMessages(t *testing.T) {
	s := NewStore("edgeheal/v1")
	old := msg("status", status("online", 1, t0.Add(-time.Hour)), t0)
	old.Retained = true
	s.Apply(old)
	s.Apply(msg("event", event("a", "action", "wg0/k", t0.Add(-1500*time.Millisecond), nil), t0))
	h := s.Health(t0)
	if h.LagMaxSeconds != 1.5 || h.LagSeconds != 0 {
		t.Errorf("lag = %v, max %v; want 0 (the node's first message sets its clock offset) and 1.5 (the retained status's age is not lag)", h.LagSeconds, h.LagMaxSeconds)
	}
	if h.MessageRate != 0.2 {
		t.Errorf("rate = %v, want 2 messages / 10 s", h.MessageRate)
	}
	if h.Messages["status/applied"] != 1 || h.Events["action"] != 1 {
		t.Errorf("counters = %v %v", h.Messages, h.Events)
	}
	if h := s.Health(t0.Add(time.Minute)); h.LagMaxSeconds != 0 || h.MessageRate != 0 {
		t.Errorf("a minute later: lag %v rate %v, want 0 (window of 10 s)", h.LagMaxSeconds, h.MessageRate)
	}
}

// The store keeps nothing of a payload: the histories' connection reads
// the next packet into a history's buffer once it is applied.
func TestTheStoreKeepsNothingOfAPayload(t *testing.T) {
	h, _ := json.Marshal(fullHistory("n1", "plant-7", t0, 60))
	msgs := []Message{
		msg("status", status("online", 3, t0), t0),
		msg("history", h, t0),
		msg("event", event("ev-1", "incident", "wwan0", t0, map[string]any{"evidence": map[string]any{"reason": "dark for 90s"}}), t0),
	}
	s := NewStore("edgeheal/v1")
	for _, m := range msgs {
		if r := s.Apply(s.Prepare(m)); r != Applied {
			t.Fatalf("%s: %v, want applied", m.Topic, r)
		}
	}
	// As JSON, so that before holds its own bytes.
	snapshot := func() string {
		d, _ := s.Detail("n1", t0)
		b, err := json.MarshalIndent(d, "", " ")
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	before := snapshot()
	for _, m := range msgs {
		for i := range m.Payload {
			m.Payload[i] = 'X'
		}
	}
	if d := cmp.Diff(before, snapshot()); d != "" {
		t.Errorf("the node changed with the bytes of its payloads (-before +after):\n%s", d)
	}
}

// A bug met applying one message costs the view that message and no
// more: Apply recovers, counts it failed, keeps the panic and its stack
// for Health, counts the node as it is, and the next message applies.
func TestAPanicInApplyCostsTheViewThatMessageOnly(t *testing.T) {
	s := NewStore(wire.DefaultTopicPrefix)
	if r := s.Apply(nodeMsg("n1", "status", siteStatus("online", "a", 1, t0), t0)); r != Applied {
		t.Fatalf("the status: %v", r)
	}
	event := func(id string) Message {
		b, _ := json.Marshal(wire.EventMessage{V: 1, Node: "n1", Event: wire.Event{ID: id, Time: t0, Kind: "action", Target: "wg0"}})
		return nodeMsg("n1", "event", b, t0)
	}
	s.fault = func(m Message) {
		if strings.HasSuffix(m.Topic, "/event") {
			panic("a bug")
		}
	}
	if r := s.Apply(event("e1")); r != Failed {
		t.Fatalf("an event whose Apply panicked: %v, want failed", r)
	}
	h := s.Health(t0)
	if h.Messages["event/failed"] != 1 || h.Nodes != 1 || h.ByState[StateOnline] != 1 ||
		!strings.Contains(h.LastError, "n1: the view could not apply this event") ||
		!strings.Contains(h.LastFailure, "panic: a bug") || !strings.Contains(h.LastFailure, "fleet.(*Store).apply") {
		t.Errorf("after the panic: messages %v, nodes %d by state %v, last error %q, last failure %q", h.Messages, h.Nodes, h.ByState, h.LastError, h.LastFailure)
	}
	s.fault = nil
	if r := s.Apply(event("e2")); r != Applied {
		t.Errorf("the next event: %v, want applied", r)
	}
}

// A panic in a history's or a status's decoding, outside the store's
// lock, is that message's failure too.
func TestAPanicDecodingCostsTheViewThatMessageOnly(t *testing.T) {
	h, _ := json.Marshal(fullHistory("n1", "a", t0, 60))
	for kind, b := range map[string][]byte{"history": h, "status": siteStatus("online", "a", 1, t0)} {
		t.Run(kind, func(t *testing.T) {
			s := NewStore(wire.DefaultTopicPrefix)
			calls := 0
			s.fault = func(Message) {
				if calls++; calls == 1 {
					panic("a decoder's bug")
				}
			}
			m := s.Prepare(nodeMsg("n1", kind, b, t0))
			if r := s.Apply(m); r != Failed {
				t.Fatalf("a %s whose decoding panicked: %v, want failed", kind, r)
			}
			if h := s.Health(t0); h.Messages[kind+"/failed"] != 1 || !strings.Contains(h.LastFailure, "decodeRecovering") {
				t.Errorf("messages %v, last failure %q", h.Messages, h.LastFailure)
			}
			if r := s.Apply(s.Prepare(nodeMsg("n1", kind, b, t0.Add(time.Second)))); r != Applied {
				t.Errorf("the same %s again: %v, want applied", kind, r)
			}
		})
	}
}
