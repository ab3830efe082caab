package workload

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/edgeheal/edgeheal/agent/core"
	"github.com/edgeheal/edgeheal/agent/core/coretest"
	"github.com/edgeheal/edgeheal/configs"
	"github.com/edgeheal/edgeheal/internal/testsupport/labtest"
	"github.com/edgeheal/edgeheal/lab"
	"github.com/edgeheal/edgeheal/probes"
)

// realNet is the real workload probes (probes.MQTT) with "the host" being
// another namespace: in the lab the agent's host is the edge namespace,
// not the test process's own. (agent/system is the daemon's; a test of
// package agent cannot import it.)
type realNet struct {
	coretest.Net
	host probes.Netns
}

func (n *realNet) MQTT(ctx context.Context, ns probes.Netns, cfg probes.MQTTConfig) (probes.Result, error) {
	if ns.Path == "" {
		ns = n.host
	}
	return probes.MQTT(ctx, ns, cfg)
}

// realWorkloadOS is an OS with the real pod locator and workload probes.
func realWorkloadOS(t *testing.T, host probes.Netns) core.OS {
	t.Helper()
	loc := &probes.Locator{}
	t.Cleanup(func() { loc.Close() })
	os := coretest.OS()
	os.Pods, os.Net = loc, &realNet{host: host}
	return os
}

// TestLabWorkloadDiagnosisOverlayAndBroker runs the workload monitor with
// the real probes against the full lab: the pod reaches the cloud broker
// through the WireGuard tunnel; dropping only the tunnel's UDP in the edge
// (the uplink still carries the host's path to the broker) is diagnosed
// overlay and the tunnel is suspected after misses rounds; with the broker
// stopped both probes fail and the diagnosis is broker, with no tunnel
// action.
func TestLabWorkloadDiagnosisOverlayAndBroker(t *testing.T) {
	l := labtest.New(t, lab.Options{OffloadOff: true, NoTelemetry: true, Keepalive: time.Second})
	w := configs.Workload{
		Name:   "telemetry",
		Netns:  l.NetnsPath(lab.Pod),
		Tunnel: l.EdgeWG(),
		Misses: 2,
		MQTT: configs.Broker{
			Broker:     "tcp://" + l.BrokerTunnelAddr().String(),
			HostBroker: "tcp://" + l.BrokerPublicAddr().String(),
			Timeout:    configs.Duration(700 * time.Millisecond),
		},
	}
	sus := &fakeSuspector{}
	evs := &eventLog{}
	m := New(Config{Workloads: []configs.Workload{w}, OS: realWorkloadOS(t, probes.Netns{Path: l.NetnsPath(lab.Edge)}), Tunnels: sus, Emit: evs.Emit, Log: slog.New(slog.DiscardHandler)})
	r := m.wls[0]
	ctx := t.Context()
	diag := func() string { return string(m.Checks()[0].Workload.Diagnosis) }

	// The first handshake takes a moment after the lab is up.
	roundsUntil(t, m, r, 15*time.Second, "the pod reaching the broker through the tunnel", func() bool { return diag() == "ok" })
	check := m.Checks()[0]
	if check.Workload.Netns == nil || check.Workload.Netns.Source != probes.SourceNetns || check.Workload.Netns.Path != l.NetnsPath(lab.Pod) {
		t.Errorf("check %+v: want the pod's netns from the config", check.Workload.Netns)
	}
	t.Logf("before the tunnel's first handshake the monitor suspected it %d times", len(sus.take()))
	evs.take()

	// Blackhole the tunnel only: WireGuard's UDP leaves the edge no more.
	rules := filepath.Join(t.TempDir(), "drop-wg.nft")
	if err := os.WriteFile(rules, []byte("table inet edgeheal_wl_test {\n\tchain out { type filter hook output priority 0; udp dport 51820 drop; }\n}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Exec(ctx, lab.Edge, "nft", "-f", rules); err != nil {
		t.Fatal(err)
	}
	dropped := true
	undrop := func() {
		if dropped {
			dropped = false
			if _, err := l.Exec(context.Background(), lab.Edge, "nft", "delete", "table", "inet", "edgeheal_wl_test"); err != nil {
				t.Error(err)
			}
		}
	}
	t.Cleanup(undrop)

	m.round(ctx, r)
	if got := diag(); got != "overlay" || len(sus.take()) != 0 {
		t.Fatalf("first round with the tunnel blackholed: diagnosis %s (%s); want overlay and no action yet", got, m.Checks()[0].Detail)
	}
	if ready, reason, _ := m.Ready("telemetry"); !ready {
		t.Errorf("one failed round made the workload not ready: %s", reason)
	}
	m.round(ctx, r)
	if diff := cmp.Diff([]string{l.EdgeWG()}, sus.take()); diff != "" {
		t.Errorf("tunnel suspected after two overlay rounds (-want +got):\n%s", diff)
	}
	if ready, reason, _ := m.Ready("telemetry"); ready {
		t.Errorf("ready while the overlay is down (%s)", reason)
	}
	if diff := cmp.Diff([]string{"incident/", "action/oksuspect-tunnel"}, evs.take()); diff != "" {
		t.Errorf("events (-want +got):\n%s", diff)
	}

	undrop()
	roundsUntil(t, m, r, 10*time.Second, "the pod reaching the broker after the blackhole", func() bool { return diag() == "ok" })
	if diff := cmp.Diff([]string{"recovered/"}, evs.take()); diff != "" {
		t.Errorf("events after recovery (-want +got):\n%s", diff)
	}

	if err := l.StopBroker(); err != nil {
		t.Fatal(err)
	}
	m.round(ctx, r)
	m.round(ctx, r)
	c := m.Checks()[0]
	if c.Workload.Diagnosis != string(diagBroker) || c.State != stateDown {
		t.Errorf("broker stopped: %s / %s (%s); want broker / down", c.Workload.Diagnosis, c.State, c.Detail)
	}
	if s := sus.take(); len(s) != 0 {
		t.Errorf("the tunnel was suspected for a broker failure: %v", s)
	}
	t.Logf("broker down check: %s", c.Detail)
}

// roundsUntil runs rounds until ok holds, for at most d.
func roundsUntil(t *testing.T, m *Monitor, r *run, d time.Duration, what string, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		m.round(t.Context(), r)
		if ok() {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v; last check %+v", what, d, m.Checks()[0])
		}
		time.Sleep(100 * time.Millisecond)
	}
}
