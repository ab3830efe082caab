package tunnel

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/edgeheal/edgeheal/netfix"
	"github.com/edgeheal/edgeheal/wire"
)

// The path MTU: whether a packet as large as the tunnel sends crosses the
// tunnel, and one as large as the uplink sends crosses the uplink. A
// carrier path that drops what is too big without an ICMP "fragmentation
// needed" (a path-MTU blackhole) passes every small packet: handshakes,
// keepalives, the tunnel's own probe, TCP handshakes. The tunnel looks up
// and no transfer completes. It is not a dead session and climbs no
// ladder: a forced handshake, a rebind, a bounce or a restart changes
// nothing of it. It is repaired by fitting traffic to the path: the TCP
// MSS clamped (netfix.EnsureMSSClamp) and the tunnel's MTU lowered
// (netfix.EnsureLinkMTU), to the measured value; both are undone, with
// hysteresis, when the path grows again (docs/operations/tunnels.md, "The
// path MTU").
//
// This file is the decision, a pure function of what a check measured
// (nextMTU); pathmtu_run.go measures and acts.

// mtuPhase is a tunnel's path-MTU state, as its check shows it.
type mtuPhase string

const (
	mtuUnknown mtuPhase = "unknown"             // not measured: no target, target silent, tunnel dark
	mtuOK      mtuPhase = wire.CheckOK          // the full size crosses every way measured
	mtuLow     mtuPhase = wire.CheckPathLow     // it does not, and nothing fits traffic to the path (repair off, dry run, failed)
	mtuClamped mtuPhase = wire.CheckPathClamped // it does not (or did not long enough ago), and the clamp fits traffic to it
)

// Fixed parts of the policy (docs/operations/tunnels.md, "The path MTU").
const (
	// mtuFightResets resets of the tunnel's MTU by something else within
	// mtuFightWindow are a fight: edgeheal stops setting the MTU and keeps
	// the clamp (which carries TCP alone).
	mtuFightResets = 3
	mtuFightWindow = 10 * time.Minute
	// mtuFloor is the lowest MTU edgeheal sets on a tunnel: IPv6's
	// minimum (a link below it loses its IPv6 addresses). A path that
	// carries less is clamped, not fitted with a link MTU.
	mtuFloor = netfix.MinClampMTU
)

// mtuPolicy is the part of the configuration the decision reads.
type mtuPolicy struct {
	Repair     bool
	RelaxAfter time.Duration
}

// pathReading is what one check measured of one way of the path.
type pathReading struct {
	// Err: the check could not be made (no target, no route, no socket):
	// nothing was observed.
	Err error
	// Silent: not even the smallest echo came back. The target does not
	// answer (or the path is dark): nothing is known of its MTU.
	Silent bool
	Link   string // the link the way leaves by
	// Full is the largest packet this way has to carry: the link's MTU,
	// or the tunnel's MTU before edgeheal lowered it.
	Full int
	// Largest is the largest packet that crossed: exact below Full (a
	// search), Full when the full size crossed.
	Largest int
	// Capped: the tunnel's MTU is lowered below Full, so no echo larger
	// than it could be sent through the tunnel; every size up to it
	// crossed. Largest is then a lower bound only: it lowers a clamp but
	// says nothing of growth (nextMTU bounds it through the uplink when it
	// can).
	Capped bool
	// Endpoint: the uplink's target is the tunnel's peer endpoint, and
	// Overhead is what the tunnel adds to a packet on that path (60 bytes
	// over IPv4, 80 over IPv6): the uplink's path MTU then bounds what the
	// tunnel carries (tunnelViaUplink).
	Endpoint bool
	Overhead int
}

func (r pathReading) known() bool { return r.Err == nil && !r.Silent && r.Largest > 0 }

// mtuObservation is one check: both ways of the path and the tunnel's MTU.
type mtuObservation struct {
	Now    time.Time
	Tunnel pathReading
	Uplink pathReading
	// LinkMTU is the tunnel's MTU as read for this check.
	LinkMTU int
}

// mtuWay is the decision's memory of one way of the path.
type mtuWay struct {
	Link     string
	Full     int // what it has to carry
	Measured int // the last measured path MTU (0: never measured)
	Clamp    int // the path MTU its TCP is clamped to (0: no clamp)
	// Grow is the largest path MTU above Clamp that every check since
	// GrowSince measured: once it held RelaxAfter, the clamp rises to it
	// (or goes, at Full).
	Grow      int
	GrowSince time.Time
}

