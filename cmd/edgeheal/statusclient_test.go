package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/edgeheal/edgeheal/agent/httpapi"
	"github.com/edgeheal/edgeheal/localapi"
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
	sock := filepath.Join(t.TempDir(), "edgeheal.sock")
	s := httpapi.NewLocal(httpapi.ServerOptions{
		Socket: sock, State: statusState{}, Outbox: statusOutbox{},
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
	got, err := fetchStatus(context.Background(), sock)
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
	_, err := fetchStatus(context.Background(), filepath.Join(t.TempDir(), "edgeheal.sock"))
	if !errors.Is(err, localapi.ErrNoAgent) {
		t.Fatalf("err = %v, want localapi.ErrNoAgent", err)
	}
	if !strings.Contains(err.Error(), "is the agent running?") {
		t.Errorf("err = %q, want a hint", err)
	}
}

// Whatever the agent's answer carries (a pod's name, a broker's error, an
// event's target: strings others wrote) reaches the terminal with every
// control character escaped: no escape sequence retitles the window,
// moves the cursor or rewrites the line, in the table or in --json.
func TestStatusEscapesControlCharacters(t *testing.T) {
	evil := "\x1b]0;owned\x07\x1b[2J\u009b31m\u202egnp.exe\x7f\xff"
	st := wire.LocalStatus{V: 1, NodeInfo: wire.NodeInfo{Node: evil}, State: "online", ReadyDetail: evil, Ready: false,
		MQTT:   &wire.MQTTInfo{Broker: evil, LastError: evil},
		Checks: []wire.Check{{Kind: evil, Target: evil, State: evil, LastAction: evil, Detail: evil}}}
	var buf bytes.Buffer
	if err := writeStatusTable(&buf, st, statusNow); err != nil {
		t.Fatal(err)
	}
	for _, bad := range []string{"\x1b", "\x07", "\u009b", "\u202e", "\x7f", "\xff"} {
		if strings.Contains(buf.String(), bad) {
			t.Errorf("the table passes %q to the terminal:\n%q", bad, buf.String())
		}
	}
	if !strings.Contains(buf.String(), `\x1b]0;owned\a\x1b[2J\u009b31m\u202egnp.exe\x7f\xff`) {
		t.Errorf("the table does not show the escapes:\n%s", buf.String())
	}
	b, err := json.Marshal(st)
	if err != nil {
		t.Fatal(err)
	}
	out := string(safeJSON(b))
	for _, bad := range []string{"\x1b", "\x07", "\u009b", "\u202e", "\x7f"} {
		if strings.Contains(out, bad) {
			t.Errorf("--json passes %q to the terminal: %q", bad, out)
		}
	}
	var back wire.LocalStatus
	if err := json.Unmarshal([]byte(out), &back); err != nil || back.Checks[0].Detail != strings.ToValidUTF8(evil, "\uFFFD") {
		t.Errorf("the escaped JSON does not read back the same: %v %q", err, back.Checks[0].Detail)
	}
}
