package mqtt

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"

	"github.com/edgeheal/edgeheal/agent/core"
	"github.com/edgeheal/edgeheal/configs"
)

// redeliveryTrials is how many broker outages one benchmark run makes.
const redeliveryTrials = 10

// BenchmarkMQTTRedeliveryAfterTheBrokerReturns measures how long after a
// broker outage the events queued during it reach the cloud: per trial the
// broker (TLS, passwords, ACL, persistence) stops for 8 s while 20 events
// are queued, starts again, and the time from its listening to the last
// event's arrival at a subscriber is taken. The publisher runs with the
// shipped reconnect defaults. Reported: p50, p95 and max over the trials
// (the subscriber's own reconnect, every 50 ms, is included). About two
// minutes; no root.
func BenchmarkMQTTRedeliveryAfterTheBrokerReturns(b *testing.B) {
	if testing.Short() {
		b.Skip("ten broker outages: skipped with -short")
	}
	for b.Loop() {
		took := redeliveryTrialsRun(b)
		slices.Sort(took)
		b.ReportMetric(quantile(took, 0.5).Seconds(), "p50-s")
		b.ReportMetric(quantile(took, 0.95).Seconds(), "p95-s")
		b.ReportMetric(took[len(took)-1].Seconds(), "max-s")
		b.Logf("redelivery after the broker's return over %d trials: %v", len(took), took)
	}
}

func redeliveryTrialsRun(b *testing.B) []time.Duration {
	m := newMosquitto(b, map[string]string{"node-r": "pw-r", "watcher": "pw-w"})
	m.Start()
	w := m.fastWatcher(b, "pw-w")
	cfg := m.nodeConfig(b, "node-r", "pw-r")
	cfg.Reconnect = configs.Reconnect{ // the shipped defaults (configs/defaults.yaml)
		ProbeInterval: configs.Duration(2 * time.Second), ConnectJitter: configs.Duration(500 * time.Millisecond),
		MinDelay: configs.Duration(time.Second), MaxDelay: configs.Duration(2 * time.Minute),
		StableAfter: configs.Duration(time.Minute), StartJitter: configs.Duration(2 * time.Second),
	}
	var took []time.Duration
	for trial := range redeliveryTrials {
		took = append(took, redeliveryTrial(b, m, w, cfg, fmt.Sprintf("trial%02d", trial)))
	}
	return took
}

// redeliveryTrial is one outage, with a publisher of its own: each trial
// is a first outage after a connection that lasted, as in the field.
func redeliveryTrial(b *testing.B, m *testBroker, w *watcher, cfg configs.ReportMQTT, name string) time.Duration {
	stateDir := b.TempDir()
	ob := openOutbox(b, stateDir)
	p, err := NewPublisher(Options{Config: cfg, Node: configs.Node{Name: "node-r"}, Outbox: ob, Session: OpenSession(stateDir, nil)})
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
	defer func() { cancel(); <-done }()
	waitUntil(b, 30*time.Second, "the first connect", p.Connected)
	m.Stop()
	ids := eventIDs(name, 20)
	for _, id := range ids {
		if err := ob.Append(core.Event{ID: id, Kind: "incident", Target: "wg0"}); err != nil {
			b.Fatal(err)
		}
	}
	time.Sleep(8 * time.Second)
	m.Start()
	back := time.Now()
	last := back
	for _, a := range w.nextEvents(b, ids) {
		if slices.Contains(ids, a.msg.ID) && a.at.After(last) {
			last = a.at
		}
	}
	waitUntil(b, 30*time.Second, "the outbox to empty", func() bool { return ob.Depth() == 0 })
	return last.Sub(back)
}

// quantile of sorted durations, nearest rank.
func quantile(sorted []time.Duration, q float64) time.Duration {
	i := int(q*float64(len(sorted))+0.999999) - 1
	return sorted[max(0, min(i, len(sorted)-1))]
}

func waitUntil(tb testing.TB, limit time.Duration, what string, ok func() bool) {
	tb.Helper()
	deadline := time.Now().Add(limit)
	for !ok() {
		if time.Now().After(deadline) {
			tb.Fatalf("%s: not within %s", what, limit)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// fastWatcher is watch with a reconnect every 50 ms, so that what it
// measures is the publisher's return, not its own.
func (m *testBroker) fastWatcher(tb testing.TB, password string) *watcher {
	tb.Helper()
	cert, key := m.PKI.Issue(tb, "watcher", false)
	tc, err := configs.TLS{CA: m.PKI.CAFile, Cert: cert, Key: key, ServerName: "broker.test"}.ClientConfig("127.0.0.1")
	if err != nil {
		tb.Fatal(err)
	}
	return m.watchWith(tb, password, tc, func(o *paho.ClientOptions) {
		o.SetMaxReconnectInterval(50 * time.Millisecond).SetConnectRetryInterval(50 * time.Millisecond)
	})
}
