package main

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	mqtt "github.com/eclipse/paho.mqtt.golang"

	"github.com/edgeheal/edgeheal/internal/testsupport"
	"github.com/edgeheal/edgeheal/internal/testsupport/labtest"
	"github.com/edgeheal/edgeheal/lab"
	"github.com/edgeheal/edgeheal/wire"
)

// labHistory is `edgeheal history --json` from inside the edge namespace.
func labHistory(t *testing.T, l *lab.Lab, bin, cfg string) (wire.History, bool) {
	t.Helper()
	out, err := l.Exec(context.Background(), lab.Edge, bin, "history", "--json", "--config", cfg)
	if err != nil {
		return wire.History{}, false
	}
	h, err := wire.DecodeHistory(out)
	return h, err == nil
}

// closedPeerIncidents are h's closed incidents of peers, oldest first.
func closedPeerIncidents(h wire.History) []wire.Incident {
	var out []wire.Incident
	for _, in := range h.Incidents {
		if in.Kind == wire.KindPeer && !in.End.IsZero() {
			out = append(out, in)
		}
	}
	slices.Reverse(out)
	return out
}

// TestLabTheHistoryHoldsWhatTheCloudCouldNotHear: a tunnel dark for 10 s,
// then for 20 s while the cloud's broker is down too. The node's history
// has two incidents of about 10 and 20 s, with the repairs its events
// reported; both reach the cloud once the broker is back, as events and
// in the retained history, which is what a new subscriber gets first; and
// a restarted agent says the same.
func TestLabTheHistoryHoldsWhatTheCloudCouldNotHear(t *testing.T) {
	// The broker keeps its sessions across its restart, as a cloud's does:
	// the cloud's subscriber below misses nothing published while it is
	// away, whichever of it and the agent is back first.
	l := labtest.New(t, lab.Options{Broker: lab.BrokerMosquitto, BrokerPersistence: true, NoTelemetry: true, OffloadOff: true})
	bin := buildBinary(t)
	dir := t.TempDir()
	state := filepath.Join(dir, "state")
	cfg := filepath.Join(dir, "config.yaml")
	node := "hist-" + l.Prefix()
	writeFile(t, cfg, fmt.Sprintf(`version: 1
node: {name: %s, site: lab}
interval: 300ms
uplinks: [{name: %s}]
tunnels:
  - interface: %s
    endpoint_host: %s
    probe: {target: "tcp://%s", interval: 300ms, timeout: 300ms, misses: 3}
report:
  mqtt: {broker: "tcp://%s"}
  http: {listen: "127.0.0.1:9469", socket: %s/edgeheal.sock}
  state_dir: %s
`, node, l.EdgeUplink(), l.EdgeWG(), lab.CloudHost, l.BrokerTunnelAddr(), l.BrokerPublicAddr(), state, state))
	d := labAgent(t, l, bin, cfg, state)

	peerOK := func() bool {
		st, ok := labAgentStatus(t, l, bin, state)
		if !ok {
			return false
		}
		peers := 0
		for _, c := range st.Checks {
			if c.Kind == wire.KindPeer {
				// Healthy, and for a while: its probes answer.
				if !c.Healthy || time.Since(c.Since) < 2*time.Second {
					return false
				}
				peers++
			}
		}
		return st.MQTT != nil && st.MQTT.Connected && peers > 0
	}
	testsupport.WaitFor(t, 30*time.Second, "the tunnel healthy for 2 s and the agent connected", peerOK)
	if h, ok := labHistory(t, l, bin, cfg); !ok || len(h.Incidents) != 0 {
		t.Fatalf("before any fault the history has %d incidents (read: %v), want none", len(h.Incidents), ok)
	}

	// The cloud listens from the start with a persistent session, as the
	// fleet view does: what the node delivers before the broker stops
	// reaches it at once, what the node keeps for later reaches it once
	// both are back.
	events := make(chan mqtt.Message, 10000)
	cloudID := "cloud-" + l.Prefix()
	early := cloudSession(t, l, cloudID, "edgeheal/v1/"+node+"/#", events)
	defer early.Disconnect(100)

	// Dark for 10 s, the broker up (the blackhole cuts the node's reports
	// too: the cloud hears of it afterwards, or once the broker is back).
	const first, second = 10 * time.Second, 20 * time.Second
	if err := l.Blackhole(first); err != nil {
		t.Fatal(err)
	}
	time.Sleep(first)
	testsupport.WaitFor(t, 30*time.Second, "the first incident closed in the history", func() bool {
		h, ok := labHistory(t, l, bin, cfg)
		return ok && len(closedPeerIncidents(h)) == 1
	})

	// Dark for 20 s with the broker down, and the broker down a while
	// longer: the cloud can hear nothing of it.
	if err := l.StopBroker(); err != nil {
		t.Fatal(err)
	}
	if err := l.Blackhole(second); err != nil {
		t.Fatal(err)
	}
	time.Sleep(second)
	testsupport.WaitFor(t, 30*time.Second, "the second incident closed in the history", func() bool {
		h, ok := labHistory(t, l, bin, cfg)
		return ok && len(closedPeerIncidents(h)) == 2
	})
	h, _ := labHistory(t, l, bin, cfg)
	local := closedPeerIncidents(h)
	for i, want := range []time.Duration{first, second} {
		in := local[i]
		t.Logf("incident %d: %.2f s (dark for %s), diagnosis %q, repairs %v, healed by %q", i+1, in.DurationSeconds, want, in.Diagnosis, in.Repairs, in.HealedBy)
		if math.Abs(in.DurationSeconds-want.Seconds()) > 1 {
			t.Errorf("incident %d lasted %.2f s, want %s ± 1 s: from the last good observation to the first good one again", i+1, in.DurationSeconds, want)
		}
	}

	// The broker back: every event of both incidents reaches the cloud,
	// and so does the history with both.
	if err := l.StartBroker(); err != nil {
		t.Fatal(err)
	}
	sub := cloudSession(t, l, cloudID, "edgeheal/v1/"+node+"/#", events)
	defer sub.Disconnect(100)
	actions := map[string][]string{} // incident id → the actions the events reported during it
	recovered := map[string]bool{}
	seen := map[string]bool{} // event ids: the session may hear one twice (QoS 1)
	var cloudHistory wire.History
	defer func() {
		if t.Failed() {
			t.Logf("at the cloud: %d events, recovered %v, a history with %d closed incidents", len(seen), recovered, len(closedPeerIncidents(cloudHistory)))
		}
	}()
	testsupport.WaitFor(t, 60*time.Second, "both incidents' events and a history with both at the cloud", func() bool {
		for {
			select {
			case m := <-events:
				switch {
				case strings.HasSuffix(m.Topic(), "/history"):
					if hh, err := wire.DecodeHistory(m.Payload()); err == nil {
						cloudHistory = hh
					}
				case strings.HasSuffix(m.Topic(), "/event"):
					var e wire.EventMessage
					if json.Unmarshal(m.Payload(), &e) != nil || seen[e.ID] {
						continue
					}
					seen[e.ID] = true
					for _, in := range local {
						// An incident's end is its start and a duration
						// measured on the monotonic clock, an event's time the
						// wall clock's: they may part by a little.
						const slack = 50 * time.Millisecond
						if e.Time.Before(in.Start.Add(-slack)) || e.Time.After(in.End.Add(slack)) {
							continue
						}
						// A repair is an action on the peer or on its tunnel,
						// other than applying the keepalive policy.
						onIt := e.Target == in.Target || strings.HasPrefix(in.Target, e.Target+"/")
						switch {
						case e.Kind == wire.EventAction && onIt && e.Result != "skipped" && e.Action != "keepalive":
							actions[in.ID] = append(actions[in.ID], e.Action)
						case e.Kind == wire.EventRecovered && e.Target == in.Target:
							recovered[in.ID] = true
						}
					}
				}
				continue
			default:
			}
			break
		}
		return recovered[local[0].ID] && recovered[local[1].ID] && len(closedPeerIncidents(cloudHistory)) >= 2
	})
	for _, in := range local {
		if !slices.Equal(in.Repairs, actions[in.ID]) && !(len(in.Repairs) == 0 && len(actions[in.ID]) == 0) {
			t.Errorf("incident %s lists the repairs %v; its events reported %v", in.ID, in.Repairs, actions[in.ID])
		}
	}
	cloud := closedPeerIncidents(cloudHistory)
	for i := range local {
		if cloud[len(cloud)-2+i].ID != local[i].ID || cloud[len(cloud)-2+i].DurationSeconds != local[i].DurationSeconds {
			t.Errorf("the cloud's history has %+v, the node's %+v", cloud[len(cloud)-2+i], local[i])
		}
	}

	// What a new subscriber gets first is the retained history, with both.
	first1 := make(chan mqtt.Message, 10)
	late := cloudSubscriber(t, l, "edgeheal/v1/"+node+"/history", first1)
	defer late.Disconnect(100)
	select {
	case m := <-first1:
		hh, err := wire.DecodeHistory(m.Payload())
		if !m.Retained() || err != nil || len(closedPeerIncidents(hh)) < 2 {
			t.Errorf("a new subscriber's first history: retained %v, %v, %d closed incidents; want the retained one with both", m.Retained(), err, len(closedPeerIncidents(hh)))
		}
	case <-time.After(10 * time.Second):
		t.Error("a new subscriber got no retained history within 10 s")
	}

	// A restarted agent has the same incidents.
	if err := d.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-d.done:
		d.done <- err
	case <-time.After(15 * time.Second):
		t.Fatal("the agent still runs 15 s after SIGTERM")
	}
	labAgent(t, l, bin, cfg, state)
	testsupport.WaitFor(t, 30*time.Second, "the restarted agent's history", func() bool {
		_, err := l.Exec(context.Background(), lab.Edge, bin, "status", "--socket", filepath.Join(state, "edgeheal.sock"))
		return err == nil || strings.Contains(err.Error(), "exit status 1")
	})
	h, ok := labHistory(t, l, bin, cfg)
	if !ok {
		t.Fatal("no history from the restarted agent")
	}
	again := closedPeerIncidents(h)
	if len(again) != 2 {
		t.Fatalf("after a restart: %d closed incidents, want the same 2", len(again))
	}
	for i := range local {
		if again[i].ID != local[i].ID || again[i].DurationSeconds != local[i].DurationSeconds || !slices.Equal(again[i].Repairs, local[i].Repairs) {
			t.Errorf("after a restart, incident %d is %+v; before it was %+v", i+1, again[i], local[i])
		}
	}
}