// low reports whether the way was measured to carry less than it has to.
func (w mtuWay) low() bool { return w.Measured > 0 && w.Measured < w.Full }

// mtuState is a tunnel's path-MTU state across checks. Its zero value is a
// tunnel never checked, with nothing of edgeheal's on the node.
type mtuState struct {
	Tunnel, Uplink mtuWay
	// MTUSet is the MTU edgeheal set on the tunnel (0: none set, or
	// somebody else set another since), MTUBefore what it had before.
	MTUSet, MTUBefore int
	// Fitted: the node has what the last plan asked for (the clamp table
	// written and read back, the MTU set): set by the runner.
	Fitted bool
	// Resets are when the tunnel's MTU was found changed from MTUSet by
	// something else, within mtuFightWindow; Fighting once there are
	// mtuFightResets of them: edgeheal sets no MTU until the window is
	// quiet.
	Resets   []time.Time
	Fighting bool
	// Opened is when the blackhole was found (zero: the path carries what
	// is sent, as far as measured); a clamp adopted from a previous run
	// counts as one found then.
	Opened    time.Time
	CheckedAt time.Time
}

// phase is what the check shows.
func (s mtuState) phase() mtuPhase {
	known := s.Tunnel.Measured > 0 || s.Uplink.Measured > 0
	low := s.Tunnel.low() || s.Uplink.low()
	clamped := s.Tunnel.Clamp > 0 || s.Uplink.Clamp > 0
	switch {
	case low && s.Fitted && s.covers(s.Tunnel) && s.covers(s.Uplink):
		return mtuClamped
	case low:
		return mtuLow
	case clamped && s.Fitted:
		return mtuClamped // the path grew back; the clamp waits RelaxAfter
	case known:
		return mtuOK
	}
	return mtuUnknown
}

// covers reports whether w's clamp fits its measured path.
func (s mtuState) covers(w mtuWay) bool { return !w.low() || (w.Clamp > 0 && w.Clamp <= w.Measured) }

// mtuDark says why the path MTU is not checked in this round, "" when it
// may be: a dark tunnel (a peer not ok, the round's own probe missed or
// could not be made, the device unreadable) carries no echo of any size,
// and a path MTU measured through it would be nonsense. Whatever was
// decided before stays as it is.
func mtuDark(phases []peerPhase, probe string, readable bool) string {
	if !readable {
		return "the tunnel's peers cannot be read"
	}
	for _, ph := range phases {
		if ph != "" && ph != peerOK {
			return "a peer of the tunnel is " + string(ph)
		}
	}
	if probe != "" && probe != "ok" {
		return "the tunnel's probe: " + probe
	}
	return ""
}

// mtuNote is something a check found that is reported.
type mtuNote struct {
	Kind string // "opened", "mtu-reset", "fight", "raised", "relaxed"
	Text string
}

// mtuPlan is what the node should have after a check.
type mtuPlan struct {
	// Clamp is the clamp table's content (no links: no table).
	Clamp []netfix.LinkClamp
	// LinkMTU is the tunnel MTU to set; 0 leaves it as it is.
	LinkMTU int
}

