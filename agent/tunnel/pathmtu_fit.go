package tunnel

import (
	"context"
	"fmt"
	"time"

	"github.com/edgeheal/edgeheal/agent/core"
	"github.com/edgeheal/edgeheal/netfix"
	"github.com/edgeheal/edgeheal/wire"
)

// The path-MTU repair: the node fitted to nextMTU's plan through netfix
// (the clamp table, the tunnel's MTU), what it did reported, and the
// clamp a previous run left taken over.

// fitMTU makes the node what the plan says: the clamp table (written only
// when it differs; read every check while there is one, so that a flushed
// ruleset is noticed), then the tunnel's MTU. Failures are reported once
// each; the next check tries again.
func (m *Monitor) fitMTU(ctx context.Context, plan mtuPlan, linkMTU int) {
	x := &m.mtu
	key := fmt.Sprint(plan)
	why := orWord(mtuWays(x.st), "path MTU repair")
	fitted := true
	if len(plan.Clamp) > 0 || x.table {
		start := m.os.Clock.Now()
		res, err := m.ensureClamp(ctx, netfix.MSSClamp{Table: m.spec.mtu.table, Links: plan.Clamp})
		end := m.os.Clock.Now()
		if err == nil && !m.dryRun {
			x.table = len(plan.Clamp) > 0
		}
		fitted = fitted && err == nil && !res.DryRun
		m.mtuAction("mss-clamp", why, start, end, res, err, key)
	}
	if plan.LinkMTU > 0 && plan.LinkMTU != linkMTU {
		start := m.os.Clock.Now()
		actx, cancel := context.WithTimeout(ctx, tunnelActionTimeout)
		res, err := netfix.EnsureLinkMTU(actx, m.os.MTU, m.spec.cfg.Interface, plan.LinkMTU, m.dryRun)
		cancel()
		if err != nil || res.DryRun {
			// The tunnel keeps the MTU it had: edgeheal set none (and a
			// later check must not take it for reset by someone else).
			fitted = false
			if x.st.MTUSet == plan.LinkMTU {
				x.st.MTUSet, x.st.MTUBefore = 0, 0
			}
		}
		m.mtuAction("link-mtu", why, start, m.os.Clock.Now(), res, err, key)
	}
	x.st.Fitted = fitted // on the node as planned only once every part of this plan is
	x.acted = key
}

// ensureClamp runs netfix.EnsureMSSClamp on a connection of its own.
func (m *Monitor) ensureClamp(ctx context.Context, want netfix.MSSClamp) (netfix.Result, error) {
	nft, err := m.os.Nftables.Conn()
	if err != nil {
		return netfix.Result{Action: "mss-clamp", Target: want.Table}, fmt.Errorf("opening nftables: %w", err)
	}
	actx, cancel := context.WithTimeout(ctx, tunnelActionTimeout)
	defer cancel()
	return netfix.EnsureMSSClamp(actx, nft, want, m.dryRun)
}

// mtuAction reports an action of the repair: every change; a failure or a
// dry run once until the plan or the error changes.
func (m *Monitor) mtuAction(action, why string, start, end time.Time, res netfix.Result, err error, key string) {
	x := &m.mtu
	switch {
	case err != nil:
		if x.failed == action+err.Error() {
			return
		}
		x.failed = action + err.Error()
	case res.Changed:
		x.failed = ""
	case res.DryRun && x.acted != key:
	default:
		return
	}
	res.Target = m.spec.cfg.Interface
	extra := map[string]any{"table": m.spec.mtu.table}
	if action == "mss-clamp" && x.lowered {
		extra["lowered"] = true // connections opened before keep their segments: the agent's own reconnects
	}
	ev := m.actionEventOf(m.spec.cfg.Interface, action, why, start, end, res, err, extra)
	m.event(ev)
	x.last = fmt.Sprintf("%s: %s at %s", action, tunnelResultWord(res, err), start.UTC().Format(time.RFC3339))
}

// mtuNoteEvent reports what a check found.
func (m *Monitor) mtuNoteEvent(n mtuNote, o mtuObservation, now time.Time) {
	iface := m.spec.cfg.Interface
	ev := core.Event{Time: now, Target: iface, Summary: iface + ": " + n.Text, Evidence: m.mtuEvidence(o)}
	switch n.Kind {
	case "opened":
		ev.Kind, ev.Result = wire.EventIncident, "opened"
		if m.mtu.hint != "" {
			ev.Evidence["hint"] = m.mtu.hint
		}
		m.log.Warn("path-MTU blackhole", "summary", n.Text)
	default:
		ev.Kind, ev.Result = "path-mtu", n.Kind
		m.log.Info("path MTU", "note", n.Kind, "summary", n.Text)
	}
	m.event(ev)
}

