package tunnel

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/edgeheal/edgeheal/netfix"
	"github.com/edgeheal/edgeheal/wire"
)

// What the path-MTU check shows: the daemon's view, copied at each round,
// and the one-shot check of `edgeheal check`.

// mtuView is what Checks shows of the path MTU, copied at each round.
type mtuView struct {
	on     bool
	phase  mtuPhase
	since  time.Time
	detail string
	last   string
	info   *wire.PathMTUInfo
}

// checkMTUOnce is the path-mtu check of `edgeheal check`: one measurement
// of both ways from what the node has now (the clamp table taken as it
// is), judged as a round would, changing nothing and reporting nothing.
// ok is false when the check is off.
func (m *Monitor) checkMTUOnce(ctx context.Context, r *tunnelReading, dark string, now time.Time) (wire.Check, bool) {
	if !m.spec.mtu.on {
		return wire.Check{}, false
	}
	x := &mtuRun{adopted: true, oneShot: true}
	links, _, err := m.readClamp()
	if err != nil {
		x.why = "reading the clamp table: " + err.Error()
	} else if links != nil {
		linkMTU, _ := m.os.PathMTU.LinkMTU(m.spec.cfg.Interface)
		x.adopt(m.spec.cfg.Interface, links, linkMTU, now)
	}
	linkMTU, err := m.os.PathMTU.LinkMTU(m.spec.cfg.Interface)
	switch {
	case dark != "":
		x.why = "not checked while the tunnel is dark (" + dark + ")"
	case err != nil:
		x.why = "reading the tunnel's MTU: " + err.Error()
	default:
		o := m.measureMTU(ctx, r, x.st, linkMTU, now)
		if !o.Tunnel.known() && !o.Uplink.known() {
			x.why = unknownWhy(o)
		}
		// What was measured, judged against what the node has now (the
		// table as it is): nothing here is a plan.
		st, _, _ := nextMTU(x.st, o, m.spec.mtu.pol)
		for _, w := range []struct{ have, now *mtuWay }{{&x.st.Tunnel, &st.Tunnel}, {&x.st.Uplink, &st.Uplink}} {
			if w.have.Link != w.now.Link {
				w.have.Clamp = 0 // a clamp of another link clamps nothing of this one
			}
			w.have.Link, w.have.Full, w.have.Measured = w.now.Link, w.now.Full, w.now.Measured
		}
		x.st.CheckedAt, x.st.Fitted = st.CheckedAt, x.table
	}
	x.since = time.Time{}
	return m.mtuViewOf(x).check(m.spec.cfg.Interface)
}

// mtuWays says what was measured of each way: "path MTU 1328 through the
// tunnel (sends 1420); path MTU 1400 over wwan0 (sends 1500)".
func mtuWays(st mtuState) string {
	way := func(w mtuWay, where string) string {
		switch {
		case w.Measured == 0:
			return ""
		case w.low():
			return fmt.Sprintf("path MTU %d %s (sends %d)", w.Measured, where, w.Full)
		}
		return fmt.Sprintf("path MTU %d %s", w.Measured, where)
	}
	return joinDetail(way(st.Tunnel, "through the tunnel"), way(st.Uplink, "over "+orWord(st.Uplink.Link, "the uplink")))
}

// mtuDetail is the check's detail: what the last check found and what is
// done about it, and why the path is not checked now if it is not.
func (m *Monitor) mtuDetail(x *mtuRun) string {
	if x.st.phase() == mtuUnknown {
		return orWord(x.why, "not measured yet")
	}
	return joinDetail(m.mtuFound(x), x.why)
}