// nextMTU is the whole decision of a check, a pure function: what the
// measurements say of each way, whether the tunnel's MTU was changed
// behind edgeheal's back, and what the node should have. A way that could
// not be measured (an error, a silent target) changes nothing of that
// way: never act on an observation that could not be made. A dark tunnel
// is not checked at all (the runner does not call it).
//
//   - A way measured below what it has to carry is clamped to the measured
//     value at once.
//   - A way measured above its clamp raises (or removes) the clamp only
//     once every check for RelaxAfter measured at least that much
//     (hysteresis: a path that flaps keeps its clamp).
//   - The tunnel's MTU follows the tunnel's clamp where that helps: the
//     clamp is below the tunnel's MTU, at least mtuFloor, edgeheal is not
//     fighting over it, and the uplink's target is the tunnel's endpoint
//     and answers (the only way to see the path grow again once no echo
//     larger than the lowered MTU can go through the tunnel).
//   - An MTU set by edgeheal and found changed is a reset: reported,
//     counted (fight), never set back blindly: the check measures at the
//     new MTU, and the plan sets it again only if the path still needs it.
func nextMTU(s mtuState, o mtuObservation, p mtuPolicy) (mtuState, mtuPlan, []mtuNote) {
	s.CheckedAt = o.Now
	s, notes := nextResets(s, o)

	// What each way measured.
	tunnel := o.Tunnel
	if tunnel.known() && tunnel.Capped && o.Uplink.known() && o.Uplink.Endpoint {
		tunnel.Largest = max(tunnel.Largest, min(tunnel.Full, tunnelViaUplink(o.Uplink.Largest, tunnel.Full, o.Uplink.Overhead)))
		tunnel.Capped = false // bounded from above too now
	}
	var raised []string
	s.Tunnel, raised = nextWay(s.Tunnel, tunnel, o.Now, p, raised, "through the tunnel")
	s.Uplink, raised = nextWay(s.Uplink, o.Uplink, o.Now, p, raised, "over "+orWord(o.Uplink.Link, "the uplink"))
	if s.MTUSet == 0 && s.MTUBefore == 0 && o.LinkMTU > 0 && s.Tunnel.Full == 0 {
		s.Tunnel.Full = o.LinkMTU
	}
	switch low := s.Tunnel.low() || s.Uplink.low(); {
	case low && s.Opened.IsZero():
		s.Opened = o.Now
		notes = append(notes, mtuNote{"opened", blackholeText(s)})
	case !low:
		s.Opened = time.Time{}
	}
	if len(raised) > 0 {
		kind := "raised"
		if s.Tunnel.Clamp == 0 && s.Uplink.Clamp == 0 {
			kind = "relaxed"
		}
		notes = append(notes, mtuNote{kind, strings.Join(raised, "; ")})
	}
	s, plan := planMTU(s, o, p)
	return s, plan, notes
}

// nextResets is nextMTU's part about the tunnel's MTU: found changed from
// what edgeheal set, it is somebody else's again (reported, counted
// towards a fight; set again only if the path still needs it).
func nextResets(s mtuState, o mtuObservation) (mtuState, []mtuNote) {
	var notes []mtuNote
	s.Resets = slices.DeleteFunc(slices.Clone(s.Resets), func(t time.Time) bool { return o.Now.Sub(t) > mtuFightWindow })
	if s.MTUSet > 0 && o.LinkMTU > 0 && o.LinkMTU != s.MTUSet {
		s.Resets = append(s.Resets, o.Now)
		notes = append(notes, mtuNote{"mtu-reset", fmt.Sprintf("%s's MTU is %d, not the %d edgeheal set: something else set it (Flannel does when it re-creates its link); it is lowered again only if the path still needs it",
			s.Tunnel.Link, o.LinkMTU, s.MTUSet)})
		if o.LinkMTU != s.MTUBefore {
			// Another MTU than before (made permanent in Flannel's config,
			// say): theirs now, and what the tunnel has to carry.
			s.Tunnel.Full, s.MTUBefore = o.LinkMTU, 0
		}
		s.MTUSet = 0
		if len(s.Resets) >= mtuFightResets && !s.Fighting {
			s.Fighting = true
			notes = append(notes, mtuNote{"fight", fmt.Sprintf("%s's MTU was set back %d times in %s: edgeheal leaves the MTU to whatever sets it and keeps the TCP clamp; make the MTU permanent in Flannel's config",
				s.Tunnel.Link, len(s.Resets), mtuFightWindow)})
		}
	}
	if s.Fighting && len(s.Resets) == 0 {
		s.Fighting = false // a quiet window: the MTU may be set again
	}
	return s, notes
}

// planMTU is what the node should have, from the ways' clamps: the clamp
// table, and the tunnel's MTU where lowering it helps.
func planMTU(s mtuState, o mtuObservation, p mtuPolicy) (mtuState, mtuPlan) {
	plan := mtuPlan{}
	if p.Repair {
		for _, w := range []mtuWay{s.Tunnel, s.Uplink} {
			if w.Clamp > 0 && w.Link != "" && w.Clamp >= netfix.MinClampMTU {
				plan.Clamp = append(plan.Clamp, netfix.LinkClamp{Link: w.Link, PathMTU: w.Clamp})
			}
		}
	}
	lower := p.Repair && !s.Fighting && s.Tunnel.Clamp >= mtuFloor && s.Tunnel.Clamp < s.Tunnel.Full &&
		(s.MTUSet > 0 || (o.Uplink.known() && o.Uplink.Endpoint))
	switch {
	case lower:
		if s.MTUSet == 0 {
			s.MTUBefore = max(o.LinkMTU, s.Tunnel.Full)
		}
		if o.LinkMTU != s.Tunnel.Clamp {
			plan.LinkMTU = s.Tunnel.Clamp
		}
		s.MTUSet = s.Tunnel.Clamp
	case s.MTUSet > 0:
		// The clamp went (or rose above the MTU's old value, or repair is
		// off): the MTU goes back to what it was.
		if o.LinkMTU == s.MTUSet && s.MTUBefore > 0 {
			plan.LinkMTU = s.MTUBefore
		}
		s.MTUSet, s.MTUBefore = 0, 0
	default:
		s.MTUBefore = 0
	}
	for i := range plan.Clamp {
		if plan.Clamp[i].Link == s.Tunnel.Link && s.MTUSet > 0 {
			plan.Clamp[i].MTUBefore = s.MTUBefore
		}
	}
	return s, plan
}

