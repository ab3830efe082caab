package kube

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/edgeheal/edgeheal/wire"
	"github.com/edgeheal/edgeheal/wire/wiretest"
)

var t0 = time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)

func ready(checks ...Check) *Status {
	return &Status{Ready: true, LastProgress: t0, Checks: checks}
}

func peer(state, detail string) Check {
	return Check{Kind: wire.KindPeer, Target: "wg0/AbCd", State: state, Healthy: state == "ok", Detail: detail}
}

func workload(state, diag string) Check {
	return Check{Kind: wire.KindWorkload, Target: "telemetry", State: state, Healthy: state == "ok", Workload: &wire.WorkloadInfo{Diagnosis: diag}}
}

func TestDiagnose(t *testing.T) {
	healthy := Verdict{Status: True, Reason: ReasonHealthy, Message: "edgeheal: every tunnel and workload path works"}
	dark := Verdict{Status: False, Reason: ReasonTunnelDark, Message: "edgeheal: peer wg0/AbCd down: probe timeout", Dark: true}
	cases := []struct {
		name string
		prev Verdict
		st   *Status
		err  error
		want Verdict
	}{
		{"every check healthy", Verdict{}, ready(peer("ok", ""), workload("ok", "ok")), nil, healthy},
		{"a confirmed dark tunnel", healthy, ready(peer("down", "probe timeout")), nil, dark},
		{"a tunnel being healed is still dark", healthy, ready(peer("healing", "")),
			nil, Verdict{Status: False, Reason: ReasonTunnelDark, Message: "edgeheal: peer wg0/AbCd healing", Dark: true}},
		{"only suspect: the verdict stays as it was", dark, ready(peer("suspect", "")), nil, dark},
		{"only suspect at start: healthy until confirmed", Verdict{}, ready(peer("suspect", "")), nil, healthy},
		{"gave up wins over a dark workload", healthy, ready(workload("down", "overlay"), peer("degraded", "gave up: budget")), nil,
			Verdict{Status: False, Reason: ReasonGaveUp, Dark: true,
				Message: "edgeheal: workload telemetry down; peer wg0/AbCd degraded: gave up: budget"}},
		{"the workload's overlay diagnosis is a dark tunnel", healthy, ready(workload("down", "overlay")), nil,
			Verdict{Status: False, Reason: ReasonTunnelDark, Message: "edgeheal: workload telemetry down", Dark: true}},
		{"uplink down is not the overlay's fault: no taint", healthy, ready(workload("down", "uplink")), nil,
			Verdict{Status: False, Reason: ReasonUplinkDown, Message: "edgeheal: workload telemetry down"}},
		{"the broker refuses pods and host alike", healthy, ready(workload("down", "broker")), nil,
			Verdict{Status: False, Reason: ReasonBrokerUnreachable, Message: "edgeheal: workload telemetry down"}},
		{"an offload fight", healthy, ready(Check{Kind: wire.KindUplink, Target: "wwan0", State: "ok", Healthy: true,
			Detail: "fighting: turned back on 4 times since 2026-12-01T09:59:00Z", Uplink: &wire.UplinkInfo{Fighting: true}}), nil,
			Verdict{Status: False, Reason: ReasonOffloadFight, Message: "edgeheal: uplink wwan0 ok: fighting: turned back on 4 times since 2026-12-01T09:59:00Z"}},
		{"a dark tunnel wins over an offload fight", healthy, ready(Check{Kind: wire.KindUplink, Target: "wwan0", State: "ok", Detail: "fighting: x", Uplink: &wire.UplinkInfo{Fighting: true}}, peer("down", "")), nil,
			Verdict{Status: False, Reason: ReasonTunnelDark, Message: "edgeheal: uplink wwan0 ok: fighting: x; peer wg0/AbCd down", Dark: true}},
		{"a path-MTU blackhole nothing repairs", healthy, ready(peer("ok", ""), Check{Kind: wire.KindPathMTU, Target: "wg0", State: wire.CheckPathLow,
			Detail: "path MTU 1328 through the tunnel (sends 1420): larger packets are lost; not repaired: dry run"}), nil,
			Verdict{Status: False, Reason: ReasonPathMTUBlackhole,
				Message: "edgeheal: path-mtu wg0 low: path MTU 1328 through the tunnel (sends 1420): larger packets are lost; not repaired: dry run"}},
		{"a dark tunnel wins over its path MTU", healthy, ready(peer("down", ""), Check{Kind: wire.KindPathMTU, Target: "wg0", State: wire.CheckPathLow}), nil,
			Verdict{Status: False, Reason: ReasonTunnelDark, Message: "edgeheal: peer wg0/AbCd down; path-mtu wg0 low", Dark: true}},
		{"a path MTU fitted by the clamp is healthy, and the reason says so", healthy, ready(peer("ok", ""), Check{Kind: wire.KindPathMTU, Target: "wg0",
			State: wire.CheckPathClamped, Healthy: true, Detail: "path MTU 1328 through the tunnel (sends 1420): TCP MSS on wg0 clamped to 1288/1268"}), nil,
			Verdict{Status: True, Reason: ReasonPathMTUClamped,
				Message: "edgeheal: every tunnel and workload path works; path-mtu wg0 clamped: path MTU 1328 through the tunnel (sends 1420): TCP MSS on wg0 clamped to 1288/1268"}},
		{"the clock is not the overlay", Verdict{}, ready(Check{Kind: "clock", Target: "clock", State: "unsynchronised"}), nil, healthy},
		{"the agent cannot be read", healthy, nil, errors.New("connection refused"),
			Verdict{Status: Unknown, Reason: ReasonAgentUnreachable, Message: "reading the agent's status: connection refused"}},
		{"the agent's loop stalled", healthy, &Status{Ready: true, LastProgress: t0.Add(-time.Minute)}, nil,
			Verdict{Status: Unknown, Reason: ReasonAgentUnreachable, Message: "the agent's control loop made no progress for 1m0s"}},
		{"the agent is starting", Verdict{}, &Status{ReadyDetail: "first round not done"}, nil,
			Verdict{Status: Unknown, Reason: ReasonAgentStarting, Message: "the agent is starting: first round not done"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := Diagnose(c.prev, c.st, c.err, t0, 30*time.Second)
			if diff := cmp.Diff(c.want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

func TestNextConditionKeepsTheTransitionTime(t *testing.T) {
	v := Verdict{Status: False, Reason: ReasonTunnelDark, Message: "m"}
	first := NextCondition(nil, v, t0.Add(500*time.Millisecond))
	if !first.LastTransitionTime.Equal(t0) || !first.LastHeartbeatTime.Equal(t0) {
		t.Fatalf("first = %+v, want both times %v (whole seconds)", first, t0)
	}
	beat := NextCondition(&first, Verdict{Status: False, Reason: ReasonGaveUp, Message: "m"}, t0.Add(time.Minute))
	if !beat.LastTransitionTime.Equal(t0) || !beat.LastHeartbeatTime.Equal(t0.Add(time.Minute)) || !beat.Changed(&first) {
		t.Errorf("same status, new reason = %+v: the transition time stays, the heartbeat moves, and it is a change", beat)
	}
	back := NextCondition(&beat, Verdict{Status: True, Reason: ReasonHealthy}, t0.Add(2*time.Minute))
	if !back.LastTransitionTime.Equal(t0.Add(2 * time.Minute)) {
		t.Errorf("a new status = %+v, want the transition time moved", back)
	}
	if same := NextCondition(&back, Verdict{Status: True, Reason: ReasonHealthy}, t0.Add(3*time.Minute)); same.Changed(&back) {
		t.Errorf("a heartbeat alone counts as a change: %+v", same)
	}
}

func TestWantTaint(t *testing.T) {
	dark := Verdict{Status: False, Reason: ReasonTunnelDark, Dark: true}
	cases := []struct {
		name    string
		enabled bool
		v       Verdict
		since   time.Duration // how long dark (0: not dark)
		want    TaintWant
	}{
		{"dark for less than the grace: not yet", true, dark, 10 * time.Second, TaintKeep},
		{"dark for the grace: taint", true, dark, 30 * time.Second, TaintAdd},
		{"healthy: off", true, Verdict{Status: True}, 0, TaintRemove},
		{"unknown (the agent is gone): leave it", true, Verdict{Status: Unknown}, 0, TaintKeep},
		{"an uplink outage is not the overlay's: leave it", true, Verdict{Status: False, Reason: ReasonUplinkDown}, 0, TaintKeep},
		{"turned off in the config: never added", false, dark, time.Hour, TaintRemove},
		{"turned off, and unknown: leave it", false, Verdict{Status: Unknown}, 0, TaintKeep},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var since time.Time
			if c.since > 0 {
				since = t0.Add(-c.since)
			}
			if got := WantTaint(c.enabled, c.v, since, t0, 30*time.Second); got != c.want {
				t.Errorf("WantTaint = %d, want %d", got, c.want)
			}
		})
	}
}

func TestApplyTaintKeepsOtherTaints(t *testing.T) {
	other := Taint{Key: "node.kubernetes.io/unreachable", Effect: "NoExecute"}
	added, changed := ApplyTaint([]Taint{other}, TaintAdd, t0)
	if !changed || len(added) != 2 || added[0] != other || added[1].Key != TaintKey || added[1].Effect != "NoSchedule" {
		t.Fatalf("add = %+v, %v", added, changed)
	}
	if again, changed := ApplyTaint(added, TaintAdd, t0); changed || len(again) != 2 {
		t.Errorf("adding twice changed it: %+v", again)
	}
	removed, changed := ApplyTaint(added, TaintRemove, t0)
	if !changed || len(removed) != 1 || removed[0] != other {
		t.Errorf("remove = %+v, %v", removed, changed)
	}
	for _, ta := range added {
		if ta.Key == TaintKey && ta.Effect == "NoExecute" {
			t.Error("edgeheal set a NoExecute taint")
		}
	}
}

func TestNotes(t *testing.T) {
	healthy := Verdict{Status: True, Reason: ReasonHealthy}
	dark := Verdict{Status: False, Reason: ReasonTunnelDark, Message: "edgeheal: peer wg0/AbCd down"}
	acted := ready(Check{Kind: wire.KindPeer, Target: "wg0/AbCd", State: "healing", LastAction: "handshake changed at 10:00:01"})
	before := ready(Check{Kind: wire.KindPeer, Target: "wg0/AbCd", State: "down"})
	reasons := func(ns []Note) string {
		var s []string
		for _, n := range ns {
			s = append(s, n.Type+" "+n.Reason)
		}
		return strings.Join(s, ", ")
	}
	if got := reasons(Notes(&healthy, dark, before, before, t0, t0)); got != "Warning TunnelDark" {
		t.Errorf("turning dark: %q", got)
	}
	if got := reasons(Notes(&dark, dark, before, acted, t0, t0)); got != "Normal RepairAction" {
		t.Errorf("an action while dark: %q", got)
	}
	rec := Notes(&dark, healthy, acted, acted, t0, t0.Add(12300*time.Millisecond))
	if got := reasons(rec); got != "Normal OverlayRecovered" || !strings.Contains(rec[0].Message, "was TunnelDark for 12.3s") {
		t.Errorf("recovery: %q %+v", got, rec)
	}
	guarded := ready(acted.Checks[0], Check{Kind: wire.KindUplink, Target: "wwan0", State: "ok", LastAction: "offload-off changed at 10:00:02"})
	if got := reasons(Notes(&dark, dark, acted, guarded, t0, t0)); got != "Normal RepairAction" {
		t.Errorf("an uplink a reload added, already acted on: %q", got)
	}
	unknown := Verdict{Status: Unknown, Reason: ReasonAgentStarting}
	if got := reasons(Notes(&dark, unknown, acted, nil, t0, t0)); got != "" {
		t.Errorf("the agent restarting while dark: %q, want nothing", got)
	}
	if got := reasons(Notes(&dark, healthy, acted, acted, t0, t0)); got != "Normal OverlayRecovered" {
		t.Errorf("healthy after dark and an Unknown spell (known is still the dark verdict): %q", got)
	}
	if got := reasons(Notes(nil, healthy, nil, acted, time.Time{}, t0)); got != "" {
		t.Errorf("the first round of a healthy node: %q, want nothing", got)
	}
	if got := reasons(Notes(nil, dark, nil, acted, t0, t0)); got != "Warning TunnelDark" {
		t.Errorf("the first round of a dark node: %q", got)
	}
}

func TestCorrelatorAggregatesAndRateLimits(t *testing.T) {
	var c Correlator
	n := 0
	name := func() string { n++; return "ev" + string(rune('0'+n)) }
	a := Note{Type: Warning, Reason: ReasonTunnelDark, Message: "m", Time: t0}
	w1, _ := c.Correlate(a, name)
	a.Time = t0.Add(time.Minute)
	w2, _ := c.Correlate(a, name)
	if !w1.New || w2.New || w2.Name != w1.Name || w2.Count != 2 || !w2.First.Equal(t0) {
		t.Errorf("the same event twice: %+v then %+v, want one Event with count 2", w1, w2)
	}
	a.Time = t0.Add(20 * time.Minute)
	if w3, _ := c.Correlate(a, name); !w3.New {
		t.Errorf("after the window: %+v, want a new Event", w3)
	}
	// A flapping node: 25 at once pass, the 26th does not; one more after 5 minutes.
	var r Correlator
	passed := 0
	for i := range 40 {
		if _, ok := r.Correlate(Note{Type: Normal, Reason: ReasonRepair, Message: string(rune('a' + i)), Time: t0}, name); ok {
			passed++
		}
	}
	if passed != 25 || r.Dropped != 15 {
		t.Errorf("40 at once: %d passed, %d dropped; want 25 and 15", passed, r.Dropped)
	}
	if _, ok := r.Correlate(Note{Type: Normal, Reason: ReasonRepair, Message: "late", Time: t0.Add(5 * time.Minute)}, name); !ok {
		t.Error("a token did not come back after 5 minutes")
	}
}

// The reporter reads the agent's local status in the wire format (the
// golden file the agent's own tests hold its /v1/status to).
func TestTheReporterReadsTheWireFormat(t *testing.T) {
	var st Status
	if err := json.Unmarshal(wiretest.Golden(t, wiretest.LocalStatusFile), &st); err != nil {
		t.Fatal(err)
	}
	st.Ready = true // the golden agent is still starting; a ready one is judged on its checks
	v := Diagnose(Verdict{}, &st, nil, st.LastProgress, time.Minute)
	if v.Status != False || v.Reason != ReasonTunnelDark || !v.Dark {
		t.Errorf("Diagnose(golden) = %+v, want False %s (a peer healing, a workload dark on the overlay)", v, ReasonTunnelDark)
	}
	for _, want := range []string{"peer wg0/AbCdEfGh healing", "workload telemetry down"} {
		if !strings.Contains(v.Message, want) {
			t.Errorf("message %q does not name %q", v.Message, want)
		}
	}
}
