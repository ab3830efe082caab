package workload

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/edgeheal/edgeheal/probes"
)

func res(c probes.Class) probes.Result {
	return probes.Result{Probe: "mqtt", Class: c, Latency: 2 * time.Millisecond}
}

func resp(c probes.Class) *probes.Result { r := res(c); return &r }

func TestDiagnoseWorkload(t *testing.T) {
	tests := []struct {
		name string
		obs  Observation
		want Diagnosis
	}{
		{"pod ok is ok, whatever the host", Observation{Pod: res(probes.ClassOK), Host: resp(probes.ClassTimeout)}, DiagOK},
		{"pod ok without a host probe is ok", Observation{Pod: res(probes.ClassOK)}, DiagOK},
		{"pod times out while the host connects is overlay", Observation{Pod: res(probes.ClassTimeout), Host: resp(probes.ClassOK)}, DiagOverlay},
		{"pod has no route while the host connects is overlay", Observation{Pod: res(probes.ClassNoRoute), Host: resp(probes.ClassOK)}, DiagOverlay},
		{"pod dns fails while the host connects is overlay", Observation{Pod: res(probes.ClassDNS), Host: resp(probes.ClassOK)}, DiagOverlay},
		{"both refused is broker", Observation{Pod: res(probes.ClassRefused), Host: resp(probes.ClassRefused)}, DiagBroker},
		{"pod timeout and host tls failure is broker", Observation{Pod: res(probes.ClassTimeout), Host: resp(probes.ClassTLS)}, DiagBroker},
		{"both time out is uplink", Observation{Pod: res(probes.ClassTimeout), Host: resp(probes.ClassTimeout)}, DiagUplink},
		{"host has no route is uplink", Observation{Pod: res(probes.ClassTimeout), Host: resp(probes.ClassNoRoute)}, DiagUplink},
		{"auth from the pod is auth, not network", Observation{Pod: res(probes.ClassAuth), Host: resp(probes.ClassOK)}, DiagAuth},
		{"a failure without a host probe says it cannot tell", Observation{Pod: res(probes.ClassTimeout)}, DiagPodOnly},
		{"no matching pod is no-pod", Observation{ResolveErr: fmt.Errorf("pod x: %w", probes.ErrNoPod)}, DiagNoPod},
		{"an unreachable cri is unknown", Observation{ResolveErr: errors.New("cri: connection refused")}, DiagUnknown},
		{"a pod probe that could not be made is unknown", Observation{PodErr: errors.New("reading password file")}, DiagUnknown},
		{"a host probe that could not be made is unknown", Observation{Pod: res(probes.ClassTimeout), HostErr: errors.New("reading ca")}, DiagUnknown},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, detail := Diagnose(tt.obs)
			if got != tt.want {
				t.Errorf("DiagnoseWorkload = %q (%s), want %q", got, detail, tt.want)
			}
			if detail == "" {
				t.Errorf("no detail")
			}
		})
	}
}

func TestNextWorkload(t *testing.T) {
	t0 := time.Unix(1_780_000_000, 0)
	type step struct {
		d    Diagnosis
		ns   string
		want string // state after the step
		act  bool
	}
	tests := []struct {
		name   string
		misses int
		steps  []step
	}{
		{"overlay is acted on only after misses rounds in a row", 3, []step{
			{DiagOK, "a", stateOK, false},
			{DiagOverlay, "a", stateSuspect, false},
			{DiagOverlay, "a", stateSuspect, false},
			{DiagOverlay, "a", stateDown, true},
			{DiagOverlay, "a", stateDown, true},
			{DiagOK, "a", stateOK, false},
		}},
		{"a good round restarts the streak", 2, []step{
			{DiagOverlay, "a", stateSuspect, false},
			{DiagOK, "a", stateOK, false},
			{DiagOverlay, "a", stateSuspect, false},
			{DiagOverlay, "a", stateDown, true},
		}},
		{"broker and uplink go down but never act", 2, []step{
			{DiagBroker, "a", stateSuspect, false},
			{DiagBroker, "a", stateDown, false},
			{DiagUplink, "a", stateDown, false},
		}},
		{"overlay after broker needs its own streak", 2, []step{
			{DiagBroker, "a", stateSuspect, false},
			{DiagBroker, "a", stateDown, false},
			{DiagOverlay, "a", stateDown, false},
			{DiagOverlay, "a", stateDown, true},
		}},
		{"a probe that could not be made changes nothing", 2, []step{
			{DiagOverlay, "a", stateSuspect, false},
			{DiagUnknown, "", stateSuspect, false},
			{DiagOverlay, "a", stateDown, true},
		}},
		{"no-pod is its own state and not a failure", 2, []step{
			{DiagOverlay, "a", stateSuspect, false},
			{DiagNoPod, "", stateNoPod, false},
			{DiagOK, "b", stateOK, false},
		}},
		{"a new namespace restarts the streak", 2, []step{
			{DiagOverlay, "a", stateSuspect, false},
			{DiagOverlay, "b", stateSuspect, false},
			{DiagOverlay, "b", stateDown, true},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := status{State: stateUnknown}
			var got, want []string
			for i, st := range tt.steps {
				var act bool
				s, act = next(s, st.d, "detail", st.ns, tt.misses, t0.Add(time.Duration(i)*time.Second))
				got = append(got, fmt.Sprintf("%s act=%v", s.State, act))
				want = append(want, fmt.Sprintf("%s act=%v", st.want, st.act))
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("states (-want +got):\n%s", diff)
			}
		})
	}
}

func TestPodPathOrOverlay(t *testing.T) {
	overlay := "pod probe timeout while the host reaches the broker in 2ms: " + overlayOrTunnel
	for _, tc := range []struct {
		name    string
		d       Diagnosis
		healthy bool
		want    Diagnosis
		says    string
	}{
		{"overlay with the tunnel's probe answering is the pod's own path", DiagOverlay, true, DiagPodPath, "2ms, and the tunnel carries traffic (probe ok): the pod's own path"},
		{"overlay with the tunnel dark stays overlay", DiagOverlay, false, DiagOverlay, overlay},
		{"another diagnosis is left alone", DiagBroker, true, DiagBroker, overlay},
	} {
		d, detail := podPathOrOverlay(tc.d, overlay, tc.healthy, "probe ok")
		if d != tc.want || !strings.Contains(detail, tc.says) {
			t.Errorf("%s: %s %q, want %s saying %q", tc.name, d, detail, tc.want, tc.says)
		}
	}
}