// nextWay is one way's part of nextMTU.
func nextWay(w mtuWay, r pathReading, now time.Time, p mtuPolicy, raised []string, where string) (mtuWay, []string) {
	if r.Link != "" && r.Link != w.Link {
		if w.Link != "" {
			// Another link (the uplink failed over): what was measured
			// and clamped was another path's.
			w = mtuWay{}
		}
		w.Link = r.Link
	}
	if r.Full > 0 {
		w.Full = r.Full
	}
	if !r.known() {
		return w, raised
	}
	m := min(r.Largest, w.Full)
	if r.Capped && m >= w.Clamp {
		return w, raised // as clamped, or more: no news, and no growth seen
	}
	w.Measured = m
	if w.Clamp >= w.Full {
		// A clamp at or above what the link sends clamps nothing (the
		// link's MTU was lowered for good by someone else).
		w.Clamp, w.Grow, w.GrowSince = 0, 0, time.Time{}
	}
	switch {
	case m < w.Full && (w.Clamp == 0 || m < w.Clamp):
		w.Clamp = m // lower at once
		w.Grow, w.GrowSince = 0, time.Time{}
	case w.Clamp > 0 && m > w.Clamp:
		if w.GrowSince.IsZero() {
			w.Grow, w.GrowSince = m, now
		}
		w.Grow = min(w.Grow, m)
		if now.Sub(w.GrowSince) >= p.RelaxAfter {
			if w.Grow >= w.Full {
				raised = append(raised, fmt.Sprintf("%s %d bytes crossed for %s: clamp removed", where, w.Full, now.Sub(w.GrowSince).Round(time.Second)))
				w.Clamp = 0
			} else {
				raised = append(raised, fmt.Sprintf("%s %d bytes crossed for %s: clamp raised from %d", where, w.Grow, now.Sub(w.GrowSince).Round(time.Second), w.Clamp))
				w.Clamp = w.Grow
			}
			w.Grow, w.GrowSince = 0, time.Time{}
		}
	default:
		w.Grow, w.GrowSince = 0, time.Time{} // as clamped, or no clamp: nothing to raise
	}
	if !p.Repair {
		w.Clamp, w.Grow, w.GrowSince = 0, 0, time.Time{}
	}
	return w, raised
}

// tunnelViaUplink is the largest packet the tunnel carries when the path
// to its endpoint carries uplink bytes: WireGuard adds overhead to each
// packet and pads it to a multiple of 16, but not beyond the tunnel's MTU
// (docs/lab.md, "Facts measured in the lab").
func tunnelViaUplink(uplink, tunnelMTU, overhead int) int {
	room := uplink - overhead
	if room >= tunnelMTU {
		return tunnelMTU
	}
	return max(room/16*16, 0)
}

// blackholeText says what a check found, for the incident.
func blackholeText(s mtuState) string {
	var parts []string
	for _, w := range []struct {
		way   mtuWay
		where string
	}{{s.Tunnel, "through the tunnel"}, {s.Uplink, "over " + orWord(s.Uplink.Link, "the uplink")}} {
		if w.way.low() {
			parts = append(parts, fmt.Sprintf("%s only packets up to %d bytes cross (%d sent)", w.where, w.way.Measured, w.way.Full))
		}
	}
	return fmt.Sprintf("path-MTU blackhole on %s: %s; larger ones are lost without an ICMP answer while small ones pass",
		s.Tunnel.Link, strings.Join(parts, ", "))
}

func orWord(s, otherwise string) string {
	if s == "" {
		return otherwise
	}
	return s
}
