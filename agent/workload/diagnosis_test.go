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

func stalled() probes.Result {
	r := res(probes.ClassTimeout)
	r.HandshakeStalled = true
	return r
}

func TestDiagnoseWorkload(t *testing.T) {
	tests := []struct {
		name string
		obs  observation
		want diagnosis
	}{
		{"pod ok is ok, whatever the host", observation{Pod: res(probes.ClassOK), Host: resp(probes.ClassTimeout)}, diagOK},
		{"pod ok without a host probe is ok", observation{Pod: res(probes.ClassOK)}, diagOK},
		{"pod times out while the host connects is overlay", observation{Pod: res(probes.ClassTimeout), Host: resp(probes.ClassOK)}, diagOverlay},
		{"pod has no route while the host connects is overlay", observation{Pod: res(probes.ClassNoRoute), Host: resp(probes.ClassOK)}, diagOverlay},
		{"pod dns fails while the host connects is overlay", observation{Pod: res(probes.ClassDNS), Host: resp(probes.ClassOK)}, diagOverlay},
		{"both refused is broker", observation{Pod: res(probes.ClassRefused), Host: resp(probes.ClassRefused)}, diagBroker},
		{"pod timeout and host tls failure is broker", observation{Pod: res(probes.ClassTimeout), Host: resp(probes.ClassTLS)}, diagBroker},
		{"both time out is uplink", observation{Pod: res(probes.ClassTimeout), Host: resp(probes.ClassTimeout)}, diagUplink},
		{"host has no route is uplink", observation{Pod: res(probes.ClassTimeout), Host: resp(probes.ClassNoRoute)}, diagUplink},
		{"auth from the pod is auth, not network", observation{Pod: res(probes.ClassAuth), Host: resp(probes.ClassOK)}, diagAuth},
		{"a broker that broke MQTT answering the pod is the broker, never the overlay", observation{Pod: res(probes.ClassProtocol), Host: resp(probes.ClassOK)}, diagBroker},
		{"a TLS handshake that stalled after TCP connected is the path MTU, whatever the host",
			observation{Pod: stalled(), Host: resp(probes.ClassOK)}, diagPathMTU},
		{"stalled from the pod and from the host is the path MTU too, not the uplink",
			observation{Pod: stalled(), Host: func() *probes.Result { r := stalled(); return &r }()}, diagPathMTU},
		{"a stalled handshake without a host probe is the path MTU", observation{Pod: stalled()}, diagPathMTU},
		{"a failure without a host probe says it cannot tell", observation{Pod: res(probes.ClassTimeout)}, diagPodOnly},
		{"no matching pod is no-pod", observation{ResolveErr: fmt.Errorf("pod x: %w", probes.ErrNoPod)}, diagNoPod},
		{"an unreachable cri is unknown", observation{ResolveErr: errors.New("cri: connection refused")}, diagUnknown},
		{"a pod probe that could not be made is unknown", observation{PodErr: errors.New("reading password file")}, diagUnknown},
		{"a host probe that could not be made is unknown", observation{Pod: res(probes.ClassTimeout), HostErr: errors.New("reading ca")}, diagUnknown},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, detail := diagnose(tt.obs)
			if got != tt.want {
				t.Errorf("diagnose = %q (%s), want %q", got, detail, tt.want)
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
		d    diagnosis
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
			{diagOK, "a", stateOK, false},
			{diagOverlay, "a", stateSuspect, false},
			{diagOverlay, "a", stateSuspect, false},
			{diagOverlay, "a", stateDown, true},
			{diagOverlay, "a", stateDown, true},
			{diagOK, "a", stateOK, false},
		}},
		{"a good round restarts the streak", 2, []step{
			{diagOverlay, "a", stateSuspect, false},
			{diagOK, "a", stateOK, false},
			{diagOverlay, "a", stateSuspect, false},
			{diagOverlay, "a", stateDown, true},
		}},
		{"broker and uplink go down but never act", 2, []step{
			{diagBroker, "a", stateSuspect, false},
			{diagBroker, "a", stateDown, false},
			{diagUplink, "a", stateDown, false},
		}},
		{"overlay after broker needs its own streak", 2, []step{
			{diagBroker, "a", stateSuspect, false},
			{diagBroker, "a", stateDown, false},
			{diagOverlay, "a", stateDown, false},
			{diagOverlay, "a", stateDown, true},
		}},
		{"a probe that could not be made changes nothing", 2, []step{
			{diagOverlay, "a", stateSuspect, false},
			{diagUnknown, "", stateSuspect, false},
			{diagOverlay, "a", stateDown, true},
		}},
		{"no-pod is its own state and not a failure", 2, []step{
			{diagOverlay, "a", stateSuspect, false},
			{diagNoPod, "", stateNoPod, false},
			{diagOK, "b", stateOK, false},
		}},
		{"a new namespace restarts the streak", 2, []step{
			{diagOverlay, "a", stateSuspect, false},
			{diagOverlay, "b", stateSuspect, false},
			{diagOverlay, "b", stateDown, true},
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
		d       diagnosis
		healthy bool
		want    diagnosis
		says    string
	}{
		{"overlay with the tunnel's probe answering is the pod's own path", diagOverlay, true, diagPodPath, "2ms, and the tunnel carries traffic (probe ok): the pod's own path"},
		{"overlay with the tunnel dark stays overlay", diagOverlay, false, diagOverlay, overlay},
		{"another diagnosis is left alone", diagBroker, true, diagBroker, overlay},
	} {
		d, detail := podPathOrOverlay(tc.d, overlay, tc.healthy, "probe ok")
		if d != tc.want || !strings.Contains(detail, tc.says) {
			t.Errorf("%s: %s %q, want %s saying %q", tc.name, d, detail, tc.want, tc.says)
		}
	}
}
