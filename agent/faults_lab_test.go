package agent_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.zx2c4.com/wireguard/wgctrl/wgtypes"

	"github.com/edgeheal/edgeheal/agent"
	"github.com/edgeheal/edgeheal/agent/core"
	"github.com/edgeheal/edgeheal/configs"
	"github.com/edgeheal/edgeheal/internal/testsupport"
	"github.com/edgeheal/edgeheal/internal/testsupport/agentlab"
	"github.com/edgeheal/edgeheal/internal/testsupport/wgpair"
	"github.com/edgeheal/edgeheal/netfix"
	"github.com/edgeheal/edgeheal/probes"
	"github.com/edgeheal/edgeheal/wire"
)

// Fault tests of the supervised agent on the real OS backend: a component
// that panics or gets stuck is reported, and the others, the offload guard
// first, never notice.

// panickyWG is the real WireGuard handle that panics once, on the first
// read of one device after it is armed: a bug in one tunnel's round.
type panickyWG struct {
	netfix.WireGuard
	iface string
	armed atomic.Bool
}

func (w *panickyWG) Device(name string) (*wgtypes.Device, error) {
	if name == w.iface && w.armed.CompareAndSwap(true, false) {
		var peers []wgtypes.Peer
		_ = peers[3] // index out of range, as a real bug would
	}
	return w.WireGuard.Device(name)
}

// eventsSeen collects the agent's events.
type eventsSeen struct {
	mu  sync.Mutex
	evs []core.Event
}

func (e *eventsSeen) emit(ev core.Event) { e.mu.Lock(); e.evs = append(e.evs, ev); e.mu.Unlock() }

func (e *eventsSeen) find(match func(core.Event) bool) (core.Event, bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, ev := range e.evs {
		if match(ev) {
			return ev, true
		}
	}
	return core.Event{}, false
}

func runAgent(t *testing.T, cfg *configs.Config, os core.OS, emit core.Emit) *agent.Agent {
	t.Helper()
	a := agent.New(cfg, agent.Options{OS: os, Emit: emit})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run = %v, want nil", err)
		}
	})
	return a
}

func componentCheck(a *agent.Agent, name string) wire.Check {
	for _, c := range a.Checks() {
		if c.Kind == wire.KindComponent && c.Target == name {
			return c
		}
	}
	return wire.Check{}
}

func TestLabAPanicInOneTunnelIsRecoveredAndTheRestKeepWorking(t *testing.T) {
	testsupport.RequireRoot(t, "wireguard-go devices and veth links in network namespaces")
	p1, p2 := wgpair.NewPair(t), wgpair.NewPair(t)
	ol := agentlab.New(t) // the agent's namespace: its uplink
	ol.AddVeth(t, "up0")
	os := ol.OS
	wg := &panickyWG{WireGuard: os.WireGuard, iface: p1.A.Dev.Name} // UAPI sockets are machine-wide
	os.WireGuard = wg
	cfg, err := configs.Parse("faults.yaml", []byte(`version: 1
node: {name: faults}
interval: 200ms
uplinks: [{name: up0}]
tunnels:
  - {interface: `+p1.A.Dev.Name+`, probe: {interval: 200ms, timeout: 200ms}}
  - {interface: `+p2.A.Dev.Name+`, probe: {interval: 200ms, timeout: 200ms}}
`))
	if err != nil {
		t.Fatal(err)
	}
	seen := &eventsSeen{}
	a := runAgent(t, cfg, os, seen.emit)
	testsupport.WaitFor(t, 5*time.Second, "every component ok", func() bool { ok, _ := a.Ready(); return ok })
	tunnel2Since := componentCheck(a, "tunnel/"+p2.A.Dev.Name).Since

	wg.armed.Store(true)
	panicked := func(ev core.Event) bool {
		return ev.Kind == "component" && ev.Result == "panic" && ev.Target == "tunnel/"+p1.A.Dev.Name
	}
	testsupport.WaitFor(t, 5*time.Second, "the panic reported as an event", func() bool { _, ok := seen.find(panicked); return ok })
	ev, _ := seen.find(panicked)
	if stack, _ := ev.Evidence["stack"].(string); !strings.Contains(stack, "panickyWG).Device") {
		t.Errorf("the event's stack does not show where it panicked:\n%s", stack)
	}

	// The offload guard never noticed: a re-plugged uplink is fixed at once.
	ol.DelLink(t, "up0")
	ol.AddVeth(t, "up0")
	testsupport.WaitFor(t, 5*time.Second, "offload off on the re-plugged uplink", func() bool { return len(ol.TxOn(t, "up0")) == 0 })
	// The tunnel that panicked runs again; the other was never restarted.
	testsupport.WaitFor(t, 10*time.Second, "the tunnel that panicked running again", func() bool {
		return componentCheck(a, "tunnel/"+p1.A.Dev.Name).State == agent.ComponentOK
	})
	if got := componentCheck(a, "tunnel/"+p2.A.Dev.Name); got.State != agent.ComponentOK || !got.Since.Equal(tunnel2Since) {
		t.Errorf("the other tunnel: %+v, want ok and running since %v (not restarted)", got, tunnel2Since)
	}
	for _, c := range a.Checks() {
		if c.Kind == wire.KindPeer && c.Peer != nil && c.Peer.Interface == p2.A.Dev.Name && c.State != "ok" {
			t.Errorf("the other tunnel's peer: %+v", c)
		}
	}
}

