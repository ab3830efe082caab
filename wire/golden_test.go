package wire_test

import (
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/edgeheal/edgeheal/wire"
	"github.com/edgeheal/edgeheal/wire/wiretest"
)

var update = flag.Bool("update", false, "rewrite wire/testdata from the examples")

// TestGolden holds the format: each example encodes to its golden bytes,
// and the golden bytes decode to the example. A change to a field's name,
// type or omission shows here first; every reader's tests compare with
// the same files.
func TestGolden(t *testing.T) {
	for name, ex := range wiretest.Examples() {
		t.Run(name, func(t *testing.T) {
			got, err := wiretest.Encode(ex)
			if err != nil {
				t.Fatal(err)
			}
			if *update {
				if err := os.WriteFile(filepath.Join(wiretest.Dir(), name), got, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want := wiretest.Golden(t, name)
			if diff := cmp.Diff(string(want), string(got)); diff != "" {
				t.Errorf("%s (-golden +encoded):\n%s", name, diff)
			}
			back := reflect.New(reflect.TypeOf(ex))
			if err := json.Unmarshal(want, back.Interface()); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(ex, back.Elem().Interface()); diff != "" {
				t.Errorf("%s decoded (-example +decoded):\n%s", name, diff)
			}
		})
	}
}

func TestDecodeStatusAndEventRefuseWhatTheyCannotRead(t *testing.T) {
	st, err := wire.DecodeStatus(wiretest.Golden(t, wiretest.StatusFile))
	if err != nil || st.Checks == nil || st.Checks.Total != len(wiretest.Checks()) {
		t.Errorf("DecodeStatus(golden) = %+v, %v", st, err)
	}
	if _, err := wire.DecodeStatus(wiretest.Golden(t, wiretest.WillFile)); err != nil {
		t.Errorf("DecodeStatus(will) = %v", err)
	}
	if _, err := wire.DecodeEvent(wiretest.Golden(t, wiretest.EventFile)); err != nil {
		t.Errorf("DecodeEvent(golden) = %v", err)
	}
	for _, tc := range []struct{ name, doc string }{
		{"another version", `{"v":2,"state":"online","session":1}`},
		{"no state", `{"v":1,"session":1}`},
		{"not JSON", `{"v":1,`},
	} {
		if _, err := wire.DecodeStatus([]byte(tc.doc)); err == nil {
			t.Errorf("DecodeStatus(%s) = nil error", tc.name)
		}
	}
	for _, tc := range []struct{ name, doc string }{
		{"another version", `{"v":2,"id":"a","kind":"incident"}`},
		{"no id", `{"v":1,"kind":"incident"}`},
		{"no kind", `{"v":1,"id":"a"}`},
	} {
		if _, err := wire.DecodeEvent([]byte(tc.doc)); err == nil {
			t.Errorf("DecodeEvent(%s) = nil error", tc.name)
		}
	}
}

func TestDecodeHistoryRefusesWhatItCannotRead(t *testing.T) {
	h, err := wire.DecodeHistory(wiretest.Golden(t, wiretest.HistoryFile))
	if err != nil || len(h.Incidents) != 2 || len(h.Days.Healthy) != 2 {
		t.Fatalf("DecodeHistory(golden) = %+v, %v", h, err)
	}
	if a, ok := h.Days.Availability(); !ok || a < 0.9997 || a > 0.9998 {
		t.Errorf("availability over the golden days = %v, %v; want 121297/121327", a, ok)
	}
	if _, ok := (wire.Series{}).Availability(); ok {
		t.Error("an empty series has an availability")
	}
	for _, tc := range []struct{ name, doc string }{
		{"another version", `{"v":2,"node":"n"}`},
		{"no node", `{"v":1}`},
		{"series of different lengths", `{"v":1,"node":"n","hours":{"step_seconds":3600,"healthy":[1,2],"dark":[0],"degraded":[0,0],"incidents":[0,0]}}`},
		{"a series without a step", `{"v":1,"node":"n","days":{"healthy":[1],"dark":[0],"degraded":[0],"incidents":[0]}}`},
	} {
		if _, err := wire.DecodeHistory([]byte(tc.doc)); err == nil {
			t.Errorf("DecodeHistory(%s) = nil error", tc.name)
		}
	}
}

func TestNodeStateAndSummary(t *testing.T) {
	sum, state := wire.Summarize(wiretest.Checks())
	if state != wire.StateDegraded || sum.Total != 6 || sum.Healthy != 4 {
		t.Errorf("Summarize = %s, %d of %d healthy; want degraded, 4 of 6", state, sum.Healthy, sum.Total)
	}
	for _, c := range sum.Items {
		if c.Uplink != nil || c.Peer != nil || c.Workload != nil || c.PathMTU != nil {
			t.Errorf("summary of %s/%s keeps its typed part", c.Kind, c.Target)
		}
	}
	if st, _, _ := wire.NodeState(nil); st != wire.StateOnline {
		t.Errorf("NodeState(no checks) = %s, want online", st)
	}
}

func TestTopics(t *testing.T) {
	topic := wire.Topic(wire.DefaultTopicPrefix, "edge-17", wire.TopicStatus)
	node, kind, err := wire.ParseTopic(wire.DefaultTopicPrefix, topic)
	if err != nil || node != "edge-17" || kind != wire.TopicStatus {
		t.Errorf("ParseTopic(%q) = %q, %q, %v", topic, node, kind, err)
	}
	if _, kind, err := wire.ParseTopic(wire.DefaultTopicPrefix, wire.Topic(wire.DefaultTopicPrefix, "n", wire.TopicHistory)); err != nil || kind != wire.TopicHistory {
		t.Errorf("the history topic: %q, %v", kind, err)
	}
	for _, bad := range []string{"edgeheal/v2/n/status", "edgeheal/v1//status", "edgeheal/v1/n/x", "edgeheal/v1/n/status/x"} {
		if _, _, err := wire.ParseTopic(wire.DefaultTopicPrefix, bad); err == nil {
			t.Errorf("ParseTopic(%q) = nil error", bad)
		}
	}
}
