package workload

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/edgeheal/edgeheal/agent/core"
	"github.com/edgeheal/edgeheal/agent/core/coretest"
	"github.com/edgeheal/edgeheal/configs"
	"github.com/edgeheal/edgeheal/probes"
	"github.com/edgeheal/edgeheal/wire"
)

// fakeWorkloadProber holds what the "network" answers and logs calls.
type fakeWorkloadProber struct {
	mu        sync.Mutex
	target    probes.Target
	locateErr error
	pod, host probes.Class
	calls     []string
	panics    int  // the next this many pod probes panic (a bug in a round)
	stalled   bool // the pod's TLS handshake stalls after TCP connected
}

func (f *fakeWorkloadProber) set(fn func(f *fakeWorkloadProber)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	fn(f)
}

func (f *fakeWorkloadProber) Locate(_ context.Context, w probes.Where) (probes.Target, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, "locate "+w.String())
	return f.target, f.locateErr
}

func (f *fakeWorkloadProber) MQTT(_ context.Context, ns probes.Netns, cfg probes.MQTTConfig) (probes.Result, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, fmt.Sprintf("mqtt %s from %s", cfg.Broker, ns))
	if f.panics > 0 && ns.Path != "" {
		f.panics--
		var answers []probes.Class
		_ = answers[1] // index out of range, as a real bug would
	}
	c := f.pod
	if ns.Path == "" {
		c = f.host
	}
	return probes.Result{Probe: "mqtt", Target: cfg.Broker, Class: c, Latency: time.Millisecond,
		HandshakeStalled: f.stalled && ns.Path != ""}, nil
}

func (f *fakeWorkloadProber) Tunnel(context.Context, string, time.Duration) probes.ProbeResult {
	return probes.ProbeResult{OK: true, Class: "ok"}
}

func (f *fakeWorkloadProber) Lookup(context.Context, string) ([]netip.Addr, error) {
	return nil, errors.New("no lookups in workload tests")
}

// os is an OS whose pods and probes are the fake's.
func (f *fakeWorkloadProber) os() core.OS {
	os := coretest.OS()
	os.Pods, os.Net = f, f
	return os
}

func (f *fakeWorkloadProber) takeCalls() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	c := f.calls
	f.calls = nil
	return c
}

// fakeSuspector logs Suspect calls.
type fakeSuspector struct {
	mu      sync.Mutex
	calls   []string
	healthy bool // the tunnel's own probe answers
}

func (f *fakeSuspector) Suspect(tunnel, reason string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, tunnel)
}

func (f *fakeSuspector) HintPathMTU(tunnel, reason string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, "hint-path-mtu "+tunnel)
}

func (f *fakeSuspector) TunnelHealthy(string) (bool, string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.healthy, "probe ok"
}

func (f *fakeSuspector) take() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	c := f.calls
	f.calls = nil
	return c
}

// eventLog collects emitted events as "kind/result" lines.
type eventLog struct {
	mu  sync.Mutex
	evs []core.Event
}

func (l *eventLog) Emit(ev core.Event) { l.mu.Lock(); l.evs = append(l.evs, ev); l.mu.Unlock() }

func (l *eventLog) take() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for _, ev := range l.evs {
		if ev.ID == "" || ev.Target == "" || ev.Summary == "" {
			out = append(out, "incomplete event: "+fmt.Sprint(ev))
		}
		out = append(out, ev.Kind+"/"+ev.Result+ev.Action)
	}
	l.evs = nil
	return out
}

func testWorkload() configs.Workload {
	return configs.Workload{
		Name:      "telemetry",
		Pod:       configs.Pod{Namespace: "factory", Labels: map[string]string{"app": "telemetry"}},
		CRISocket: "/run/k3s/containerd/containerd.sock",
		Tunnel:    "wg0",
		Interval:  configs.Duration(10 * time.Second),
		Misses:    2,
		MQTT:      configs.Broker{Broker: "tcp://10.43.0.20:1883", HostBroker: "tcp://192.0.2.10:1883", Timeout: configs.Duration(time.Second)},
	}
}

