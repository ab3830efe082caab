package fleet

import (
	"encoding/json"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/edgeheal/edgeheal/wire"
	"github.com/edgeheal/edgeheal/wire/wiretest"
)

// The view reads the wire format's golden payloads (the ones the agent's
// publisher tests hold its output to) with every field it shows: the
// JSON is the contract between the two, and the view does not link the
// agent.
func TestTheViewReadsTheWireFormat(t *testing.T) {
	s := NewStore(wire.DefaultTopicPrefix)
	st, ev := wiretest.Status(), wiretest.EventMessage()
	topic := func(kind string) string { return wire.Topic(wire.DefaultTopicPrefix, st.Node, kind) }
	if r := s.Apply(Message{Topic: topic(wire.TopicStatus), Payload: wiretest.Golden(t, wiretest.StatusFile), Received: t0}); r != Applied {
		t.Fatalf("the golden status: %v, want applied", r)
	}
	if r := s.Apply(Message{Topic: topic(wire.TopicEvent), Payload: wiretest.Golden(t, wiretest.EventFile), Received: t0}); r != Applied {
		t.Fatalf("the golden event: %v, want applied", r)
	}
	d, ok := s.Detail(st.Node, t0)
	if !ok {
		t.Fatal("the node is not in the view")
	}
	got := Node{Name: d.Name, Site: d.Site, State: d.State, Session: d.Session, StatusTS: d.StatusTS, Version: d.Version,
		ConfigRevision: d.ConfigRevision, ChecksTotal: d.ChecksTotal, ChecksHealthy: d.ChecksHealthy, Checks: d.Checks}
	want := Node{Name: st.Node, Site: st.Site, State: st.State, Session: st.Session, StatusTS: st.TS, Version: st.Version,
		ConfigRevision: st.ConfigRevision, ChecksTotal: st.Checks.Total, ChecksHealthy: st.Checks.Healthy, Checks: st.Checks.Items}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("the node from the golden status (-want +got):\n%s", diff)
	}
	if len(d.Events) != 1 || d.Events[0].Kind != ev.Kind || !d.Events[0].TS.Equal(ev.Time) || d.Events[0].Summary != ev.Summary {
		t.Errorf("the golden event in the view: %+v, want kind %s at %s", d.Events, ev.Kind, ev.Time)
	}
	if r := s.Apply(Message{Topic: topic(wire.TopicStatus), Payload: wiretest.Golden(t, wiretest.WillFile), Received: t0}); r != Applied {
		t.Errorf("the golden Will: %v, want applied", r)
	}
	if d, _ := s.Detail(st.Node, t0); d.State != StateLost {
		t.Errorf("after the Will the node is %s, want lost", d.State)
	}
	for _, state := range []string{wire.StateOnline, wire.StateDegraded, wire.StateOffline, wire.StateLost} {
		found := false
		for _, v := range States {
			found = found || v == state
		}
		if !found {
			t.Errorf("wire state %q is not one the view knows", state)
		}
	}
}

