// Package wiretest holds the examples of every wire payload and their
// golden bytes (wire/testdata), for the tests of the programs that write
// and read them: the agent's, the reporter's, edgeheal-kube's and the
// fleet view's tests compare what they produce or accept with the same
// files wire's own golden test holds. Test code only.
package wiretest

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/edgeheal/edgeheal/wire"
)

// The golden files, by what they hold.
const (
	StatusFile      = "status.json"       // a Status on the status topic, with its checks summary
	WillFile        = "will.json"         // the Last Will: a lost Status
	LocalStatusFile = "local-status.json" // /v1/status with a check of every kind
	EventFile       = "event.json"        // an EventMessage on the event topic
	HistoryFile     = "history.json"      // a History on the history topic
)

// When is the time every example is stamped with.
var When = time.Date(2026, 12, 3, 9, 42, 7, 250_000_000, time.UTC)

// Checks is one check of every kind, typed parts filled in.
func Checks() []wire.Check {
	return []wire.Check{
		{Kind: wire.KindComponent, Target: "offload", State: "ok", Healthy: true, Detail: "guarding 1 links", Since: When},
		{Kind: wire.KindUplink, Target: "wwan0", State: "ok", Healthy: true, Detail: "fixed: tx-checksum-ip-generic: on→off",
			LastAction: "offload-off changed at 2026-12-03T09:42:07Z", Since: When,
			Uplink: &wire.UplinkInfo{SelectedBy: []string{"wwan*"}, TxChecksumGuarded: true,
				Features: map[string]string{"tx-checksum-ip-generic": "off"}, Fighting: true}},
		{Kind: wire.KindPeer, Target: "wg0/AbCdEfGh", State: "healing", Healthy: false, Detail: "probe missed: timeout",
			LastAction: "handshake: changed at 2026-12-03T09:42:07Z", Since: When,
			Peer: &wire.PeerInfo{Interface: "wg0", PublicKey: "AbCdEfGhIjKlMnOpQrStUvWxYz0123456789abcdefg=", Endpoint: "203.0.113.10:51820",
				LastHandshake: When.Add(-130 * time.Second), HandshakeAgeSeconds: 130, RxBytes: 9200, TxBytes: 14800,
				TxDeltaBytes: 148, KeepaliveSeconds: 20, Probe: "miss: timeout"}},
		{Kind: wire.KindWorkload, Target: "telemetry", State: "down", Healthy: false,
			Detail: "overlay: pod probe timeout while the host reaches the broker in 1.4ms: overlay or tunnel", Since: When,
			Workload: &wire.WorkloadInfo{Diagnosis: wire.DiagOverlay,
				Netns:               &wire.Netns{Path: "/var/run/netns/cni-1", Source: "cri", Pod: "factory/telemetry-0", SandboxID: "5d41402abc4b", ID: "/var/run/netns/cni-1 0:4026532801 5d41402abc4b"},
				PodProbe:            &wire.Probe{Probe: "mqtt", Target: "10.43.0.10:1883", Class: "timeout", Detail: "i/o timeout", LatencySeconds: 2},
				HostProbe:           &wire.Probe{Probe: "mqtt", Target: "203.0.113.10:1883", Class: "ok", LatencySeconds: 0.0014},
				HostProbeConfigured: true, FailedRounds: 2, Tunnel: "wg0"}},
		{Kind: wire.KindPathMTU, Target: "wg0", State: wire.CheckPathClamped, Healthy: true,
			Detail:     "path MTU 1328 through the tunnel (sends 1420), 1400 over wwan0 (sends 1500): TCP MSS clamped, wg0 MTU 1328",
			LastAction: "mss-clamp: changed at 2026-12-03T09:42:07Z", Since: When,
			PathMTU: &wire.PathMTUInfo{
				Tunnel: &wire.PathInfo{Link: "wg0", Target: "10.42.0.1", LinkMTU: 1420, PathMTU: 1328, ClampMTU: 1328},
				Uplink: &wire.PathInfo{Link: "wwan0", Target: "203.0.113.10", LinkMTU: 1500, PathMTU: 1400, ClampMTU: 1400},
				Table:  "edgeheal-wg0", LinkMTUSet: 1328, LinkMTUBefore: 1420, CheckedAt: When}},
		{Kind: wire.KindClock, Target: "system", State: "unsynchronised", Healthy: true, Detail: "clock not synchronised"},
	}
}

// Status is the status topic's example.
func Status() wire.Status {
	sum, state := wire.Summarize(Checks())
	return wire.Status{V: wire.Version, State: state, Session: 1764754927000001, TS: When, Node: "edge-17", Site: "plant-7",
		Version: "v1.4.0", ConfigRevision: "3f2a9c1d", Checks: &sum}
}

// Will is the Last Will's example: a lost status with the node's
// identity as of its connection.
func Will() wire.Status {
	return wire.Status{V: wire.Version, State: wire.StateLost, Session: 1764754927000001,
		Node: "edge-17", Site: "plant-7", Version: "v1.4.0", ConfigRevision: "3f2a9c1d"}
}

// LocalStatus is /v1/status's example.
func LocalStatus() wire.LocalStatus {
	st, _, _ := wire.NodeState(Checks())
	return wire.LocalStatus{V: wire.Version, NodeInfo: wire.NodeInfo{Node: "edge-17", Site: "plant-7", Version: "v1.4.0", ConfigRevision: "3f2a9c1d"},
		State: st, Ready: false, ReadyDetail: "tunnel/wg0: degraded: waiting for verification", LastProgress: When,
		Checks: Checks(), Outbox: &wire.OutboxInfo{Depth: 3, Dropped: 0},
		MQTT: &wire.MQTTInfo{Broker: "ssl://mqtt.cloud.example:8883", ClientID: "edgeheal-edge-17", Connected: true, Session: 1764754927000001}}
}