// TestWorkloadMonitorRun walks one workload through ok, a confirmed overlay
// failure (tunnel suspected), a broker failure (no tunnel action),
// recovery, a recreated pod and a pod that is gone, on a fake clock.
func TestWorkloadMonitorRun(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ns1 := probes.Target{Netns: probes.Netns{Path: "/var/run/netns/cni-1"}, Path: "/var/run/netns/cni-1", Source: probes.SourceCRI, Pod: "factory/telemetry-a", SandboxID: "sb1", ID: "4:1"}
		ns2 := probes.Target{Netns: probes.Netns{Path: "/var/run/netns/cni-2"}, Path: "/var/run/netns/cni-2", Source: probes.SourceCRI, Pod: "factory/telemetry-b", SandboxID: "sb2", ID: "4:2"}
		p := &fakeWorkloadProber{target: ns1, pod: probes.ClassOK, host: probes.ClassOK}
		sus := &fakeSuspector{}
		evs := &eventLog{}
		m := New(Config{Workloads: []configs.Workload{testWorkload()}, OS: p.os(), Tunnels: sus, Emit: evs.Emit, Log: slog.New(slog.NewTextHandler(io.Discard, nil))})

		if ready, reason, found := m.Ready("telemetry"); ready || !found {
			t.Errorf("before the first round: ready %v (%s), found %v; want not ready, found", ready, reason, found)
		}
		if _, _, found := m.Ready("other"); found {
			t.Errorf("an unknown workload was found")
		}

		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan error, 1)
		go func() { done <- m.Run(ctx) }()
		next := func() { time.Sleep(10*time.Second + time.Millisecond); synctest.Wait() }
		synctest.Wait()

		type want struct {
			state    string
			ready    bool
			suspects []string
			events   []string
			calls    []string
		}
		check := func(step string, w want) {
			t.Helper()
			got := want{state: m.Checks()[0].State, suspects: sus.take(), events: evs.take(), calls: p.takeCalls()}
			got.ready, _, _ = m.Ready("telemetry")
			if diff := cmp.Diff(w, got, cmp.AllowUnexported(want{})); diff != "" {
				t.Errorf("%s (-want +got):\n%s", step, diff)
			}
		}
		podCall := "mqtt tcp://10.43.0.20:1883 from /var/run/netns/cni-1"
		hostCall := "mqtt tcp://192.0.2.10:1883 from host"
		locate := "locate pod factory/{app=telemetry}"
		check("first round, all ok", want{state: stateOK, ready: true, events: []string{"workload/ok"}, calls: []string{locate, podCall}})

		p.set(func(f *fakeWorkloadProber) { f.pod = probes.ClassTimeout })
		next()
		check("one overlay round", want{state: stateSuspect, ready: true, calls: []string{locate, podCall, hostCall}})
		next()
		check("overlay confirmed", want{state: stateDown, ready: false, suspects: []string{"wg0"}, events: []string{"incident/", "action/oksuspect-tunnel"}, calls: []string{locate, podCall, hostCall}})
		next()
		check("overlay goes on: the tunnel is told again, no new event", want{state: stateDown, ready: false, suspects: []string{"wg0"}, calls: []string{locate, podCall, hostCall}})

		p.set(func(f *fakeWorkloadProber) { f.host = probes.ClassRefused })
		next()
		next()
		check("broker down: no tunnel action", want{state: stateDown, ready: false, calls: []string{locate, podCall, hostCall, locate, podCall, hostCall}})
		if c := m.Checks()[0]; c.Workload.Diagnosis != string(diagBroker) {
			t.Errorf("diagnosis %v, want broker; check %+v", c.Workload.Diagnosis, c)
		}

		p.set(func(f *fakeWorkloadProber) { f.pod, f.host = probes.ClassOK, probes.ClassOK })
		next()
		check("recovered", want{state: stateOK, ready: true, events: []string{"recovered/"}, calls: []string{locate, podCall}})

		p.set(func(f *fakeWorkloadProber) { f.target = ns2 })
		next()
		check("pod recreated: re-resolved", want{state: stateOK, ready: true, events: []string{"workload/re-resolved"},
			calls: []string{locate, "mqtt tcp://10.43.0.20:1883 from /var/run/netns/cni-2"}})

		p.set(func(f *fakeWorkloadProber) {
			f.target, f.locateErr = probes.Target{}, fmt.Errorf("pod x: %w", probes.ErrNoPod)
		})
		next()
		check("pod gone", want{state: stateNoPod, ready: false, events: []string{"workload/no-pod"}, calls: []string{locate}})

		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run returned %v, want nil", err)
		}
	})
}

