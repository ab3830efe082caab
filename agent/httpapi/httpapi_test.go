package httpapi

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/edgeheal/edgeheal/agent/metrics"
	"github.com/edgeheal/edgeheal/wire"
	"github.com/edgeheal/edgeheal/wire/wiretest"
)

// fakeAgent is a hand-written AgentState that logs calls.
type fakeAgent struct {
	mu        sync.Mutex
	calls     []string
	checks    []wire.Check
	ready     bool
	detail    string
	progress  time.Time
	workloads map[string]bool
}

func (f *fakeAgent) log(c string) { f.mu.Lock(); f.calls = append(f.calls, c); f.mu.Unlock() }
func (f *fakeAgent) Checks() []wire.Check {
	f.log("Checks")
	return f.checks
}
func (f *fakeAgent) Ready() (bool, string) { f.log("Ready"); return f.ready, f.detail }
func (f *fakeAgent) LastProgress() time.Time {
	f.log("LastProgress")
	return f.progress
}
func (f *fakeAgent) WorkloadReady(name string) (bool, string, bool) {
	f.log("WorkloadReady " + name)
	ok, found := f.workloads[name]
	if !found {
		return false, "", false
	}
	if !ok {
		return false, "mqtt connect from the pod timed out", true
	}
	return true, "", true
}

var testNow = time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)

func TestHealthEndpoints(t *testing.T) {
	tests := []struct {
		name     string
		agent    *fakeAgent
		started  time.Time
		path     string
		wantCode int
		wantBody string
	}{
		{"livez is ok after a recent round", &fakeAgent{progress: testNow.Add(-5 * time.Second)}, testNow, "/livez", 200, "ok: last round 5s ago"},
		{"healthz is the same as livez", &fakeAgent{progress: testNow.Add(-5 * time.Second)}, testNow, "/healthz", 200, "ok: last round 5s ago"},
		{"livez fails when the loop stalled", &fakeAgent{progress: testNow.Add(-3 * time.Minute)}, testNow, "/livez", 503, "the control loop made no progress for 3m0s (limit 2m0s)"},
		{"livez is ok while starting", &fakeAgent{}, testNow.Add(-10 * time.Second), "/livez", 200, "ok: starting"},
		{"livez fails when the first round never completes", &fakeAgent{}, testNow.Add(-5 * time.Minute), "/livez", 503, "the control loop completed no round in the 5m0s since start (limit 2m0s)"},
		{"readyz is ok when ready", &fakeAgent{ready: true}, testNow, "/readyz", 200, "ok"},
		{"readyz says what is missing", &fakeAgent{detail: "first round not done"}, testNow, "/readyz", 503, "not ready: first round not done"},
		{"a healthy workload is ready", &fakeAgent{workloads: map[string]bool{"plc": true}}, testNow, "/readyz/workload/plc", 200, "ok"},
		{"an unhealthy workload is not ready", &fakeAgent{workloads: map[string]bool{"plc": false}}, testNow, "/readyz/workload/plc", 503, "not ready: mqtt connect from the pod timed out"},
		{"an unknown workload is 404", &fakeAgent{workloads: map[string]bool{}}, testNow, "/readyz/workload/nope", 404, `no workload "nope" is configured`},
		{"metrics are served", &fakeAgent{}, testNow, "/metrics", 200, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clock := tt.started
			s := NewServer(ServerOptions{State: tt.agent, Metrics: metrics.New(metrics.Options{Version: "t"}).Handler(), Now: func() time.Time { return clock }})
			clock = testNow
			rec := httptest.NewRecorder()
			s.Handler().ServeHTTP(rec, httptest.NewRequest("GET", tt.path, nil))
			if rec.Code != tt.wantCode {
				t.Errorf("code = %d, want %d (body %q)", rec.Code, tt.wantCode, rec.Body.String())
			}
			if tt.wantBody != "" && strings.TrimSpace(rec.Body.String()) != tt.wantBody {
				t.Errorf("body = %q, want %q", strings.TrimSpace(rec.Body.String()), tt.wantBody)
			}
		})
	}
}

type fakeOutboxStats struct {
	depth   int
	dropped uint64
}

func (f fakeOutboxStats) Depth() int      { return f.depth }
func (f fakeOutboxStats) Dropped() uint64 { return f.dropped }

func TestStatusShowsChecksOutboxAndMQTT(t *testing.T) {
	s := NewLocal(ServerOptions{
		State: &fakeAgent{ready: true, progress: testNow.Add(-2 * time.Second), checks: []wire.Check{
			{Kind: "uplink", Target: "wwan0", State: "ok", Healthy: true},
			{Kind: "peer", Target: "wg0/AbCd", State: "healing", Healthy: false},
		}},
		Outbox: fakeOutboxStats{3, 7},
		MQTT: func() wire.MQTTInfo {
			return wire.MQTTInfo{Broker: "ssl://broker.example:8883", ClientID: "edgeheal-edge-17", Connected: true, Session: 12}
		},
		Info: func() wire.NodeInfo { return wire.NodeInfo{Node: "edge-17", Version: "1.2.3"} },
		Now:  func() time.Time { return testNow },
	})
	rec := httptest.NewRecorder()
	s.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/v1/status", nil))
	var got wire.LocalStatus
	if err := json.Unmarshal(rec.Body.Bytes(), &got); err != nil {
		t.Fatalf("/v1/status: %v: %s", err, rec.Body.String())
	}
	wiretest.WithinShape(t, rec.Body.Bytes(), wiretest.LocalStatusFile)
	if got.State != wire.StateDegraded || got.Outbox.Depth != 3 || got.Outbox.Dropped != 7 || got.MQTT.Session != 12 || len(got.Checks) != 2 || got.Node != "edge-17" {
		t.Errorf("status = %+v", got)
	}
}

func TestServerRunServesUntilItsContextEnds(t *testing.T) {
	s := NewServer(ServerOptions{Listen: "127.0.0.1:0", State: &fakeAgent{}})
	if err := s.Listen(); err != nil {
		t.Fatal(err)
	}
	addr := s.Addr().String()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx) }()
	resp, err := http.Get("http://" + addr + "/livez")
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Serve returned %v after its context ended, want nil", err)
	}
	if _, err := http.Get("http://" + addr + "/livez"); err == nil {
		t.Error("still serving after Serve returned")
	}
	if s.Addr() != nil {
		t.Errorf("Addr = %v after Serve returned, want nil", s.Addr())
	}
}

func TestServerRunFailsOnATakenPort(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	s := NewServer(ServerOptions{Listen: l.Addr().String(), State: &fakeAgent{}})
	err = s.Run(context.Background())
	if err == nil || !strings.Contains(err.Error(), l.Addr().String()) {
		t.Errorf("Run on a taken port = %v, want an error naming the address", err)
	}
}