// mtuFound says what the last check found and what is done about it.
func (m *Monitor) mtuFound(x *mtuRun) string {
	st := x.st
	parts := mtuWays(st)
	switch st.phase() {
	case mtuOK:
		return parts + ": the full size crosses"
	case mtuLow:
		why := "repair is off (path_mtu.repair: false)"
		switch {
		case x.oneShot && m.spec.mtu.pol.Repair:
			why = "nothing on the node fits traffic to it now (the running agent clamps it)"
		case m.dryRun && m.spec.mtu.pol.Repair:
			why = "dry run"
		case m.spec.mtu.pol.Repair:
			why = "the repair did not apply (see its events); tried again at every check"
		}
		return parts + ": larger packets are lost; not repaired: " + why
	}
	var fit []string
	for _, w := range []mtuWay{st.Tunnel, st.Uplink} {
		if w.Clamp > 0 {
			v4, v6 := netfix.MSS(w.Clamp)
			fit = append(fit, fmt.Sprintf("TCP MSS on %s clamped to %d/%d", w.Link, v4, v6))
		}
	}
	if st.MTUSet > 0 {
		fit = append(fit, fmt.Sprintf("%s MTU %d (was %d)", m.spec.cfg.Interface, st.MTUSet, st.MTUBefore))
	}
	d := parts + ": " + strings.Join(fit, ", ")
	if st.Fighting {
		d += "; something keeps setting the tunnel's MTU back: left to it, the clamp carries TCP (make it permanent in Flannel's config)"
	}
	for _, w := range []mtuWay{st.Tunnel, st.Uplink} {
		if !w.GrowSince.IsZero() {
			d += fmt.Sprintf("; %s carries %d since %s, the clamp is raised after %s", w.Link, w.Grow, w.GrowSince.UTC().Format(time.RFC3339), m.spec.mtu.pol.RelaxAfter)
		}
	}
	return d
}

// publishMTU copies the check's view (called with m.mu held); with the
// check off there is none.
func (m *Monitor) publishMTU() {
	if m.spec.mtu.on {
		m.mtuView = m.mtuViewOf(&m.mtu)
	}
}

// mtuViewOf is what the check shows of x.
func (m *Monitor) mtuViewOf(x *mtuRun) mtuView {
	v := mtuView{on: m.spec.mtu.on, phase: x.st.phase(), since: x.since, detail: m.mtuDetail(x), last: x.last}
	st := x.st
	info := &wire.PathMTUInfo{LinkMTUSet: st.MTUSet, LinkMTUBefore: st.MTUBefore, Fighting: st.Fighting, CheckedAt: st.CheckedAt,
		Because: x.due, Checks: x.checks}
	if x.w.written != "" && x.w.failed == "" {
		info.Watch = m.spec.mtu.watch
	}
	if x.table {
		info.Table = m.spec.mtu.table
	}
	tunnelTarget := ""
	if m.spec.mtu.target.IsValid() {
		tunnelTarget = m.spec.mtu.target.String()
	}
	info.Tunnel = &wire.PathInfo{Link: m.spec.cfg.Interface, Target: tunnelTarget, LinkMTU: st.Tunnel.Full, PathMTU: st.Tunnel.Measured, ClampMTU: st.Tunnel.Clamp}
	if st.Uplink.Link != "" || st.Uplink.Measured > 0 {
		info.Uplink = &wire.PathInfo{Link: st.Uplink.Link, LinkMTU: st.Uplink.Full, PathMTU: st.Uplink.Measured, ClampMTU: st.Uplink.Clamp}
		if m.spec.mtu.uplink.IsValid() {
			info.Uplink.Target = m.spec.mtu.uplink.String()
		}
	}
	v.info = info
	return v
}

// pathMTUCheck is the path-mtu check (kind path-mtu, target the tunnel's
// interface); ok false when the check is off.
func (v mtuView) check(iface string) (wire.Check, bool) {
	if !v.on {
		return wire.Check{}, false
	}
	ph := v.phase
	if ph == "" {
		ph = mtuUnknown
	}
	return wire.Check{Kind: wire.KindPathMTU, Target: iface, State: string(ph), Healthy: ph != mtuLow,
		Detail: v.detail, LastAction: v.last, Since: v.since, PathMTU: v.info}, true
}