// TestWorkloadMonitorBlamesThePodsPathWhileTheTunnelAnswers: the pod
// cannot reach the broker, the host can, and the tunnel's own probe
// answers: the pod's own path is at fault. One incident names it, and the
// tunnel is never told.
func TestWorkloadMonitorBlamesThePodsPathWhileTheTunnelAnswers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ns := probes.Target{Netns: probes.Netns{Path: "/var/run/netns/cni-1"}, Path: "/var/run/netns/cni-1", Source: probes.SourceCRI, Pod: "factory/telemetry-a", ID: "4:1"}
		p := &fakeWorkloadProber{target: ns, pod: probes.ClassTimeout, host: probes.ClassOK}
		sus := &fakeSuspector{healthy: true}
		evs := &eventLog{}
		m := New(Config{Workloads: []configs.Workload{testWorkload()}, OS: p.os(), Tunnels: sus, Emit: evs.Emit, Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan error, 1)
		go func() { done <- m.Run(ctx) }()
		time.Sleep(60 * time.Second)
		synctest.Wait()
		cancel()
		<-done

		if got := sus.take(); len(got) != 0 {
			t.Errorf("the tunnel was suspected %v while its own probe answered", got)
		}
		evs.mu.Lock()
		var incidents []core.Event
		for _, ev := range evs.evs {
			if ev.Kind == "incident" {
				incidents = append(incidents, ev)
			}
		}
		evs.mu.Unlock()
		if len(incidents) != 1 || !strings.Contains(incidents[0].Summary, "broker path down (pod-path)") ||
			!strings.Contains(incidents[0].Summary, "the pod's own path") {
			t.Errorf("incidents %+v; want one naming the pod's own path", incidents)
		}
		if c := m.Checks()[0]; c.Workload.Diagnosis != string(diagPodPath) || c.State != stateDown {
			t.Errorf("check %+v, want down with diagnosis pod-path", c)
		}
	})
}

// A pod whose TLS handshake stalls after TCP connected: the diagnosis
// names the path MTU, the tunnel is asked once to check its path MTU at
// once, and never suspected (no rung helps with a path MTU).
func TestWorkloadMonitorHintsThePathMTUAndSuspectsNoTunnel(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ns := probes.Target{Netns: probes.Netns{Path: "/var/run/netns/cni-1"}, Path: "/var/run/netns/cni-1", Source: probes.SourceCRI, Pod: "factory/telemetry-a", ID: "4:1"}
		p := &fakeWorkloadProber{target: ns, pod: probes.ClassTimeout, host: probes.ClassOK, stalled: true}
		sus := &fakeSuspector{}
		m := New(Config{Workloads: []configs.Workload{testWorkload()}, OS: p.os(), Tunnels: sus, Emit: func(core.Event) {}, Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan error, 1)
		go func() { done <- m.Run(ctx) }()
		time.Sleep(60 * time.Second)
		synctest.Wait()
		cancel()
		<-done
		if diff := cmp.Diff([]string{"hint-path-mtu wg0"}, sus.take()); diff != "" {
			t.Errorf("calls to the tunnel (-want +got):\n%s", diff)
		}
		if c := m.Checks()[0]; c.Workload.Diagnosis != wire.DiagPathMTU || c.State != stateDown || !strings.Contains(c.Detail, "path-MTU blackhole") {
			t.Errorf("check %+v, want down with diagnosis path-mtu", c)
		}
	})
}

