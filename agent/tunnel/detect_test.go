package tunnel

import (
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/edgeheal/edgeheal/probes"
)

func TestPeerSignals(t *testing.T) {
	t0 := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	const stale, silence = 210 * time.Second, 75 * time.Second
	type reading struct {
		sec   int
		stats probes.PeerStats
	}
	ka := 20 * time.Second
	tests := []struct {
		name       string
		readings   []reading
		wantBad    bool
		wantReason string
		wantRebase []bool
	}{
		{
			name:       "a new peer that never shook hands is a baseline, not an alarm",
			readings:   []reading{{0, probes.PeerStats{Keepalive: ka}}, {200, probes.PeerStats{Keepalive: ka}}},
			wantRebase: []bool{true, false},
		},
		{
			name:       "a handshake older than stale_after with keepalive on is bad",
			readings:   []reading{{0, probes.PeerStats{Keepalive: ka, LastHandshake: at(-100)}}, {111, probes.PeerStats{Keepalive: ka, LastHandshake: at(-100)}}},
			wantBad:    true,
			wantReason: "handshake age 3m31s over stale_after 3m30s",
			wantRebase: []bool{true, false},
		},
		{
			name:       "a handshake younger than stale_after is fine (healthy sawtooth under 205 s)",
			readings:   []reading{{0, probes.PeerStats{Keepalive: ka, LastHandshake: at(-100)}}, {105, probes.PeerStats{Keepalive: ka, LastHandshake: at(-100)}}},
			wantRebase: []bool{true, false},
		},
		{
			name:       "an old handshake with keepalive off is no signal: an idle tunnel has no session",
			readings:   []reading{{0, probes.PeerStats{LastHandshake: at(-1000)}}, {10, probes.PeerStats{LastHandshake: at(-1000)}}},
			wantRebase: []bool{true, false},
		},
		{
			name: "a peer re-added (counters back to zero, no handshake) re-baselines instead of alarming",
			readings: []reading{
				{0, probes.PeerStats{Keepalive: ka, LastHandshake: at(-100), RxBytes: 5000, TxBytes: 9000}},
				{100, probes.PeerStats{Keepalive: ka, RxBytes: 0, TxBytes: 148}},
				{300, probes.PeerStats{Keepalive: ka, RxBytes: 0, TxBytes: 148}},
			},
			wantRebase: []bool{true, true, false},
		},
		{
			name: "turning keepalive on restarts the handshake clock: an idle tunnel had no session to keep",
			readings: []reading{
				{0, probes.PeerStats{LastHandshake: at(-1000)}},
				{1, probes.PeerStats{Keepalive: ka, LastHandshake: at(-1000)}},
				{200, probes.PeerStats{Keepalive: ka, LastHandshake: at(-1000)}},
			},
			wantRebase: []bool{true, false, false},
		},
		{
			name: "rx flat for rx_silence while tx rises is bad",
			readings: []reading{
				{0, probes.PeerStats{RxBytes: 100, TxBytes: 100}},
				{30, probes.PeerStats{RxBytes: 100, TxBytes: 200}},
				{75, probes.PeerStats{RxBytes: 100, TxBytes: 300}},
			},
			wantBad:    true,
			wantReason: "rx flat for 1m15s while tx rose 200 bytes",
			wantRebase: []bool{true, false, false},
		},
		{
			name: "rx and tx both flat is an idle tunnel, not a dark one",
			readings: []reading{
				{0, probes.PeerStats{RxBytes: 100, TxBytes: 100}},
				{80, probes.PeerStats{RxBytes: 100, TxBytes: 100}},
			},
			wantRebase: []bool{true, false},
		},
		{
			name: "rx that grew recently resets the silence",
			readings: []reading{
				{0, probes.PeerStats{RxBytes: 100, TxBytes: 100}},
				{60, probes.PeerStats{RxBytes: 150, TxBytes: 200}},
				{100, probes.PeerStats{RxBytes: 150, TxBytes: 300}},
			},
			wantRebase: []bool{true, false, false},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var g peerSignals
			var rebased []bool
			var now time.Time
			for _, r := range tt.readings {
				now = at(r.sec)
				rebased = append(rebased, g.update(&r.stats, now))
			}
			bad, reason := g.slowBad(now, stale, silence)
			if bad != tt.wantBad || reason != tt.wantReason {
				t.Errorf("slowBad = %v %q, want %v %q", bad, reason, tt.wantBad, tt.wantReason)
			}
			if diff := cmp.Diff(tt.wantRebase, rebased); diff != "" {
				t.Errorf("re-baselined per reading (-want +got):\n%s", diff)
			}
		})
	}
}

