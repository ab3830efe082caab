package tunnel

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/edgeheal/edgeheal/configs"
)

func TestRebindDecide(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	// A forced handshake 3 s ago: two initiations' worth left, nothing back.
	stuck := rebindInput{
		Now: t0.Add(3 * time.Second), UplinkOK: true, Path: pathWorks,
		ForcedAt: t0, TxSince: 296, Port: 51820, Endpoint: "192.0.2.1:51820",
	}
	with := func(fn func(*rebindInput)) rebindInput { in := stuck; fn(&in); return in }
	tests := []struct {
		name   string
		in     rebindInput
		run    bool
		wait   bool
		whyHas string
	}{
		{name: "runs when the handshake's initiations left, nothing came back and the host path works",
			in: stuck, run: true, whyHas: "the NAT mapping of udp local port 51820 → 192.0.2.1:51820 is stuck"},
		{name: "does not run while the uplink is dark",
			in: with(func(in *rebindInput) { in.UplinkOK = false }), whyHas: "uplink is down"},
		{name: "does not run while the host path is unknown",
			in: with(func(in *rebindInput) { in.Path = pathUnknown }), whyHas: "not known to work (unknown)"},
		{name: "does not run while the host path is down: an outage, not a mapping",
			in: with(func(in *rebindInput) { in.Path = pathDown }), whyHas: "not known to work (down)"},
		{name: "waits while the forced handshake is still pending",
			in: with(func(in *rebindInput) { in.Now = t0.Add(time.Second) }), wait: true, whyHas: "still pending"},
		{name: "does not run before any forced handshake",
			in: with(func(in *rebindInput) { in.ForcedAt = time.Time{} }), whyHas: "no forced handshake"},
		{name: "does not run when the forced handshake completed",
			in: with(func(in *rebindInput) { in.Handshake = t0.Add(5 * time.Millisecond) }), whyHas: "completed"},
		{name: "does not run when nothing left: no initiation to blame",
			in: with(func(in *rebindInput) { in.TxSince = 0 }), whyHas: "nothing was sent"},
		{name: "does not run when packets from the peer arrive",
			in: with(func(in *rebindInput) { in.RxSince = 92 }), whyHas: "rx +92 bytes"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := rebindDecide(tt.in)
			if got.Run != tt.run || got.Wait != tt.wait || !strings.Contains(got.Why, tt.whyHas) {
				t.Errorf("rebindDecide = %+v; want run %v wait %v, why containing %q", got, tt.run, tt.wait, tt.whyHas)
			}
		})
	}
}

