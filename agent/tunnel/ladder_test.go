package tunnel

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/edgeheal/edgeheal/configs"
)

func TestLadderDecide(t *testing.T) {
	t0 := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	// An explicit order, so that the indices below stay put whatever the default.
	order := []string{"reassert", "handshake", "reresolve", "bounce", "restart-unit"}
	full := configs.Tunnel{Interface: "wg0", Heal: order, EndpointHost: "hub.example.net", Unit: "wg-quick@wg0.service"}
	bare := configs.Tunnel{Interface: "wg0", Heal: order}
	fine := ladderGuards{UplinkOK: true, Path: pathWorks, SessionValid: true, ClockOK: true}
	with := func(g ladderGuards, fn func(*ladderGuards)) ladderGuards { fn(&g); return g }
	fresh := func() *actionBudget { return newActionBudget(3, time.Hour, 30*time.Second) }
	spentAt := func(secs ...int) func() *actionBudget {
		return func() *actionBudget {
			b := fresh()
			for _, s := range secs {
				b.spend(t0.Add(time.Duration(s) * time.Second))
			}
			return b
		}
	}
	tests := []struct {
		name   string
		t      configs.Tunnel
		from   int
		g      ladderGuards
		budget func() *actionBudget
		want   ladderStep
	}{
		{
			name: "the first rung with all guards fine is reassert",
			t:    full, g: fine, budget: fresh,
			want: ladderStep{Index: 0, Rung: "reassert"},
		},
		{
			name: "an uplink outage holds even the free reassert",
			t:    full, g: ladderGuards{UplinkCause: "no default route", ClockOK: true}, budget: fresh,
			want: ladderStep{Index: 0, Rung: "reassert", HoldKind: holdUplink, Hold: "uplink outage: no default route"},
		},
		{
			name: "a host path that answered before and is silent now is an uplink outage: the handshake waits",
			t:    full, from: 1, g: with(fine, func(g *ladderGuards) { g.Path, g.PathCause = pathDown, "host path to icmp://192.0.2.1: timeout" }), budget: fresh,
			want: ladderStep{Index: 1, Rung: "handshake", HoldKind: holdUplink, Hold: "uplink outage: host path to icmp://192.0.2.1: timeout"},
		},
		{
			name: "reassert runs during a host path outage: it only re-applies configuration",
			t:    full, g: with(fine, func(g *ladderGuards) { g.Path = pathDown }), budget: fresh,
			want: ladderStep{Index: 0, Rung: "reassert"},
		},
		{
			name: "reresolve runs during a host path outage: a moved endpoint is silent at its old address",
			t:    full, from: 2, g: with(fine, func(g *ladderGuards) { g.Path = pathDown }), budget: fresh,
			want: ladderStep{Index: 2, Rung: "reresolve"},
		},
		{
			name: "an unknown path holds the handshake: a session that survived resumes by itself",
			t:    full, from: 1, g: with(fine, func(g *ladderGuards) {
				g.Path, g.PathCause = pathUnknown, "host path unknown: icmp://192.0.2.1 has never answered (timeout)"
			}), budget: fresh,
			want: ladderStep{Index: 1, Rung: "handshake", HoldKind: holdPath,
				Hold: "host path unknown: icmp://192.0.2.1 has never answered (timeout); waiting for WireGuard: a session that survived resumes by itself"},
		},
		{
			name: "an unknown path with evidence that packets get through acts",
			t:    full, from: 1, g: with(fine, func(g *ladderGuards) {
				g.Path, g.Evidence = pathUnknown, "right after TX checksum offload turned off on wwan0"
			}), budget: fresh,
			want: ladderStep{Index: 1, Rung: "handshake"},
		},
		{
			name: "evidence does not override a path known to be down",
			t:    full, from: 1, g: with(fine, func(g *ladderGuards) {
				g.Path, g.PathCause, g.Evidence = pathDown, "silent", "packets from the peer arrive"
			}), budget: fresh,
			want: ladderStep{Index: 1, Rung: "handshake", HoldKind: holdUplink, Hold: "uplink outage: silent"},
		},
		{
			name: "a path that just came back lets WireGuard resume by itself first",
			t:    full, from: 1, g: with(fine, func(g *ladderGuards) { g.SettleUntil = t0.Add(5 * time.Second) }), budget: fresh,
			want: ladderStep{Index: 1, Rung: "handshake", HoldKind: holdSettle, Hold: "uplink back: WireGuard resumes by itself if it can (5s more)"},
		},
		{
			name: "a path that just came back, with the session expired during the outage: the handshake at once, nothing to lose",
			t:    full, from: 1, g: with(fine, func(g *ladderGuards) { g.SettleUntil, g.SessionValid = t0.Add(5*time.Second), false }), budget: fresh,
			want: ladderStep{Index: 1, Rung: "handshake"},
		},
		{
			name: "after the grace the ladder acts",
			t:    full, from: 1, g: with(fine, func(g *ladderGuards) { g.SettleUntil = t0 }), budget: fresh,
			want: ladderStep{Index: 1, Rung: "handshake"},
		},
		{
			name: "a bad clock does not hold reassert, which is not disruptive",
			t:    full, g: ladderGuards{UplinkOK: true, Path: pathWorks, ClockCause: "clock not synchronised"}, budget: fresh,
			want: ladderStep{Index: 0, Rung: "reassert"},
		},
		{
			name: "a bad clock holds the forced handshake",
			t:    full, from: 1, g: ladderGuards{UplinkOK: true, Path: pathWorks, ClockCause: "clock stepped back"}, budget: fresh,
			want: ladderStep{Index: 1, Rung: "handshake", HoldKind: holdClock, Hold: "clock stepped back"},
		},
		{
			name: "an unsynchronised clock lets the forced handshake run",
			t:    full, from: 1, g: ladderGuards{UplinkOK: true, Path: pathWorks, ClockSoft: true, ClockCause: "clock not synchronised"}, budget: fresh,
			want: ladderStep{Index: 1, Rung: "handshake"},
		},
		{
			name: "an unsynchronised clock holds the bounce",
			t:    full, from: 3, g: ladderGuards{UplinkOK: true, Path: pathWorks, ClockSoft: true, ClockCause: "clock not synchronised"}, budget: fresh,
			want: ladderStep{Index: 3, Rung: "bounce", HoldKind: holdClock, Hold: "clock not synchronised"},
		},
		{
			name: "a cooldown holds the next disruptive rung",
			t:    full, from: 2, g: fine, budget: spentAt(-10),
			want: ladderStep{Index: 2, Rung: "reresolve", HoldKind: holdCooldown, Hold: "cooldown: reresolve in 20s"},
		},
		{
			name: "after the cooldown the next rung runs",
			t:    full, from: 2, g: fine, budget: spentAt(-30),
			want: ladderStep{Index: 2, Rung: "reresolve"},
		},
		{
			name: "a spent budget gives up instead of waiting for the window",
			t:    full, from: 3, g: fine, budget: spentAt(-1000, -500, -100),
			want: ladderStep{GiveUp: "budget spent: 3 disruptive actions in 1h0m0s (next rung bounce)"},
		},
		{
			name: "actions older than the window no longer count",
			t:    full, from: 3, g: fine, budget: spentAt(-4000, -500, -100),
			want: ladderStep{Index: 3, Rung: "bounce"},
		},
		{
			name: "reresolve without endpoint_host is skipped",
			t:    bare, from: 2, g: fine, budget: fresh,
			want: ladderStep{Index: 3, Rung: "bounce"},
		},
		{
			name: "restart-unit without a unit leaves nothing after bounce: give up",
			t:    bare, from: 4, g: fine, budget: fresh,
			want: ladderStep{GiveUp: "every rung tried (heal: reassert, handshake, reresolve, bounce, restart-unit)"},
		},
		{
			name: "a custom heal order is followed",
			t:    configs.Tunnel{Heal: []string{"handshake", "reassert"}}, g: fine, budget: fresh,
			want: ladderStep{Index: 0, Rung: "handshake"},
		},
		{
			name: "an empty heal list gives up at once",
			t:    configs.Tunnel{}, g: fine, budget: fresh,
			want: ladderStep{GiveUp: "every rung tried (heal: )"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := ladderDecide(tt.t, tt.from, tt.g, tt.budget(), t0)
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("ladderDecide (-want +got):\n%s", diff)
			}
		})
	}
}

