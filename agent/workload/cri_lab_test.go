package workload

import (
	"log/slog"
	"net"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/edgeheal/edgeheal/configs"
	"github.com/edgeheal/edgeheal/internal/testsupport/crilab"
	"github.com/edgeheal/edgeheal/internal/testsupport/mosquitto"
	"github.com/edgeheal/edgeheal/probes"
)

// startBrokerIn runs mosquitto, anyone allowed, on a loopback port in ns
// (0: a free one) until the test ends, and returns the port.
func startBrokerIn(t *testing.T, ns probes.Netns, port int) string {
	t.Helper()
	b := mosquitto.Start(t, mosquitto.Options{Plain: true, PlainPort: port, Netns: ns.Path})
	_, p, _ := net.SplitHostPort(b.PlainAddr)
	return p
}

// TestLabWorkloadMonitorFollowsRecreatedPods runs the workload monitor with
// the real probes and CRI against a private containerd: it finds the pod
// by labels and reaches a broker that exists only in the pod's namespace;
// a newer pod is followed (re-resolved), removing it falls back to the
// older one, and with no pod left the state is no-pod, with no tunnel
// action at any point.
func TestLabWorkloadMonitorFollowsRecreatedPods(t *testing.T) {
	lab := crilab.Start(t)
	ctx := t.Context()
	labels := map[string]string{"app": "telemetry"}
	cri, err := probes.DialCRI(lab.Socket)
	if err != nil {
		t.Fatal(err)
	}
	defer cri.Close()
	hostPort := startBrokerIn(t, probes.Netns{}, 0)

	// runPod runs a sandbox and a broker inside it on port 1883.
	runPod := func(name string) string {
		t.Helper()
		id, err := lab.RunSandbox(ctx, name, "factory", labels, nil)
		if err != nil {
			t.Fatalf("%v; containerd log:\n%s", err, lab.Log())
		}
		target, err := probes.ResolvePod(ctx, cri, probes.PodSelector{Namespace: "factory", Name: name})
		if err != nil {
			t.Fatal(err)
		}
		startBrokerIn(t, target.Netns, 1883)
		return id
	}

	w := configs.Workload{
		Name:      "telemetry",
		Pod:       configs.Pod{Namespace: "factory", Labels: labels},
		CRISocket: lab.Socket,
		Tunnel:    "wg0",
		Misses:    2,
		MQTT: configs.Broker{
			Broker:     "tcp://127.0.0.1:1883",
			HostBroker: "tcp://127.0.0.1:" + hostPort,
			Timeout:    configs.Duration(time.Second),
		},
	}
	sus := &fakeSuspector{}
	evs := &eventLog{}
	m := New(Config{Workloads: []configs.Workload{w}, OS: realWorkloadOS(t, probes.Netns{}), Tunnels: sus, Emit: evs.Emit, Log: slog.New(slog.DiscardHandler)})
	r := m.wls[0]
	type view struct {
		State, Diagnosis, Sandbox string
		Events                    []string
	}
	look := func() view {
		c := m.Checks()[0]
		v := view{State: c.State, Events: evs.take()}
		v.Diagnosis = string(c.Workload.Diagnosis)
		if c.Workload.Netns != nil {
			v.Sandbox = c.Workload.Netns.SandboxID
		}
		return v
	}
	step := func(what string, want view) {
		t.Helper()
		m.round(ctx, r)
		if diff := cmp.Diff(want, look()); diff != "" {
			t.Errorf("%s (-want +got):\n%s", what, diff)
		}
	}

	step("no pod yet", view{State: stateNoPod, Diagnosis: "no-pod", Events: []string{"workload/no-pod"}})
	a := runPod("telemetry-a")
	step("pod a runs", view{State: stateOK, Diagnosis: "ok", Sandbox: a, Events: []string{"workload/ok"}})
	if c := m.Checks()[0]; c.Workload.Netns == nil || c.Workload.Netns.Source != probes.SourceCRI || c.Workload.Netns.Pod != "factory/telemetry-a" {
		t.Errorf("check %+v: want source cri and pod factory/telemetry-a", c.Workload.Netns)
	}
	b := runPod("telemetry-b")
	step("a newer pod b is followed", view{State: stateOK, Diagnosis: "ok", Sandbox: b, Events: []string{"workload/re-resolved"}})
	if err := lab.RemoveSandbox(ctx, b); err != nil {
		t.Fatal(err)
	}
	step("b removed: back to a", view{State: stateOK, Diagnosis: "ok", Sandbox: a, Events: []string{"workload/re-resolved"}})
	if err := lab.RemoveSandbox(ctx, a); err != nil {
		t.Fatal(err)
	}
	step("no pod left", view{State: stateNoPod, Diagnosis: "no-pod", Events: []string{"workload/no-pod"}})
	if ready, reason, _ := m.Ready("telemetry"); ready {
		t.Errorf("ready with no pod (%s)", reason)
	}
	if s := sus.take(); len(s) != 0 {
		t.Errorf("tunnel suspected: %v", s)
	}
}