// The view decodes histories with go-json-experiment's decoder, not
// encoding/json (for speed, decodeHistory): it reads what wire reads into
// the same History, and refuses what wire refuses.
func TestTheViewDecodesHistoriesAsWireDoes(t *testing.T) {
	full, _ := json.Marshal(fullHistory("node-00001", "site-01", t0, 300))
	for _, tc := range []struct{ name, doc string }{
		{"the golden history", string(wiretest.Golden(t, wiretest.HistoryFile))},
		{"a full history", string(full)},
		{"another version", `{"v":2,"node":"n"}`},
		{"no node", `{"v":1}`},
		{"series of different lengths", `{"v":1,"node":"n","hours":{"step_seconds":3600,"healthy":[1,2],"dark":[0],"degraded":[0,0],"incidents":[0,0]}}`},
		{"a series without a step", `{"v":1,"node":"n","days":{"healthy":[1],"dark":[0],"degraded":[0],"incidents":[0]}}`},
		{"not JSON to its end", `{"v":1,"node":"n"`},
		{"a number where a list goes", `{"v":1,"node":"n","incidents":7}`},
		{"a time that is not one", `{"v":1,"node":"n","ts":"yesterday"}`},
		{"names in another case", `{"V":1,"NODE":"n","Site":"s"}`},
		{"a name twice", `{"v":1,"node":"a","node":"b"}`},
		{"invalid UTF-8 in a string", "{\"v\":1,\"node\":\"n\xff\"}"},
		{"null where a list goes", `{"v":1,"node":"n","targets":null,"incidents":null}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			want, wantErr := wire.DecodeHistory([]byte(tc.doc))
			var got wire.History
			err := decodeHistory([]byte(tc.doc), &got)
			if wantErr != nil {
				want = wire.History{} // wire returns nothing with an error; the view drops what it decoded
				got = want
			}
			if (err != nil) != (wantErr != nil) {
				t.Fatalf("decodeHistory: error %v; wire.DecodeHistory: error %v", err, wantErr)
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("decodeHistory and wire.DecodeHistory differ (-wire +view):\n%s", diff)
			}
		})
	}
}

// A history decoded into the room of another is the same as one decoded
// alone: nothing of the first (an incident's end, its repairs, a
// target's repairs, more days) is left in the second.
func TestAHistoryDecodedAfterAnotherKeepsNothingOfIt(t *testing.T) {
	full, _ := json.Marshal(fullHistory("node-00001", "site-01", t0, 300))
	golden := wiretest.Golden(t, wiretest.HistoryFile)
	want, err := wire.DecodeHistory(golden)
	if err != nil {
		t.Fatal(err)
	}
	var h wire.History
	if err := decodeHistory(full, &h); err != nil {
		t.Fatal(err)
	}
	if err := decodeHistory(golden, &h); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, h, cmpopts.EquateEmpty()); diff != "" {
		t.Errorf("the golden history after a full one (-alone +after):\n%s", diff)
	}
}

// Statuses and events too: the view reads what wire reads and refuses
// what wire refuses.
func TestTheViewDecodesStatusesAndEventsAsWireDoes(t *testing.T) {
	docs := []struct{ name, doc string }{
		{"the golden status", string(wiretest.Golden(t, wiretest.StatusFile))},
		{"the golden Will", string(wiretest.Golden(t, wiretest.WillFile))},
		{"the golden event", string(wiretest.Golden(t, wiretest.EventFile))},
		{"another version", `{"v":2,"state":"online","id":"a","kind":"action"}`},
		{"no state, no id, no kind", `{"v":1}`},
		{"not JSON to its end", `{"v":1,"state":"online"`},
		{"a time that is not one", `{"v":1,"state":"online","id":"a","kind":"action","ts":"yesterday"}`},
		{"names in another case", `{"V":1,"STATE":"online","Id":"a","KIND":"action"}`},
		{"a name twice", `{"v":1,"state":"online","state":"lost","id":"a","kind":"action","kind":"incident"}`},
		{"invalid UTF-8 in a string", "{\"v\":1,\"state\":\"on\xffline\",\"id\":\"a\",\"kind\":\"action\"}"},
		{"a negative session", `{"v":1,"state":"online","session":-1}`},
		{"numbers in the evidence", `{"v":1,"id":"a","kind":"action","evidence":{"n":1e3,"m":[1,2.5]}}`},
		// The view reports an error where its decoder meets it, not after a
		// first pass over the whole payload: refused all the same.
		{"broken after fields that decode", `{"v":1,"state":"online","id":"a","kind":"action","evidence":{"n":1,}}`},
		{"a wrong type before broken syntax", `{"v":"1","state":"online","id":"a","kind":"action",]`},
		{"a value after the document", `{"v":1,"state":"online","id":"a","kind":"action"} {}`},
	}
	for _, tc := range docs {
		t.Run(tc.name, func(t *testing.T) {
			agree(t, "status", wire.DecodeStatus, tc.doc)
			agree(t, "event", wire.DecodeEvent, tc.doc)
		})
	}
}

// agree checks that decode, the view's, and wire's decoder read doc alike.
func agree[T any, P interface {
	*T
	Validate() error
}](t *testing.T, what string, wireDecode func([]byte) (T, error), doc string) {
	t.Helper()
	want, wantErr := wireDecode([]byte(doc))
	var got T
	err := decode(what, []byte(doc), P(&got))
	if (err != nil) != (wantErr != nil) {
		t.Fatalf("%s: the view's decode: error %v; wire's: error %v", what, err, wantErr)
	}
	if err == nil && !cmp.Equal(want, got) {
		t.Errorf("%s: the view's decode and wire's differ (-wire +view):\n%s", what, cmp.Diff(want, got))
	}
}

func FuzzDecode(f *testing.F) {
	f.Add([]byte(`{"v":1,"state":"online","session":1,"ts":"2026-11-29T12:00:00Z"}`))
	f.Add([]byte(`{"v":1,"id":"a","kind":"incident","seq":3,"session":2}`))
	f.Add([]byte(`{"v":1,"node":"n","ts":"2026-11-29T12:00:00Z","days":{"step_seconds":86400,"healthy":[1],"dark":[0],"degraded":[0],"incidents":[0]}}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		s := NewStore("p")
		s.Apply(Message{Topic: "p/n/status", Payload: b, Received: t0})
		s.Apply(Message{Topic: "p/n/event", Payload: b, Received: t0})
		s.Apply(Message{Topic: "p/n/history", Payload: b, Received: t0})
		s.Health(t0)
		s.Detail("n", t0)
		want, wantErr := wire.DecodeHistory(b)
		var got wire.History
		err := decodeHistory(b, &got)
		if (err != nil) != (wantErr != nil) || (err == nil && !cmp.Equal(want, got)) {
			t.Errorf("decodeHistory = %v, %v; wire.DecodeHistory = %v, %v", got, err, want, wantErr)
		}
		agree(t, "status", wire.DecodeStatus, string(b))
		agree(t, "event", wire.DecodeEvent, string(b))
	})
}