// stuckPods is the real pod locator that, once armed, blocks and does not
// heed its context, as a call wedged in the kernel does, until release is
// closed. (A runtime that merely does not answer is given up on after the
// probe's timeout: TestWorkloadMonitorGivesUpOnARuntimeThatDoesNotAnswer.)
type stuckPods struct {
	core.PodLocator
	stuck   atomic.Bool
	release chan struct{}
}

func (p *stuckPods) Locate(ctx context.Context, w probes.Where) (probes.Target, error) {
	if p.stuck.Load() {
		<-p.release
		return probes.Target{}, errors.New("released at the end of the test")
	}
	return p.PodLocator.Locate(ctx, w)
}

func TestLabAStuckComponentStopsFeedingTheWatchdog(t *testing.T) {
	testsupport.RequireRoot(t, "veth links in a network namespace")
	ol := agentlab.New(t)
	ol.AddVeth(t, "up0")
	os := ol.OS
	pods := &stuckPods{PodLocator: os.Pods, release: make(chan struct{})}
	os.Pods = pods
	cfg, err := configs.Parse("faults.yaml", []byte(`version: 1
node: {name: faults}
interval: 100ms
uplinks: [{name: up0}]
workloads:
  - {name: plc, netns: /proc/self/ns/net, interval: 100ms, misses: 2, mqtt: {broker: "tcp://127.0.0.1:1", timeout: 50ms}}
`))
	if err != nil {
		t.Fatal(err)
	}
	a := runAgent(t, cfg, os, nil)
	t.Cleanup(func() { close(pods.release) }) // before runAgent's cleanup waits for the agent
	testsupport.WaitFor(t, 5*time.Second, "every component ok", func() bool { ok, _ := a.Ready(); return ok })
	testsupport.WaitFor(t, time.Second, "the watchdog fed", func() bool { return time.Since(a.LastProgress()) < 300*time.Millisecond })

	pods.stuck.Store(true) // the workload monitor's next round hangs
	testsupport.WaitFor(t, 5*time.Second, "the stuck component called stale", func() bool {
		return componentCheck(a, "workloads").State == agent.ComponentStale
	})
	stalled := a.LastProgress()
	time.Sleep(time.Second)
	if p := a.LastProgress(); !p.Equal(stalled) {
		t.Errorf("progress moved from %v to %v while a component was stuck: the watchdog would still be fed", stalled, p)
	}
	if ok, why := a.Ready(); ok || !strings.Contains(why, "workloads: stale") {
		t.Errorf("Ready = %v %q, want not ready naming the stuck component", ok, why)
	}
	// The offload guard keeps working meanwhile.
	ol.DelLink(t, "up0")
	ol.AddVeth(t, "up0")
	testsupport.WaitFor(t, 5*time.Second, "offload off on the re-plugged uplink", func() bool { return len(ol.TxOn(t, "up0")) == 0 })
}