func TestLadderDecideRebind(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	tun := configs.Tunnel{Interface: "wg0", Heal: []string{"reassert", "handshake", "rebind", "bounce"}, RebindPorts: "51830-51899"}
	run := rebindVerdict{Run: true, Why: "stuck"}
	fine := ladderGuards{UplinkOK: true, Path: pathWorks, SessionValid: true, ClockOK: true, Rebind: run}
	with := func(fn func(*ladderGuards)) ladderGuards { g := fine; fn(&g); return g }
	fresh := func() *actionBudget { return newActionBudget(3, time.Hour, 30*time.Second) }
	// The handshake just ran: its cooldown is on.
	afterHandshake := func() *actionBudget { b := fresh(); b.spend(t0.Add(-3 * time.Second)); return b }
	spent := func() *actionBudget {
		b := fresh()
		for i := range 3 {
			b.spend(t0.Add(time.Duration(-100+i) * time.Second))
		}
		return b
	}
	tests := []struct {
		name   string
		t      configs.Tunnel
		g      ladderGuards
		budget func() *actionBudget
		want   ladderStep
	}{
		{name: "runs on its evidence right after the handshake, without the handshake's cooldown",
			t: tun, g: fine, budget: afterHandshake, want: ladderStep{Index: 2, Rung: "rebind"}},
		{name: "holds while the uplink is dark",
			t: tun, g: with(func(g *ladderGuards) { g.UplinkOK, g.UplinkCause = false, "no default route" }), budget: fresh,
			want: ladderStep{Index: 2, Rung: "rebind", HoldKind: holdUplink, Hold: "uplink outage: no default route"}},
		{name: "holds while the host path is unknown and nothing shows packets get through",
			t: tun, g: with(func(g *ladderGuards) {
				g.Path, g.PathCause, g.Rebind = pathUnknown, "host path unknown", rebindVerdict{Why: "unknown"}
			}), budget: fresh,
			want: ladderStep{Index: 2, Rung: "rebind", HoldKind: holdPath, Hold: "host path unknown; waiting for WireGuard: a session that survived resumes by itself"}},
		{name: "waits while the forced handshake is still pending",
			t: tun, g: with(func(g *ladderGuards) { g.Rebind = rebindVerdict{Wait: true, Why: "forced handshake still pending"} }), budget: afterHandshake,
			want: ladderStep{Index: 2, Rung: "rebind", HoldKind: holdPending, Hold: "forced handshake still pending"}},
		{name: "is passed over when the evidence does not point at a stuck mapping",
			t: tun, g: with(func(g *ladderGuards) { g.Rebind = rebindVerdict{Why: "the forced handshake completed"} }), budget: afterHandshake,
			want: ladderStep{Index: 2, Rung: "rebind", Skip: "the forced handshake completed"}},
		{name: "gives up when the budget is spent",
			t: tun, g: fine, budget: spent,
			want: ladderStep{GiveUp: "budget spent: 3 disruptive actions in 1h0m0s (next rung rebind)"}},
		{name: "is not applicable without rebind_ports: the next rung comes",
			t: with2(tun, func(t *configs.Tunnel) { t.RebindPorts = "" }), g: fine, budget: fresh,
			want: ladderStep{Index: 3, Rung: "bounce"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := ladderDecide(tt.t, 2, tt.g, tt.budget(), t0)
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("ladderDecide (-want +got):\n%s", diff)
			}
		})
	}
}

func with2(t configs.Tunnel, fn func(*configs.Tunnel)) configs.Tunnel { fn(&t); return t }

func TestRebindCandidates(t *testing.T) {
	r := configs.PortRange{Lo: 51830, Hi: 51833}
	tests := []struct {
		name    string
		r       configs.PortRange
		current int
		n       int
		want    []int
	}{
		{"Flannel's port outside the range starts at its first port", r, 51820, 8, []int{51830, 51831, 51832, 51833}},
		{"a port inside the range walks on from it and wraps, never itself", r, 51832, 8, []int{51833, 51830, 51831}},
		{"at most n", r, 51820, 2, []int{51830, 51831}},
		{"a one-port range that is the current port has nothing", configs.PortRange{Lo: 51830, Hi: 51830}, 51830, 8, nil},
		{"no range, no candidates", configs.PortRange{}, 51820, 8, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if diff := cmp.Diff(tt.want, rebindCandidates(tt.r, tt.current, tt.n)); diff != "" {
				t.Errorf("rebindCandidates (-want +got):\n%s", diff)
			}
		})
	}
}

func TestNextPeerUnverifiedEndsVerificationAtOnce(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	pol := peerPolicy{Misses: 3, VerifyTimeout: 15 * time.Second, Heal: []string{"reassert", "handshake", "rebind"}}
	s := peerState{Phase: peerHealing, Since: t0, Rung: 2, ActedAt: t0, DoneAt: t0, Opened: t0}
	bad := peerObservation{Now: t0.Add(2 * time.Second), Bad: true, Reason: "probe missed: timeout"}
	if got := nextPeer(s, bad, pol); got.Phase != peerHealing {
		t.Errorf("a miss 2 s into a 15 s verification: phase %s; want healing", got.Phase)
	}
	bad.Unverified = true
	if got := nextPeer(s, bad, pol); got.Phase != peerDown || got.Rung != 2 {
		t.Errorf("an unverified rung: phase %s rung %d; want down, rung 2 (rebind next)", got.Phase, got.Rung)
	}
}
