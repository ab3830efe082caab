package tunnel

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
	case configs.HealRebind:
		r, err := configs.ParsePortRange(t.RebindPorts)
		return err == nil && r.Lo > 0
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
	UplinkOK    bool   // the uplink's own state: a default route on a link with carrier
	UplinkCause string // why not
	Path        pathVerdict
	PathCause   string // what the host path's probe said
	// Evidence, with an unknown path, is what shows that acting beats
	// waiting: the cause of the darkness was just fixed (a nudge), or
	// packets from the peer arrive. "" for none.
	Evidence string
	// SettleUntil: the uplink or the host path just came back, and until
	// then a session that survived resumes by itself, at once: a
	// disruptive rung now would only throw it away.
	SettleUntil time.Time
	// SessionValid: the peer has a session WireGuard can still use (a
	// handshake within REJECT_AFTER_TIME). Without one a forced handshake
	// discards nothing, and after an outage it starts the new session now
	// rather than at WireGuard's next retry (up to REKEY_TIMEOUT later).
	SessionValid bool
	ClockOK      bool   // the clock lets handshakes through
	ClockSoft    bool   // only unsynchronised: handshake and reresolve may run, bounce and restart-unit are held
	ClockCause   string // why not
	// Rebind is the rebind rule's verdict for the peer (rebindDecide);
	// read only when the next rung is rebind.
	Rebind rebindVerdict
}

// Hold kinds: why the ladder waits instead of acting.
const (
	holdUplink   = "uplink"
	holdPath     = "path-unknown"
	holdSettle   = "uplink-back"
	holdClock    = "clock"
	holdCooldown = "cooldown"
	holdBusy     = "busy" // an action the previous config's monitor started has not returned
	holdPending  = "handshake-pending"
	holdFresh    = "fresh-session" // WireGuard completed a handshake of its own since the round's reading
)

// ladderStep is the ladder's decision for a down peer in one round: run
// Rung (at Index), hold (HoldKind, Hold), give up (GiveUp), or pass over
// Rung (Skip: why it does not apply).
type ladderStep struct {
	Index    int
	Rung     string
	HoldKind string
	Hold     string
	GiveUp   string
	Skip     string
}

// ladderDecide chooses what to do for a peer that is down, whose next rung
// to try is from. It is pure: the guards were observed by the caller and
// the budget is only read.
//
// A disruptive rung runs only when acting beats waiting: on evidence that
// the session is dead while the path under it works. Order matters. An
// exhausted ladder gives up. An uplink that is down by its own state (no
// default route, no carrier) holds every rung: restarting a tunnel does
// not fix the modem, and the outage is reported as what it is. Reassert
// (free) and reresolve (it changes the endpoint only when the name now
// points elsewhere, which is how a moved endpoint is found while the old
// address is silent) need nothing more. A host path that answered before
// and is silent now is an uplink outage: the session survives it (keys
// stay valid for 180 s) and a forced handshake would only throw it away.
// A path that just came back gets SettleUntil for a surviving session to
// resume by itself; a peer whose session expired during the outage gets
// its handshake at once. A path that is unknown (never answered, or silent while the
// tunnel worked) holds too, unless something shows that packets get
// through (Evidence). A clock that stepped back holds the disruptive
// rungs (they would only send more handshakes the peer drops); an
// unsynchronised one holds only the bouncing rungs (see clockVerdict). A
// spent budget gives up (sticky, alerting) rather than waiting for the
// window to roll over into another round of disruption. A cooldown only
// delays. Rebind runs only on its own evidence (rebindDecide): it waits
// while the forced handshake may still complete, is passed over (Skip)
// when the evidence does not point at a stuck NAT mapping, and on that
// evidence skips the cooldown the failed handshake set.
func ladderDecide(t configs.Tunnel, from int, g ladderGuards, b *actionBudget, now time.Time) ladderStep {
	i, ok := ladderNextRung(t, from)
	if !ok {
		return ladderStep{GiveUp: fmt.Sprintf("every rung tried (heal: %s)", strings.Join(t.Heal, ", "))}
	}
	st := ladderStep{Index: i, Rung: t.Heal[i]}
	hold := func(kind, why string) ladderStep {
		st.HoldKind, st.Hold = kind, why
		return st
	}
	if !g.UplinkOK {
		return hold(holdUplink, "uplink outage: "+g.UplinkCause)
	}
	if !ladderDisruptive(st.Rung) {
		return st
	}
	if st.Rung != configs.HealReresolve {
		switch {
		case g.Path == pathDown:
			return hold(holdUplink, "uplink outage: "+g.PathCause)
		case now.Before(g.SettleUntil) && g.SessionValid:
			return hold(holdSettle, fmt.Sprintf("uplink back: WireGuard resumes by itself if it can (%s more)", g.SettleUntil.Sub(now).Round(time.Second)))
		case g.Path != pathWorks && g.Evidence == "":
			return hold(holdPath, g.PathCause+"; waiting for WireGuard: a session that survived resumes by itself")
		}
	}
	if !g.ClockOK && !(g.ClockSoft && !ladderBounces(st.Rung)) {
		return hold(holdClock, g.ClockCause)
	}
	if st.Rung == configs.HealRebind {
		switch {
		case g.Rebind.Wait:
			return hold(holdPending, g.Rebind.Why)
		case !g.Rebind.Run:
			st.Skip = g.Rebind.Why
			return st
		}
	}
	if b.left(now) == 0 {
		return ladderStep{GiveUp: fmt.Sprintf("budget spent: %d disruptive actions in %s (next rung %s)", b.used(now), b.window, st.Rung)}
	}
	// A rebind on its evidence follows the handshake that just failed
	// without the cooldown: waiting cannot help a mapping the retries keep
	// alive, and the handshake left nothing to settle.
	if b.cooling(now) && !(st.Rung == configs.HealRebind && g.Rebind.Run) {
		return hold(holdCooldown, fmt.Sprintf("cooldown: %s in %s", st.Rung, b.coolUntil().Sub(now).Round(time.Second)))
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

// freshSession reports why a disruptive rung must not run after all: the
// peer's handshake, read again just before the rung, is later than the one
// the round decided on (observed). WireGuard then has a session of its own
// (its retry, or the far side's, completed while the round probed), and a
// forced handshake, rebind, bounce or restart would throw it away and make
// the tunnel wait for another. "" when nothing changed or the peer could
// not be read again (the round's evidence stands).
func freshSession(observed, again time.Time, ok bool) string {
	if !ok || !again.After(observed) {
		return ""
	}
	return fmt.Sprintf("WireGuard completed a handshake of its own at %s, after this round's reading: its session is up", again.UTC().Format(time.RFC3339))
}
