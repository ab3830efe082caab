package workload_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/edgeheal/edgeheal/agent"
	"github.com/edgeheal/edgeheal/agent/core"
	"github.com/edgeheal/edgeheal/configs"
	"github.com/edgeheal/edgeheal/internal/testsupport/agentlab"
	"github.com/edgeheal/edgeheal/internal/testsupport/labtest"
	"github.com/edgeheal/edgeheal/lab"
	"github.com/edgeheal/edgeheal/wire"
)

// TestLabAPodsOwnBrokenPathNeverTouchesTheTunnel runs the agent (tunnel
// monitor and workload monitor, the real OS backend) in the lab's edge
// namespace. The pod's own path to the broker is blocked (a rule in the
// pod's namespace) while the tunnel carries traffic and its probe answers:
// one incident names the pod's path, and no disruptive action is taken.
func TestLabAPodsOwnBrokenPathNeverTouchesTheTunnel(t *testing.T) {
	l := labtest.New(t, lab.Options{OffloadOff: true, NoTelemetry: true, Keepalive: 20 * time.Second})
	cfg, err := configs.Parse("lab.yaml", []byte(fmt.Sprintf(`node: {name: lab}
tunnels:
  - interface: %s
    probe: {target: "tcp://%s"}
workloads:
  - name: telemetry
    netns: %s
    tunnel: %s
    interval: 1s
    misses: 2
    mqtt: {broker: "tcp://%s", host_broker: "tcp://%s", timeout: 700ms}
`, l.EdgeWG(), l.BrokerTunnelAddr(), l.NetnsPath(lab.Pod), l.EdgeWG(), l.BrokerTunnelAddr(), l.BrokerPublicAddr())))
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var evs []core.Event
	a := agent.New(cfg, agent.Options{OS: agentlab.LabOS(t, l, lab.Edge), Emit: func(e core.Event) { mu.Lock(); evs = append(evs, e); mu.Unlock() }})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	defer func() { cancel(); <-done }()
	// Ready, and the workload reaches its broker (the tunnel's first
	// handshake takes a moment after the lab is up).
	readyBy := time.Now().Add(20 * time.Second)
	for !workloadOK(a) {
		if time.Now().After(readyBy) {
			_, why := a.Ready()
			t.Fatalf("agent not ready with the workload ok within 20 s: %s; checks %+v", why, a.Checks())
		}
		time.Sleep(100 * time.Millisecond)
	}

	// The pod's own way to the broker is cut; the tunnel is untouched.
	rules := filepath.Join(t.TempDir(), "pod.nft")
	rule := fmt.Sprintf("table inet edgeheal_pod_test {\n\tchain out { type filter hook output priority 0; ip daddr %s tcp dport %d drop; }\n}\n",
		l.BrokerTunnelAddr().Addr(), l.BrokerTunnelAddr().Port())
	if err := os.WriteFile(rules, []byte(rule), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := l.Exec(ctx, lab.Pod, "nft", "-f", rules); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	blockedAt := time.Now()
	time.Sleep(20 * time.Second)

	mu.Lock()
	defer mu.Unlock()
	var incidents []core.Event
	for _, e := range evs {
		if e.Time.Before(blockedAt) {
			continue
		}
		switch {
		case e.Kind == "incident":
			incidents = append(incidents, e)
		case e.Kind == wire.EventAction && e.Action != "keepalive" && e.Action != "reassert":
			t.Errorf("a tunnel action for the pod's own path: %+v", e)
		}
	}
	if len(incidents) != 1 || incidents[0].Target != "telemetry" || !strings.Contains(incidents[0].Summary, "(pod-path)") {
		var all []string
		for _, e := range evs {
			all = append(all, e.Kind+" "+e.Target+" "+e.Summary)
		}
		t.Fatalf("incidents %+v; want one for the workload, diagnosed pod-path; every event:\n%s\nchecks: %+v", incidents, strings.Join(all, "\n"), a.Checks())
	}
	t.Logf("incident: %s", incidents[0].Summary)
}

func workloadOK(a *agent.Agent) bool {
	if ok, _ := a.Ready(); !ok {
		return false
	}
	for _, c := range a.Checks() {
		if c.Kind == wire.KindWorkload && c.State == wire.CheckOK {
			return true
		}
	}
	return false
}