func TestWorkloadMonitorWithoutHostProbeSaysSo(t *testing.T) {
	w := testWorkload()
	w.MQTT.HostBroker = ""
	p := &fakeWorkloadProber{target: probes.Target{Netns: probes.Netns{Path: "/x"}, Path: "/x", Source: probes.SourceNetns, ID: "1"}, pod: probes.ClassTimeout}
	m := New(Config{Workloads: []configs.Workload{w}, OS: p.os(), Tunnels: &fakeSuspector{}, Emit: func(core.Event) {}, Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	got := m.Check(context.Background())
	if len(got) != 1 {
		t.Fatalf("got %d checks", len(got))
	}
	c := got[0]
	if c.Workload.Diagnosis != string(diagPodOnly) || c.Workload.HostProbeConfigured {
		t.Errorf("check %+v: want diagnosis pod-failed and host probe not configured", c)
	}
}

func TestWorkloadMonitorCheckIsOneShot(t *testing.T) {
	p := &fakeWorkloadProber{target: probes.Target{Netns: probes.Netns{Path: "/x"}, Path: "/x", Source: probes.SourceNetns, ID: "1"}, pod: probes.ClassTimeout, host: probes.ClassOK}
	sus := &fakeSuspector{}
	evs := &eventLog{}
	m := New(Config{Workloads: []configs.Workload{testWorkload()}, OS: p.os(), Tunnels: sus, Emit: evs.Emit, Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	got := m.Check(context.Background())
	want := []wire.Check{{Kind: "workload", Target: "telemetry", State: stateDown, Workload: &wire.WorkloadInfo{
		Diagnosis: string(diagOverlay), Netns: &wire.Netns{Path: "/x", Source: probes.SourceNetns, ID: "1"}, Tunnel: "wg0", HostProbeConfigured: true,
		PodProbe:  &wire.Probe{Probe: "mqtt", Target: "tcp://10.43.0.20:1883", Class: string(probes.ClassTimeout), LatencySeconds: 0.001},
		HostProbe: &wire.Probe{Probe: "mqtt", Target: "tcp://192.0.2.10:1883", Class: string(probes.ClassOK), LatencySeconds: 0.001},
	}}}
	if diff := cmp.Diff(want, got, cmp.FilterPath(func(p cmp.Path) bool { return p.Last().String() == ".Detail" }, cmp.Ignore())); diff != "" {
		t.Errorf("Check (-want +got):\n%s", diff)
	}
	if s := sus.take(); len(s) != 0 {
		t.Errorf("Check suspected %v", s)
	}
	if e := evs.take(); len(e) != 0 {
		t.Errorf("Check emitted %v", e)
	}
	if st := m.Checks()[0].State; st != stateUnknown {
		t.Errorf("Check changed the state to %s", st)
	}
}

func TestWorkloadMQTTHostProbeVerifiesTheBrokerName(t *testing.T) {
	pod, host := brokerProbes(configs.Broker{Broker: "ssl://broker.cloud.example:8883", HostBroker: "ssl://198.51.100.7:8883", TLS: configs.TLS{CA: "/etc/edgeheal/ca.pem"}})
	if pod.TLS.ServerName != "" {
		t.Errorf("pod server name %q, want empty (the URL host is used)", pod.TLS.ServerName)
	}
	if host == nil || host.TLS.ServerName != "broker.cloud.example" || host.Broker != "ssl://198.51.100.7:8883" {
		t.Errorf("host probe %+v: want broker 198.51.100.7 verified as broker.cloud.example", host)
	}
}

// hangingPods is a container runtime that never answers: Locate returns
// only when its context ends.
type hangingPods struct{ calls atomic.Int64 }

func (h *hangingPods) Locate(ctx context.Context, _ probes.Where) (probes.Target, error) {
	h.calls.Add(1)
	<-ctx.Done()
	return probes.Target{}, fmt.Errorf("listing ready pod sandboxes: %w", ctx.Err())
}

// A container runtime that hangs (containerd under disk pressure) is the
// workload's problem, said so within the probe's timeout, and the monitor
// goes on with its rounds: a round that never ended would stop the
// watchdog and have systemd restart the whole agent, again and again.
func TestWorkloadMonitorGivesUpOnARuntimeThatDoesNotAnswer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := &fakeWorkloadProber{pod: probes.ClassOK, host: probes.ClassOK}
		os := p.os()
		pods := &hangingPods{}
		os.Pods = pods
		m := New(Config{Workloads: []configs.Workload{testWorkload()}, OS: os, Tunnels: &fakeSuspector{}, Emit: func(core.Event) {}, Log: slog.New(slog.NewTextHandler(io.Discard, nil))})

		start := time.Now()
		c := m.Check(t.Context())[0]
		if took := time.Since(start); took != time.Second { // the fake clock: exactly the probe's timeout
			t.Errorf("Check took %s, want the probe's timeout, 1s", took)
		}
		if c.State != stateUnknown || !strings.Contains(c.Detail, "the container runtime at /run/k3s/containerd/containerd.sock gave no answer within 1s") {
			t.Errorf("check %s %q: want unknown, naming the runtime that did not answer", c.State, c.Detail)
		}

		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan error, 1)
		go func() { done <- m.Run(ctx) }()
		before := pods.calls.Load()
		time.Sleep(time.Minute)
		synctest.Wait()
		if n := pods.calls.Load() - before; n < 5 {
			t.Errorf("%d rounds in a minute of 10 s intervals, want them to go on", n)
		}
		if h := m.Health(); time.Since(h.LastProgress) > h.Deadline {
			t.Errorf("health: last progress %s ago, deadline %s: the component would be called stale", time.Since(h.LastProgress), h.Deadline)
		}
		if got := m.Checks()[0]; !strings.Contains(got.Detail, "no answer within 1s") {
			t.Errorf("check detail %q, want the runtime named", got.Detail)
		}
		cancel()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	})
}

