package workload

import (
	"context"
	"fmt"
	"sync"

	"github.com/edgeheal/edgeheal/configs"
	"github.com/edgeheal/edgeheal/probes"
	"github.com/edgeheal/edgeheal/wire"
)

// What the workloads show: their checks, readiness and the one-shot check
// of `edgeheal check`.

// Checks returns one check (kind "workload") per workload as of its last
// round: its state, where its namespace came from, the pod and host probe
// results and the diagnosis.
func (m *Monitor) Checks() []wire.Check {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]wire.Check, 0, len(m.wls))
	for _, r := range m.wls {
		out = append(out, checkOf(r.cfg, r.st, r.target, r.located, r.podRes, r.hostRes, r.host != nil, r.lastAction))
	}
	return out
}

func checkOf(w configs.Workload, st status, t probes.Target, located bool, pod, host *probes.Result, hostConfigured bool, lastAction string) wire.Check {
	info := &wire.WorkloadInfo{Diagnosis: string(st.Diagnosis), PodProbe: wireProbe(pod), HostProbe: wireProbe(host),
		HostProbeConfigured: hostConfigured, FailedRounds: st.Bad, Tunnel: w.Tunnel}
	c := wire.Check{Kind: wire.KindWorkload, Target: w.Name, State: st.State, Healthy: st.State == stateOK,
		Since: st.Since, LastAction: lastAction, Workload: info}
	if st.Diagnosis != "" {
		c.Detail = string(st.Diagnosis) + ": " + st.Detail
	} else if st.Detail != "" {
		c.Detail = st.Detail
	}
	if located {
		info.Netns = &wire.Netns{Path: t.Path, Source: t.Source, Pod: t.Pod, SandboxID: t.SandboxID, PID: t.PID, ID: t.ID}
	} else {
		info.NetnsSource = where(w).String()
	}
	return c
}

// wireProbe is a probe's result as a check shows it.
func wireProbe(r *probes.Result) *wire.Probe {
	if r == nil {
		return nil
	}
	return &wire.Probe{Probe: r.Probe, Target: r.Target, Class: string(r.Class), ReturnCode: r.ReturnCode, Detail: r.Detail,
		LatencySeconds: r.Latency.Seconds(), DNSLatencySeconds: r.DNSLatency.Seconds()}
}

// Ready answers /readyz/workload/<name>: found is false for an unknown
// workload. A workload is ready when its broker path from the pod is up:
// state ok, or failing for fewer than misses rounds (a single lost probe
// does not flip a pod's readiness). Before the first round it is not
// ready.
func (m *Monitor) Ready(name string) (ready bool, reason string, found bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, r := range m.wls {
		if r.cfg.Name != name {
			continue
		}
		switch r.st.State {
		case stateOK:
			return true, "ok", true
		case stateSuspect:
			return true, fmt.Sprintf("ok (failing %d of %d rounds: %s)", r.st.Bad, r.misses, r.st.Detail), true
		case stateUnknown:
			if r.st.Detail != "" {
				return false, "not observed yet: " + r.st.Detail, true
			}
			return false, "not probed yet", true
		}
		return false, string(r.st.Diagnosis) + ": " + r.st.Detail, true
	}
	return false, "no workload named " + name, false
}

// Check probes every workload once, from the pod and from the host, and
// returns a check for each with the diagnosis, for `edgeheal check`. It
// changes no state, emits no events and suspects no tunnel.
func (m *Monitor) Check(ctx context.Context) []wire.Check {
	out := make([]wire.Check, len(m.wls))
	var wg sync.WaitGroup
	for i, r := range m.wls {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rr := m.observe(ctx, r, true)
			d, detail := diagnose(rr.obs)
			st := status{Diagnosis: d, Detail: detail, State: oneShotState(d)}
			if d == diagUnknown {
				st.Diagnosis = ""
				st.Detail = string(diagUnknown) + ": " + detail
			}
			out[i] = checkOf(r.cfg, st, rr.target, rr.located, rr.pod, rr.host, r.host != nil, "")
		}()
	}
	wg.Wait()
	return out
}

func oneShotState(d diagnosis) string {
	switch d {
	case diagOK:
		return stateOK
	case diagNoPod:
		return stateNoPod
	case diagUnknown:
		return stateUnknown
	}
	return stateDown
}
