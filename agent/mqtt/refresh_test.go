package mqtt

import (
	"context"
	"testing"
	"time"

	"github.com/edgeheal/edgeheal/agent/core"
	"github.com/edgeheal/edgeheal/agent/outbox"
	"github.com/edgeheal/edgeheal/configs"
	"github.com/edgeheal/edgeheal/wire"
)

// A connection whose path became smaller than it was made for loses every
// full-size segment and would wait its whole PUBACK timeout (here an hour)
// before reconnecting; Refresh (a path-MTU repair clamped the MSS) makes
// it connect again at once, and what it had in flight is delivered.
func TestRefreshReconnectsAConnectionThePathOutgrew(t *testing.T) {
	m := newMosquitto(t, map[string]string{"node-r": "pw-r", "watcher": "pw-w"})
	m.Start()
	w := m.watch(t, "pw-w")
	px := newStallProxy(t, m.Addr())
	cfg := m.nodeConfig(t, "node-r", "pw-r")
	cfg.Broker = "ssl://" + px.ln.Addr().String()
	stateDir := t.TempDir()
	ob, err := outbox.Open(stateDir, outbox.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer ob.Close()
	p, err := NewPublisher(Options{Config: cfg, Node: configs.Node{Name: "node-r"}, Outbox: ob, Session: OpenSession(stateDir, nil),
		DialTimeout: 2 * time.Second, AckTimeout: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	defer runPublisher(t, context.Background(), p)()
	topic := testPrefix + "/node-r/status"
	s1 := num(w.nextStatus(t, topic, func(m map[string]any) bool { return m["state"] == wire.StateOnline }), "session")

	px.stalled.Store(true) // the PUBACK is lost, as a full-size segment would be
	if err := ob.Append(core.Event{ID: "in-flight", Kind: "incident"}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond)
	px.stalled.Store(false) // new connections get through: the clamp is in place
	p.Refresh("path MTU: TCP MSS clamped")
	st := w.nextStatus(t, topic, func(m map[string]any) bool { return m["state"] == wire.StateOnline && num(m, "session") > s1 })
	if num(st, "session") <= s1 {
		t.Errorf("session = %v, want a new one", st["session"])
	}
	if seen := w.collectEvents(t, []string{"in-flight"}); seen["in-flight"] < 1 {
		t.Error("the event in flight on the old connection was not delivered")
	}
}

func TestOutgrowsTheConnection(t *testing.T) {
	for _, tc := range []struct {
		ev   core.Event
		want bool
	}{
		{core.Event{Kind: "action", Action: "mss-clamp", Result: "changed", Evidence: map[string]any{"lowered": true}}, true},
		{core.Event{Kind: "action", Action: "mss-clamp", Result: "changed", Evidence: map[string]any{"reason": "relaxed"}}, false},
		{core.Event{Kind: "action", Action: "mss-clamp", Result: "dry-run", Evidence: map[string]any{"lowered": true}}, false},
		{core.Event{Kind: "action", Action: "handshake", Result: "changed"}, false},
	} {
		if got := OutgrowsTheConnection(tc.ev); got != tc.want {
			t.Errorf("OutgrowsTheConnection(%+v) = %v, want %v", tc.ev, got, tc.want)
		}
	}
}
