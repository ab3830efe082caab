package agent

import "fmt"

// clockVerdict is the clock-sanity policy for tunnel repairs. WireGuard peers
// reject a handshake initiation whose TAI64N timestamp is not later than the
// last one they accepted from us (replay protection, WireGuard protocol
// 2026). With a clock that stepped backwards, or one that is not
// synchronised and may have, every forced handshake, bounce or restart only
// sends more initiations the peer drops: the clock is the likely cause and
// the disruptive rungs are held. An unreadable clock status holds them too:
// a guard that could not be observed does not let an action through.
//
// ok is true when disruptive actions may run; cause says why not.
func clockVerdict(cs ClockStatus, err error) (ok bool, cause string) {
	detail := ""
	if cs.Detail != "" {
		detail = " (" + cs.Detail + ")"
	}
	switch {
	case err != nil:
		return false, fmt.Sprintf("clock status unknown: %v", err)
	case cs.SteppedBack:
		return false, "clock stepped back" + detail + ": peers drop handshakes with an older timestamp; likely cause, not bouncing the tunnel"
	case !cs.Synchronized:
		return false, "clock not synchronised" + detail + ": peers drop handshakes if it went back; likely cause, not bouncing the tunnel"
	}
	return true, ""
}
