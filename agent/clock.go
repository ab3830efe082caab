package agent

import "fmt"

// clockVerdict is the clock-sanity policy for tunnel repairs. WireGuard peers
// reject a handshake initiation whose TAI64N timestamp is not later than the
// last one they accepted from us (replay protection, WireGuard protocol
// 2026). With a clock that stepped backwards every forced handshake, bounce
// or restart only sends more initiations the peer drops: the clock is the
// likely cause and every disruptive rung is held. An unreadable clock status
// holds them too: a guard that could not be observed lets no action through.
//
// An unsynchronised clock (no NTP discipline, STA_UNSYNC) is only a doubt:
// many edge nodes run without NTP and keep good time from their RTC, and
// holding every repair on them would leave the offload fault and a hub
// restart unrepaired. So the cheap rungs (a forced handshake, reresolve) may
// run, and only the bouncing rungs (bounce, restart-unit) are held, with the
// clock named as the likely cause if the handshake did not help.
//
// ok is true when every disruptive rung may run; soft is true when only the
// bouncing ones are held; cause says why not.
func clockVerdict(cs ClockStatus, err error) (ok, soft bool, cause string) {
	detail := ""
	if cs.Detail != "" {
		detail = " (" + cs.Detail + ")"
	}
	switch {
	case err != nil:
		return false, false, fmt.Sprintf("clock status unknown: %v", err)
	case cs.SteppedBack:
		return false, false, "clock stepped back" + detail + ": peers drop handshakes with an older timestamp; likely cause, not bouncing the tunnel"
	case !cs.Synchronized:
		return false, true, "clock not synchronised" + detail + ": if peers drop our handshakes this is the likely cause; not bouncing the tunnel"
	}
	return true, false, ""
}

// clockCheck is the clock's check: unsynchronised is a warning (healthy,
// state "unsynchronised"), stepped back or unreadable is unhealthy.
func clockCheck(cs ClockStatus, err error) Check {
	ok, soft, cause := clockVerdict(cs, err)
	c := Check{Kind: KindClock, Target: "system", State: "ok", Healthy: ok || soft, Detail: cause}
	switch {
	case soft:
		c.State = "unsynchronised"
	case !ok:
		c.State = "suspect"
	}
	return c
}