func TestActionBudget(t *testing.T) {
	t0 := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	b := newActionBudget(2, 10*time.Minute, time.Minute)
	type point struct {
		Left    int
		Cooling bool
	}
	var got []point
	look := func(s int) { got = append(got, point{b.left(at(s)), b.cooling(at(s))}) }
	look(0)
	b.spend(at(0))
	look(30)
	look(60)
	b.spend(at(60))
	look(61)
	look(599) // both still in the window
	look(600) // the first one left it
	look(660) // both left it
	want := []point{{2, false}, {1, true}, {1, false}, {0, true}, {0, false}, {1, false}, {2, false}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("budget over time (-want +got):\n%s", diff)
	}
}

func TestActionBudgetCooldownOutlivesWindow(t *testing.T) {
	t0 := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	b := newActionBudget(1, time.Second, time.Minute)
	b.spend(t0)
	if now := t0.Add(10 * time.Second); b.left(now) != 1 || !b.cooling(now) {
		t.Errorf("10 s later: left %d cooling %v, want 1 true (the cooldown holds past a short window)", b.left(now), b.cooling(now))
	}
}

func TestLadderAlertBackoff(t *testing.T) {
	var got []time.Duration
	var d time.Duration
	for range 8 {
		d = ladderAlertBackoff(d, 30*time.Second, time.Hour)
		got = append(got, d)
	}
	m := time.Minute
	want := []time.Duration{m, 2 * m, 4 * m, 8 * m, 16 * m, 32 * m, 60 * m, 60 * m}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("alert waits (-want +got):\n%s", diff)
	}
}

func TestFreshSession(t *testing.T) {
	t0 := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	tests := []struct {
		name            string
		observed, again time.Time
		ok              bool
		wantHold        bool
	}{
		{name: "the same handshake as the round read: the rung runs", observed: t0, again: t0, ok: true},
		{name: "a later handshake: WireGuard's own session is up, the rung holds", observed: t0, again: t0.Add(300 * time.Millisecond), ok: true, wantHold: true},
		{name: "a first handshake of a peer that had none (re-added)", again: t0, ok: true, wantHold: true},
		{name: "still none", ok: true},
		{name: "the peer could not be read again: the round's evidence stands", observed: t0, again: t0.Add(time.Second)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := freshSession(tt.observed, tt.again, tt.ok)
			if (got != "") != tt.wantHold {
				t.Errorf("freshSession(%v, %v, %v) = %q, want hold %v", tt.observed, tt.again, tt.ok, got, tt.wantHold)
			}
		})
	}
}