// EventMessage is the event topic's example.
func EventMessage() wire.EventMessage {
	return wire.EventMessage{V: wire.Version, Node: "edge-17", Site: "plant-7", Session: 1764754927000001, Seq: 1764754927000042, Event: wire.Event{
		ID: "5f1c0a9e8d7b6a5f4e3d2c1b", Time: When, Kind: wire.EventIncident, Target: "wg0/AbCdEfGh", Result: "opened",
		Summary:  "wg0/AbCdEfGh dark: probe missed: timeout",
		Evidence: map[string]any{"state": "down", "probe": "miss: timeout", "handshake_age_seconds": 130.0},
	}}
}

// History is the history topic's example: three hours and two days of a
// node whose tunnel was dark for 10 s, healed by a forced handshake, and
// 20 s more while its uplink was out.
func History() wire.History {
	hour := When.Truncate(time.Hour)
	day := When.Truncate(24 * time.Hour)
	return wire.History{V: wire.Version, Node: "edge-17", Site: "plant-7", TS: When, Since: day.Add(-24 * time.Hour),
		Hours: wire.Series{Start: hour.Add(-2 * time.Hour), Step: 3600,
			Healthy: []int{3600, 3570, 2527}, Dark: []int{0, 30, 0}, Degraded: []int{0, 0, 0}, Incidents: []int{0, 2, 0}},
		Days: wire.Series{Start: day.Add(-24 * time.Hour), Step: 86400,
			Healthy: []int{86400, 34897}, Dark: []int{0, 30}, Degraded: []int{0, 0}, Incidents: []int{0, 2}},
		Targets: []wire.TargetSummary{
			{Kind: wire.KindPeer, Target: "wg0/AbCdEfGh", HealthySeconds: 121297, DarkSeconds: 30, Incidents: 2,
				OutageP50Seconds: 10, OutageP95Seconds: 20, OutageMaxSeconds: 20, MTTRSeconds: 15, Repairs: map[string]int{"handshake": 1, "itself": 1}},
			{Kind: wire.KindUplink, Target: "wwan0", HealthySeconds: 121327},
		},
		Incidents: []wire.Incident{
			{ID: "7a1c0a9e8d7b6a5f4e3d2c1b", Kind: wire.KindPeer, Target: "wg0/AbCdEfGh", Start: When.Add(-50 * time.Minute), End: When.Add(-50*time.Minute + 20*time.Second),
				DurationSeconds: 20, Diagnosis: "uplink outage: no default route", Repairs: []string{"reassert"}},
			{ID: "5f1c0a9e8d7b6a5f4e3d2c1b", Kind: wire.KindPeer, Target: "wg0/AbCdEfGh", Start: When.Add(-55 * time.Minute), End: When.Add(-55*time.Minute + 10*time.Second),
				DurationSeconds: 10, Diagnosis: "probe missed: timeout", Repairs: []string{"reassert", "handshake"}, HealedBy: "handshake"},
		},
	}
}

// Examples are every golden file's example value.
func Examples() map[string]any {
	return map[string]any{StatusFile: Status(), WillFile: Will(), LocalStatusFile: LocalStatus(), EventFile: EventMessage(), HistoryFile: History()}
}

// Dir is wire/testdata.
func Dir() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(filepath.Dir(file)), "testdata")
}

// Golden returns a golden file's bytes.
func Golden(t testing.TB, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(Dir(), name))
	if err != nil {
		t.Fatalf("reading the golden %s (go test ./wire -update writes it): %v", name, err)
	}
	return b
}

// Encode is how every golden file is written: indented JSON and a newline.
func Encode(v any) ([]byte, error) {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return nil, err
	}
	return append(b, '\n'), nil
}

// Keys lists every key path of a JSON document ("checks.items[].peer.rx_bytes"):
// its shape, without its values.
func Keys(doc []byte) ([]string, error) {
	var v any
	dec := json.NewDecoder(bytes.NewReader(doc))
	dec.UseNumber()
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	set := map[string]bool{}
	walk(v, "", set)
	out := make([]string, 0, len(set))
	for k := range set {
		out = append(out, k)
	}
	sort.Strings(out)
	return out, nil
}

func walk(v any, path string, set map[string]bool) {
	switch t := v.(type) {
	case map[string]any:
		if freeForm(path) {
			return // its keys are values: any key is in the format
		}
		for k, c := range t {
			p := k
			if path != "" {
				p = path + "." + k
			}
			set[p] = true
			walk(c, p, set)
		}
	case []any:
		for _, c := range t {
			walk(c, path+"[]", set)
		}
	}
}

// freeForm reports whether the object at path holds values by name (an
// event's evidence, an uplink's features) rather than fields.
func freeForm(path string) bool {
	last := path[strings.LastIndex(path, ".")+1:]
	return last == "evidence" || last == "features"
}

// WithinShape fails t when got has a key path the golden file does not:
// a field a writer added, renamed or misspelt. Missing keys are fine (a
// writer may omit what is empty).
func WithinShape(t testing.TB, got []byte, golden string) {
	t.Helper()
	g, err := Keys(got)
	if err != nil {
		t.Fatalf("not JSON: %v\n%s", err, got)
	}
	w, err := Keys(Golden(t, golden))
	if err != nil {
		t.Fatalf("golden %s: %v", golden, err)
	}
	var extra []string
	for _, k := range g {
		if !slices.Contains(w, k) {
			extra = append(extra, k)
		}
	}
	if len(extra) > 0 {
		t.Errorf("keys not in the wire format (wire/testdata/%s):\n  %s", golden, strings.Join(extra, "\n  "))
	}
}
