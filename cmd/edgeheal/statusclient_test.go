package main

import (
	"bytes"
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/edgeheal/edgeheal/agent/httpapi"
	"github.com/edgeheal/edgeheal/wire"
)

var statusNow = time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)

// statusState is the agent as /v1/status reads it.
type statusState struct{}

func (statusState) Checks() []wire.Check {
	return []wire.Check{
		{Kind: "uplink", Target: "wwan0", State: "ok", Healthy: true, LastAction: "offload-off", Since: statusNow.Add(-3 * time.Hour)},
		{Kind: "peer", Target: "wg0/AbCd", State: "healing", Healthy: false, LastAction: "handshake", Detail: "probe 10.0.0.1 failed 3 times", Since: statusNow.Add(-40 * time.Second)},
	}
}
func (statusState) Ready() (bool, string)                     { return true, "" }
func (statusState) LastProgress() time.Time                   { return statusNow.Add(-2 * time.Second) }
func (statusState) WorkloadReady(string) (bool, string, bool) { return false, "", false }

type statusOutbox struct{}

func (statusOutbox) Depth() int      { return 3 }
func (statusOutbox) Dropped() uint64 { return 7 }

func TestStatusCommandShowsARunningAgent(t *testing.T) {
	s := httpapi.NewServer(httpapi.ServerOptions{
		Listen: "127.0.0.1:0", State: statusState{}, Outbox: statusOutbox{},
		MQTT: func() wire.MQTTInfo {
			return wire.MQTTInfo{Broker: "ssl://broker.example:8883", ClientID: "edgeheal-edge-17", Connected: true, Session: 12}
		},
		Info: func() wire.NodeInfo {
			return wire.NodeInfo{Node: "edge-17", Site: "plant-7", Version: "1.2.3", ConfigRevision: "r42"}
		},
		Now: func() time.Time { return statusNow },
	})
	if err := s.Listen(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx) }()
	defer func() { cancel(); <-done }()
	got, err := fetchStatus(context.Background(), s.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	if got.State != wire.StateDegraded || got.Outbox.Depth != 3 || got.MQTT.Session != 12 || len(got.Checks) != 2 {
		t.Errorf("status = %+v", got)
	}
	var buf bytes.Buffer
	if err := writeStatusTable(&buf, got, statusNow); err != nil {
		t.Fatal(err)
	}
	golden := filepath.Join("testdata", "status.golden")
	if os.Getenv("EDGEHEAL_UPDATE_GOLDEN") != "" {
		os.WriteFile(golden, buf.Bytes(), 0o644)
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(string(want), buf.String()); diff != "" {
		t.Errorf("status table (-want +got; EDGEHEAL_UPDATE_GOLDEN=1 rewrites it):\n%s", diff)
	}
}

func TestStatusCommandSaysWhenNoAgentRuns(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close() // nothing listens there now
	_, err = fetchStatus(context.Background(), addr)
	if !errors.Is(err, errNoAgent) {
		t.Fatalf("err = %v, want errNoAgent", err)
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
		if got := statusURL(tt.listen); got != tt.want {
			t.Errorf("statusURL(%q) = %q, want %q", tt.listen, got, tt.want)
		}
	}
}
