package mqtt

import (
	"context"
	"testing"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"

	"github.com/edgeheal/edgeheal/agent/core"
	"github.com/edgeheal/edgeheal/agent/history"
	"github.com/edgeheal/edgeheal/configs"
	"github.com/edgeheal/edgeheal/wire"
	"github.com/edgeheal/edgeheal/wire/wiretest"
)

func TestTheHistoryIsPublishedOnConnectAtACloseAndRarelyOtherwise(t *testing.T) {
	t0 := time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC)
	h := &historyPublisher{}
	if !h.due(t0, 0, 0) {
		t.Error("a connection's first history is not due")
	}
	h.at, h.incidents, h.closed = t0, 5, 2
	for _, c := range []struct {
		name              string
		after             time.Duration
		incidents, closed uint64
		want              bool
	}{
		{"nothing changed", 59 * time.Minute, 5, 2, false},
		{"an hour passed: the seconds are refreshed", time.Hour, 5, 2, true},
		{"an incident changed within the minute", 30 * time.Second, 6, 2, false},
		{"an incident changed a minute later", time.Minute, 6, 2, true},
		{"an incident closed at once", time.Second, 7, 3, true},
	} {
		if got := h.due(t0.Add(c.after), c.incidents, c.closed); got != c.want {
			t.Errorf("%s: due = %v, want %v", c.name, got, c.want)
		}
	}
}

// subscribeHistory subscribes a new client to topic and returns what it
// receives, decoded; the first is the retained history, if any.
func subscribeHistory(t *testing.T, m *testBroker, password, topic string) <-chan wire.History {
	t.Helper()
	got := make(chan wire.History, 100)
	w := m.watch(t, password)
	tok := w.c.Subscribe(topic, 1, func(_ paho.Client, msg paho.Message) {
		wiretest.WithinShape(t, msg.Payload(), wiretest.HistoryFile)
		h, err := wire.DecodeHistory(msg.Payload())
		if err != nil {
			t.Errorf("history on %s does not decode: %v\n%s", topic, err, msg.Payload())
			return
		}
		got <- h
	})
	if !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		t.Fatalf("subscribing to %s: %v", topic, tok.Error())
	}
	return got
}

func nextHistory(t *testing.T, c <-chan wire.History, ok func(wire.History) bool) wire.History {
	t.Helper()
	deadline := time.After(20 * time.Second)
	for {
		select {
		case h := <-c:
			if ok(h) {
				return h
			}
		case <-deadline:
			t.Fatal("no matching history within 20 s")
		}
	}
}

func TestTheHistoryIsRetainedAndReplacedWhenAnIncidentCloses(t *testing.T) {
	m := newMosquitto(t, map[string]string{"node-y": "pw-y", "watcher": "pw-w"})
	m.Start()
	stateDir := t.TempDir()
	ob := openOutbox(t, stateDir)
	book := history.New("node-y", "plant-7", 10*time.Second)
	now := time.Now()
	peer := func(state string) []wire.Check {
		return []wire.Check{{Kind: wire.KindPeer, Target: "wg0/AbCd", State: state, Healthy: state == wire.CheckOK}}
	}
	book.Observe(peer(wire.CheckOK), now.Add(-3*time.Second))
	book.Observe(peer(wire.CheckDown), now)
	book.Event(core.Event{ID: "inc-1", Time: now, Kind: wire.EventIncident, Target: "wg0/AbCd", Result: "opened", Summary: "wg0/AbCd dark"})

	p, err := NewPublisher(Options{Config: m.nodeConfig(t, "node-y", "pw-y"), Node: configs.Node{Name: "node-y", Site: "plant-7"},
		Outbox: ob, Session: OpenSession(stateDir, nil), DialTimeout: 3 * time.Second, History: book})
	if err != nil {
		t.Fatal(err)
	}
	topic := testPrefix + "/node-y/history"
	if p.HistoryTopic() != topic {
		t.Fatalf("history topic %q, want %q", p.HistoryTopic(), topic)
	}
	first := subscribeHistory(t, m, "pw-w", topic)
	defer runPublisher(t, context.Background(), p)()

	h := nextHistory(t, first, func(wire.History) bool { return true })
	if h.Node != "node-y" || len(h.Incidents) != 1 || !h.Incidents[0].End.IsZero() {
		t.Fatalf("the history published at connect: %+v, want node-y's one open incident", h)
	}

	// The incident closes: the history is replaced at once, not a minute
	// later.
	book.Event(core.Event{ID: "act-1", Time: now, Kind: wire.EventAction, Target: "wg0/AbCd", Action: "handshake", Result: "changed"})
	book.Event(core.Event{ID: "rec-1", Time: now.Add(4 * time.Second), Kind: wire.EventRecovered, Target: "wg0/AbCd", Duration: 7,
		Evidence: map[string]any{"how": "healed by handshake"}})
	// nextHistory waits 20 s at most: well within the minute other changes wait.
	h = nextHistory(t, first, func(h wire.History) bool { return len(h.Incidents) == 1 && !h.Incidents[0].End.IsZero() })
	if in := h.Incidents[0]; in.HealedBy != "handshake" || in.DurationSeconds != 7 {
		t.Errorf("the closed incident: %+v, want 7 s healed by handshake", in)
	}

	// A subscriber that comes later gets the newest history first, retained.
	late := subscribeHistory(t, m, "pw-w", topic)
	h = nextHistory(t, late, func(wire.History) bool { return true })
	if len(h.Incidents) != 1 || h.Incidents[0].End.IsZero() {
		t.Errorf("a late subscriber's first history: %+v, want the closed incident", h.Incidents)
	}
}