// A panic in one workload's round is reported with its stack, the round
// runs again a second later, and the workload is probed as before.
func TestAPanicInAWorkloadsRoundIsRecoveredAndReported(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := &fakeWorkloadProber{target: probes.Target{Netns: probes.Netns{Path: "/x"}, Path: "/x", Source: probes.SourceNetns, ID: "1"},
			pod: probes.ClassOK, host: probes.ClassOK, panics: 1}
		evs := &eventLog{}
		m := New(Config{Workloads: []configs.Workload{testWorkload()}, OS: p.os(), Emit: evs.Emit})
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- m.Run(ctx) }()
		time.Sleep(1500 * time.Millisecond)
		synctest.Wait()
		var panicked *core.Event
		evs.mu.Lock()
		for i, e := range evs.evs {
			if e.Kind == wire.EventComponent && e.Result == "panic" {
				panicked = &evs.evs[i]
			}
		}
		evs.mu.Unlock()
		if panicked == nil || panicked.Target != "workloads/telemetry" || !strings.Contains(panicked.Evidence["stack"].(string), "fakeWorkloadProber).MQTT") {
			t.Errorf("panic event %+v, want one for workloads/telemetry with the stack of the probe", panicked)
		}
		if c := m.Checks(); len(c) != 1 || c[0].State != stateOK {
			t.Errorf("after the panic: %+v, want the workload probed again and ok", c)
		}
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run = %v, want nil", err)
		}
	})
}
