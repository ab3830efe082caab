package agent

import (
	"fmt"
	"strings"
	"time"

	"github.com/edgeheal/edgeheal/configs"
)

// The remediation ladder for tunnel peers: least disruptive first, each rung
// verified before the next. This file holds its pure decisions; the monitor
// runs them.

// ladderDisruptive reports whether a rung spends from the tunnel's budget and
// starts its cooldown. Reassert only re-applies configuration and is free.
func ladderDisruptive(rung string) bool { return rung != configs.HealReassert }

// ladderTunnelWide reports whether a rung acts on the whole interface rather
// than one peer: when several peers of a tunnel need it in the same round it
// runs once.
func ladderTunnelWide(rung string) bool {
	switch rung {
	case configs.HealReassert, configs.HealBounce, configs.HealRestartUnit:
		return true
	}
	return false
}

// ladderApplicable reports whether a rung can do anything for this tunnel:
// reresolve needs endpoint_host, restart-unit needs unit. Unknown names
// (validation rejects them) are never applicable.
func ladderApplicable(rung string, t configs.Tunnel) bool {
	switch rung {
	case configs.HealReassert, configs.HealHandshake, configs.HealBounce:
		return true
	case configs.HealReresolve:
		return t.EndpointHost != ""
	case configs.HealRestartUnit:
		return t.Unit != ""
	}
	return false
}

// ladderBounces reports whether rung takes the tunnel or its unit down.
func ladderBounces(rung string) bool {
	return rung == configs.HealBounce || rung == configs.HealRestartUnit
}

// ladderNextRung returns the index of the first applicable rung at or after
// from, and false when the ladder is exhausted.
func ladderNextRung(t configs.Tunnel, from int) (int, bool) {
	for i := max(from, 0); i < len(t.Heal); i++ {
		if ladderApplicable(t.Heal[i], t) {
			return i, true
		}
	}
	return 0, false
}

// ladderGuards are the conditions outside the tunnel that gate every rung.
type ladderGuards struct {
	UplinkOK    bool   // carrier, default route and host path to the endpoint
	UplinkCause string // why not
	ClockOK     bool   // the clock lets handshakes through
	ClockSoft   bool   // only unsynchronised: handshake and reresolve may run, bounce and restart-unit are held
	ClockCause  string // why not
}

// Hold kinds: why the ladder waits instead of acting.
const (
	holdUplink   = "uplink"
	holdSettle   = "uplink-back"
	holdClock    = "clock"
	holdCooldown = "cooldown"
	holdBusy     = "busy" // an action the previous config's monitor started has not returned
)

// ladderStep is the ladder's decision for a down peer in one round: run
// Rung (at Index), hold (HoldKind, Hold), or give up (GiveUp).
type ladderStep struct {
	Index    int
	Rung     string
	HoldKind string
	Hold     string
	GiveUp   string
}

// ladderDecide chooses what to do for a peer that is down, whose next rung
// to try is from; prevHold is why the ladder waited in the previous round
// ("" if it did not). It is pure: the guards were observed by the caller and
// the budget is only read.
//
// Order matters. An exhausted ladder gives up. An uplink outage holds every
// rung: restarting a tunnel does not fix the modem, and the outage is
// reported as what it is. An uplink that just came back holds one more
// round: the bad observation was made while it was down, and WireGuard's
// session resumes by itself within a fraction of a second of a short outage
// (docs/lab.md, "WireGuard (wireguard-go)"), so only a probe made after the return may trigger a repair.
// A clock that stepped back holds the disruptive rungs (they would only send
// more handshakes the peer drops); an unsynchronised one holds only the
// bouncing rungs (see clockVerdict). A spent budget gives up (sticky, alerting)
// rather than waiting for the window to roll over into another round of
// disruption. A cooldown only delays.
func ladderDecide(t configs.Tunnel, from int, prevHold string, g ladderGuards, b *actionBudget, now time.Time) ladderStep {
	i, ok := ladderNextRung(t, from)
	if !ok {
		return ladderStep{GiveUp: fmt.Sprintf("every rung tried (heal: %s)", strings.Join(t.Heal, ", "))}
	}
	st := ladderStep{Index: i, Rung: t.Heal[i]}
	if !g.UplinkOK {
		st.HoldKind, st.Hold = holdUplink, "uplink outage: "+g.UplinkCause
		return st
	}
	if prevHold == holdUplink {
		st.HoldKind, st.Hold = holdSettle, "uplink back: one more probe before acting"
		return st
	}
	if !ladderDisruptive(st.Rung) {
		return st
	}
	if !g.ClockOK && !(g.ClockSoft && !ladderBounces(st.Rung)) {
		st.HoldKind, st.Hold = holdClock, g.ClockCause
		return st
	}
	if b.left(now) == 0 {
		return ladderStep{GiveUp: fmt.Sprintf("budget spent: %d disruptive actions in %s (next rung %s)", b.used(now), b.window, st.Rung)}
	}
	if b.cooling(now) {
		st.HoldKind, st.Hold = holdCooldown, fmt.Sprintf("cooldown: %s in %s", st.Rung, b.coolUntil().Sub(now).Round(time.Second))
	}
	return st
}

// ladderAlertBackoff is the wait before the next "still degraded" alert,
// given the previous wait: it starts at twice the cooldown and doubles, up
// to the budget window, so a peer that stays down for a day raises a few
// dozen alerts, not thousands.
func ladderAlertBackoff(prev, cooldown, window time.Duration) time.Duration {
	first := max(2*cooldown, time.Minute)
	if prev <= 0 {
		return first
	}
	return min(2*prev, max(window, first))
}