func TestPeerObserve(t *testing.T) {
	t0 := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	fresh := peerSignals{seen: true, handshake: t0.Add(-10 * time.Second), keepalive: 20 * time.Second, rxMovedAt: t0}
	staleSig := fresh
	staleSig.handshake = t0.Add(-300 * time.Second)
	errProbe := errors.New("icmp socket: permission denied")
	tests := []struct {
		name      string
		s         peerState
		g         peerSignals
		probe     *probes.ProbeResult
		suspicion string
		want      peerObservation
	}{
		{
			name:  "a probe that answered is healthy even with a stale handshake",
			g:     staleSig,
			probe: &probes.ProbeResult{OK: true, Class: "ok"},
			want:  peerObservation{Now: t0},
		},
		{
			name:  "a probe that timed out is a miss, not yet confirmed",
			g:     fresh,
			probe: &probes.ProbeResult{Class: "timeout"},
			want:  peerObservation{Now: t0, Bad: true, Reason: "probe missed: timeout"},
		},
		{
			name:  "a probe that errored is no observation",
			g:     staleSig,
			probe: &probes.ProbeResult{Err: errProbe},
			want:  peerObservation{Now: t0, Err: errProbe},
		},
		{
			name:      "a probe that answers outranks a workload's suspicion: the pod's own path failed",
			g:         fresh,
			probe:     &probes.ProbeResult{OK: true},
			suspicion: "collector: pod path dark, host path fine",
			want:      peerObservation{Now: t0},
		},
		{
			name:      "a workload suspicion is a confirmed bad observation when the probe misses",
			g:         fresh,
			probe:     &probes.ProbeResult{Class: "timeout"},
			suspicion: "collector: pod path dark, host path fine",
			want:      peerObservation{Now: t0, Bad: true, Confirmed: true, Reason: "workload: collector: pod path dark, host path fine"},
		},
		{
			name:      "and without a probe",
			g:         fresh,
			suspicion: "collector: pod path dark, host path fine",
			want:      peerObservation{Now: t0, Bad: true, Confirmed: true, Reason: "workload: collector: pod path dark, host path fine"},
		},
		{
			name: "without a probe a stale handshake is a confirmed bad observation",
			g:    staleSig,
			want: peerObservation{Now: t0, Bad: true, Confirmed: true, Reason: "handshake age 5m0s over stale_after 3m30s"},
		},
		{
			name: "without a probe a healing peer is healthy only after a handshake newer than the rung",
			s:    peerState{Phase: peerHealing, ActedAt: t0.Add(-5 * time.Second)},
			g:    fresh,
			want: peerObservation{Now: t0, Bad: true, Reason: "no handshake since the last rung"},
		},
		{
			name: "without a probe a healing peer with a new handshake is healthy",
			s:    peerState{Phase: peerHealing, ActedAt: t0.Add(-15 * time.Second)},
			g:    fresh,
			want: peerObservation{Now: t0},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := tt.g
			got := peerObserve(tt.s, &g, t0, 210*time.Second, 75*time.Second, tt.probe, tt.suspicion)
			if diff := cmp.Diff(tt.want, got, cmpopts.EquateErrors()); diff != "" {
				t.Errorf("peerObserve (-want +got):\n%s", diff)
			}
		})
	}
}