// mtuEvidence is what an event carries of a check.
func (m *Monitor) mtuEvidence(o mtuObservation) map[string]any {
	ev := map[string]any{"link_mtu": o.LinkMTU}
	for _, w := range []struct {
		name string
		r    pathReading
	}{{"tunnel", o.Tunnel}, {"uplink", o.Uplink}} {
		switch {
		case w.r.Err != nil:
			ev[w.name+"_error"] = w.r.Err.Error()
		case w.r.Silent:
			ev[w.name+"_silent"] = true
		default:
			ev[w.name+"_path_mtu"] = w.r.Largest
			ev[w.name+"_sends"] = w.r.Full
		}
		if w.r.Link != "" {
			ev[w.name+"_link"] = w.r.Link
		}
	}
	return ev
}

// mtuReport reports the repair's outcome (the blackhole's incident closes
// once traffic fits the path) and publishes the check's view.
func (m *Monitor) mtuReport(before mtuPhase, now time.Time) {
	x := &m.mtu
	after := x.st.phase()
	if after != x.phase {
		x.phase, x.since = after, now
	}
	if after == mtuClamped && !x.st.Opened.IsZero() && !x.repaired.Equal(x.st.Opened) {
		x.repaired = x.st.Opened
		took := now.Sub(x.st.Opened)
		m.event(core.Event{Time: now, Kind: wire.EventRecovered, Target: m.spec.cfg.Interface, Result: "clamped", Duration: took.Seconds(),
			Summary:  fmt.Sprintf("%s: traffic fits the path again after %s: %s", m.spec.cfg.Interface, took.Round(time.Millisecond), m.mtuDetail(x)),
			Evidence: map[string]any{"was": string(before), "how": "path MTU repair"}})
		m.log.Info("path MTU repaired", "detail", m.mtuDetail(x), "duration_seconds", took.Seconds())
	}
}

// adoptMTU reads the clamp table a previous run left (an agent restart, a
// reload) and takes it over: its clamps, and the MTU the tunnel had before
// it was lowered. With the check or the repair turned off, what edgeheal
// left is undone.
func (m *Monitor) adoptMTU(ctx context.Context, now time.Time) {
	x := &m.mtu
	x.adopted = true
	if !m.spec.mtu.on {
		m.removeWatch(ctx)
	}
	links, linkMTU, err := m.readClamp()
	if err != nil {
		m.log.Warn("path MTU: cannot read the clamp table", "err", err)
		return
	}
	if links == nil {
		return
	}
	x.adopt(m.spec.cfg.Interface, links, linkMTU, now)
	m.log.Info("path MTU: took over the clamp a previous run left", "table", m.spec.mtu.table, "clamps", fmt.Sprint(links),
		"mtu_set", x.st.MTUSet, "mtu_before", x.st.MTUBefore)
	if m.spec.mtu.on && m.spec.mtu.pol.Repair {
		return
	}
	// Repair is off now: nothing of edgeheal's may stay.
	plan := mtuPlan{}
	if x.st.MTUSet > 0 && linkMTU == x.st.MTUSet {
		plan.LinkMTU = x.st.MTUBefore
	}
	x.st = mtuState{}
	m.fitMTU(ctx, plan, linkMTU)
	x.phase, x.since = x.st.phase(), now
}

// readClamp reads edgeheal's clamp table for this tunnel (nil links: none)
// and the tunnel's MTU now.
func (m *Monitor) readClamp() ([]netfix.LinkClamp, int, error) {
	nft, err := m.os.Nftables.Conn()
	if err != nil {
		return nil, 0, err
	}
	c, ok, err := netfix.ReadMSSClamp(nft, m.spec.mtu.table)
	if err != nil || !ok {
		return nil, 0, err
	}
	linkMTU, _ := m.os.PathMTU.LinkMTU(m.spec.cfg.Interface)
	if c.Links == nil {
		c.Links = []netfix.LinkClamp{} // a table without clamps of ours: still there
	}
	return c.Links, linkMTU, nil
}

// adopt takes over the clamps of a table found on the node.
func (x *mtuRun) adopt(iface string, links []netfix.LinkClamp, linkMTU int, now time.Time) {
	x.table = true
	for _, lc := range links {
		w := mtuWay{Link: lc.Link, Clamp: lc.PathMTU, Measured: lc.PathMTU}
		if lc.Link != iface {
			x.st.Uplink = w
			continue
		}
		w.Full = max(linkMTU, lc.MTUBefore)
		x.st.Tunnel = w
		if lc.MTUBefore > 0 && linkMTU == lc.PathMTU {
			x.st.MTUSet, x.st.MTUBefore = lc.PathMTU, lc.MTUBefore
		}
	}
	x.st.Fitted, x.st.Opened, x.repaired = true, now, now
	x.acted = fmt.Sprint(mtuPlan{Clamp: links})
	x.phase, x.since = x.st.phase(), now
}
