package report

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/edgeheal/edgeheal/agent"
)

// fakeAgent is a hand-written AgentState that logs calls.
type fakeAgent struct {
	mu        sync.Mutex
	calls     []string
	checks    []agent.Check
	ready     bool
	detail    string
	progress  time.Time
	workloads map[string]bool
}

func (f *fakeAgent) log(c string) { f.mu.Lock(); f.calls = append(f.calls, c); f.mu.Unlock() }
func (f *fakeAgent) Checks() []agent.Check {
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
			s := NewServer(ServerOptions{State: tt.agent, Metrics: NewMetrics(MetricsOptions{Version: "t"}), Now: func() time.Time { return clock }})
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

func statusAgent() *fakeAgent {
	return &fakeAgent{
		ready:    true,
		progress: testNow.Add(-2 * time.Second),
		checks: []agent.Check{
			{Kind: "uplink", Target: "wwan0", State: "ok", Healthy: true, LastAction: "offload-off", Since: testNow.Add(-3 * time.Hour)},
			{Kind: "peer", Target: "wg0/AbCd", State: "healing", Healthy: false, LastAction: "handshake", Detail: "probe 10.0.0.1 failed 3 times", Since: testNow.Add(-40 * time.Second)},
		},
	}
}

func TestStatusCommandShowsARunningAgent(t *testing.T) {
	s := NewServer(ServerOptions{
		Listen: "127.0.0.1:0", State: statusAgent(), Outbox: fakeOutboxStats{3, 7},
		MQTT: func() PublisherInfo {
			return PublisherInfo{Broker: "ssl://broker.example:8883", ClientID: "edgeheal-edge-17", Connected: true, Session: 12}
		},
		Info: func() NodeInfo {
			return NodeInfo{Node: "edge-17", Site: "plant-7", Version: "1.2.3", ConfigRevision: "r42"}
		},
		Now: func() time.Time { return testNow },
	})
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	defer s.Shutdown(context.Background())
	got, err := FetchStatus(context.Background(), s.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	if got.State != StateDegraded || got.Outbox.Depth != 3 || got.MQTT.Session != 12 || len(got.Checks) != 2 {
		t.Errorf("status = %+v", got)
	}
	var buf bytes.Buffer
	if err := WriteStatusTable(&buf, got, testNow); err != nil {
		t.Fatal(err)
	}
	golden := filepath.Join("testdata", "status.golden")
	if *update {
		os.WriteFile(golden, buf.Bytes(), 0o644)
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(string(want), buf.String()); diff != "" {
		t.Errorf("status table (-want +got):\n%s", diff)
	}
}

func TestStatusCommandSaysWhenNoAgentRuns(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close() // nothing listens there now
	_, err = FetchStatus(context.Background(), addr)
	if !errors.Is(err, ErrNoAgent) {
		t.Fatalf("err = %v, want ErrNoAgent", err)
	}
	if !strings.Contains(err.Error(), "is the agent running?") {
		t.Errorf("err = %q, want a hint", err)
	}
}

func TestStatusURL(t *testing.T) {
	tests := []struct{ listen, want string }{
		{"127.0.0.1:9101", "http://127.0.0.1:9101/v1/status"},
		{":9101", "http://127.0.0.1:9101/v1/status"},
		{"0.0.0.0:9101", "http://127.0.0.1:9101/v1/status"},
		{"[::]:9101", "http://127.0.0.1:9101/v1/status"},
		{"[::1]:9101", "http://[::1]:9101/v1/status"},
		{"http://10.1.2.3:80/", "http://10.1.2.3:80/v1/status"},
	}
	for _, tt := range tests {
		if got := StatusURL(tt.listen); got != tt.want {
			t.Errorf("StatusURL(%q) = %q, want %q", tt.listen, got, tt.want)
		}
	}
}

func TestServerShutdownEndsServing(t *testing.T) {
	s := NewServer(ServerOptions{Listen: "127.0.0.1:0", State: &fakeAgent{}})
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	addr := s.Addr().String()
	resp, err := http.Get("http://" + addr + "/livez")
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if err := s.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, err := FetchStatus(context.Background(), addr); !errors.Is(err, ErrNoAgent) {
		t.Errorf("after Shutdown: err = %v, want ErrNoAgent", err)
	}
}
