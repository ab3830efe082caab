package tunnel

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/edgeheal/edgeheal/configs"
	"github.com/edgeheal/edgeheal/netfix"
	"github.com/edgeheal/edgeheal/probes"
)

// The path-MTU check's runner: it measures both ways of the path with
// sized DF echoes (probes through core.OS.PathMTU), asks nextMTU, fits the
// node to the plan through netfix (the clamp table, the tunnel's MTU) and
// reports. It runs at the end of a round, in the monitor's goroutine, only
// while the tunnel carries traffic (mtuDark), and never touches the
// ladder: its actions spend no budget and run for no dead session.

// mtuSpec is what a tunnel's config says of its path MTU.
type mtuSpec struct {
	on       bool
	pol      mtuPolicy
	interval time.Duration
	timeout  time.Duration // one stage of echoes
	target   netip.Addr    // through the tunnel; invalid: none
	uplink   netip.Addr    // over the uplink; invalid: the probe peer's endpoint
	table    string
	// idle is the longest time between checks, perHour their budget
	// (pathmtu_due.go).
	idle    time.Duration
	perHour int
	// watch is the traffic watch's table; own are the host:port of
	// edgeheal's own probes, which it does not count.
	watch string
	own   []string
}

// mtuSettle is how long a stage of echoes waits for the larger ones once
// the first came back, beyond twice its latency (probes.SizeProbe).
const mtuSettle = 250 * time.Millisecond

// mtuSearchWidth and mtuSearchStages bound a search: each stage sends at
// most mtuSearchWidth echoes at once, and three narrow any gap below
// 16 × 17 × 17 bytes to the byte.
const (
	mtuSearchWidth  = 16
	mtuSearchStages = 3
)

func newMTUSpec(t configs.Tunnel, probeIP netip.Addr, timeout time.Duration) mtuSpec {
	m := t.PathMTU
	s := mtuSpec{
		on:       m.Check,
		pol:      mtuPolicy{Repair: m.Repair, RelaxAfter: m.RelaxAfter.D()},
		interval: m.Interval.D(),
		timeout:  max(timeout, 200*time.Millisecond),
		target:   icmpTarget(m.Target),
		uplink:   icmpTarget(m.UplinkTarget),
		table:    netfix.ClampTable(t.Interface),
		idle:     m.IdleInterval.D(),
		perHour:  m.ChecksPerHour,
		watch:    netfix.WatchTable(t.Interface),
	}
	if !s.target.IsValid() {
		s.target = probeIP
	}
	if s.interval <= 0 {
		s.interval = 2 * time.Second
	}
	if s.idle < s.interval {
		s.idle = max(s.interval, 15*time.Minute)
	}
	if s.perHour <= 0 {
		s.perHour = 30
	}
	if host, ok := strings.CutPrefix(t.Probe.Target, "tcp://"); ok {
		s.own = append(s.own, host)
	}
	return s
}

// icmpTarget is the address of "icmp://ip" (invalid for anything else).
func icmpTarget(target string) netip.Addr {
	u, err := url.Parse(target)
	if err != nil || u.Scheme != "icmp" {
		return netip.Addr{}
	}
	a, err := netip.ParseAddr(strings.Trim(u.Host, "[]"))
	if err != nil {
		return netip.Addr{}
	}
	return a.Unmap()
}

// mtuRun is the runner's memory, owned by Run's goroutine.
type mtuRun struct {
	st      mtuState
	adopted bool
	table   bool      // edgeheal's clamp table is (believed) there
	acted   string    // the last plan acted on, so that an unchanged plan is not reported again
	failed  string    // the last action error reported
	phase   mtuPhase  // as last reported
	since   time.Time // when phase was entered
	last    string    // the last action, for the check
	hint    string    // a workload's hint, for the incident's evidence
	why     string    // why the check is unknown (nothing to probe, silent, dark)
	// repaired is the Opened of the blackhole whose repair was reported.
	repaired time.Time
	lowered  bool // this check's plan lowers a clamp
	oneShot  bool // `edgeheal check`'s: it measures, it plans nothing
	// When checks run (pathmtu_due.go): the last one, the budget, and the
	// traffic watch.
	checked time.Time
	checks  uint64 // since the start
	dark    bool   // the tunnel was dark since the last check
	due     string // why the last check ran
	budget  mtuBudget
	w       mtuWatch
}

// HintPathMTU reports that something suggests the path carries less than
// is sent: a workload's TLS handshake stalled after TCP connected, without
// an alert (its ClientHello is the first full-size packet). The next
// round, which starts at once, checks the path MTU whatever the interval;
// the hint is evidence, never a repair by itself.
func (m *Monitor) HintPathMTU(reason string) {
	m.mu.Lock()
	m.mtuHint = reason
	m.mu.Unlock()
	m.poke()
}

// checkPathMTU is the round's path-MTU step: adopt what a previous run
// left (once), then, when a check is due and the tunnel carries traffic,
// measure, decide, act and report.
func (m *Monitor) checkPathMTU(ctx context.Context, r *tunnelReading, now time.Time) {
	x := &m.mtu
	if !x.adopted {
		m.adoptMTU(ctx, now)
	}
	if !m.spec.mtu.on {
		return
	}
	m.mu.Lock()
	hint := m.mtuHint
	m.mtuHint = ""
	m.mu.Unlock()
	if hint != "" {
		x.hint = hint
	}
	phases := make([]peerPhase, 0, len(m.order))
	for _, p := range m.order {
		phases = append(phases, p.st.Phase)
	}
	if why := mtuDark(phases, probeText(r.probe), true); why != "" {
		x.why = "not checked while the tunnel is dark (" + why + ")"
		x.dark = true
		return
	}
	linkMTU, err := m.os.PathMTU.LinkMTU(m.spec.cfg.Interface)
	if err != nil {
		x.why = "reading the tunnel's MTU: " + err.Error()
		return
	}
	// Rounds run at the probe interval, a little early or late: a check
	// is due at the round nearest a whole interval.
	early := m.spec.interval / 2
	x.budget.perHour = float64(m.spec.mtu.perHour)
	due := mtuDue{Now: now, Last: x.checked, Interval: m.spec.mtu.interval - early, Idle: m.spec.mtu.idle - early,
		Hint: hint != "", Reset: x.st.MTUSet > 0 && linkMTU != x.st.MTUSet, Back: x.dark,
		Tokens: x.budget.now(now), RelaxAt: x.st.relaxAt(m.spec.mtu.pol.RelaxAfter)}
	if due.Hint || due.Reset || due.Last.IsZero() || now.Sub(due.Last) >= due.Interval {
		due.Watched, due.Traffic = m.watchTraffic(ctx, now)
	}
	why := due.why()
	if why == "" {
		return
	}
	x.checked, x.due, x.dark = now, why, false
	x.checks++
	if !due.Hint && !due.Reset {
		x.budget.spend(now)
	}
	x.w.counted = x.w.seen // the traffic up to this check is this check's
	o := m.measureMTU(ctx, r, x.st, linkMTU, now)
	if ctx.Err() != nil {
		return // stopping: cut short, observed nothing
	}
	m.log.Debug("path MTU checked", "why", why, "took_seconds", m.os.Clock.Now().Sub(now).Seconds(), "link_mtu", linkMTU,
		"tunnel", o.Tunnel.Largest, "tunnel_silent", o.Tunnel.Silent, "uplink", o.Uplink.Largest, "uplink_silent", o.Uplink.Silent)
	x.why = ""
	if !o.Tunnel.known() && !o.Uplink.known() {
		x.why = unknownWhy(o)
	}
	before, old := x.st.phase(), x.st
	st, plan, notes := nextMTU(x.st, o, m.spec.mtu.pol)
	x.st = st
	x.lowered = lowered(old.Tunnel, st.Tunnel) || lowered(old.Uplink, st.Uplink)
	for _, n := range notes {
		m.mtuNoteEvent(n, o, now)
	}
	m.fitMTU(ctx, plan, linkMTU)
	m.mtuReport(before, m.os.Clock.Now()) // the repair is done now, a measurement after the check began
	x.hint = ""                           // evidence for the check it called, not for later ones
}

// lowered reports whether a way's clamp is new or smaller: connections
// opened before it keep their larger segments (mqtt.OutgrowsTheConnection).
func lowered(old, now mtuWay) bool {
	return now.Clamp > 0 && (old.Clamp == 0 || now.Clamp < old.Clamp || old.Link != now.Link)
}

// unknownWhy says why neither way was measured.
func unknownWhy(o mtuObservation) string {
	var parts []string
	for _, w := range []struct {
		r     pathReading
		where string
	}{{o.Tunnel, "through the tunnel"}, {o.Uplink, "over the uplink"}} {
		switch {
		case w.r.Err != nil:
			parts = append(parts, w.where+": "+w.r.Err.Error())
		case w.r.Silent:
			parts = append(parts, w.where+": the target answers no echo")
		}
	}
	return "not measured: " + strings.Join(parts, "; ")
}

// measureMTU measures both ways at once.
func (m *Monitor) measureMTU(ctx context.Context, r *tunnelReading, st mtuState, linkMTU int, now time.Time) mtuObservation {
	o := mtuObservation{Now: now, LinkMTU: linkMTU}
	iface := m.spec.cfg.Interface
	full := linkMTU
	if st.MTUSet > 0 && st.MTUSet == linkMTU && st.MTUBefore > linkMTU {
		full = st.MTUBefore
	}
	var wg sync.WaitGroup
	wg.Go(func() {
		o.Tunnel = pathReading{Link: iface, Full: full}
		if !m.spec.mtu.target.IsValid() {
			o.Tunnel.Err = errors.New("nothing to probe through the tunnel: set path_mtu.target or probe.target")
			return
		}
		m.measureWay(ctx, m.spec.mtu.target, min(full, linkMTU), &o.Tunnel)
		o.Tunnel.Capped = o.Tunnel.known() && linkMTU < full && o.Tunnel.Largest >= linkMTU
	})
	wg.Go(func() { o.Uplink = m.measureUplink(ctx, r) })
	wg.Wait()
	return o
}

// measureUplink measures the way over the uplink, to uplink_target or the
// probe peer's endpoint.
func (m *Monitor) measureUplink(ctx context.Context, r *tunnelReading) pathReading {
	var rd pathReading
	target, endpoint := m.spec.mtu.uplink, netip.Addr{}
	if key, ok := m.spec.probePeer(r.peers); ok {
		for i := range r.peers {
			if r.peers[i].PublicKey == key && r.peers[i].Endpoint != nil {
				if a, ok := netip.AddrFromSlice(r.peers[i].Endpoint.IP); ok {
					endpoint = a.Unmap()
				}
			}
		}
	}
	if !target.IsValid() {
		target = endpoint
	}
	if !target.IsValid() {
		rd.Err = errors.New("nothing to probe over the uplink: the peer has no endpoint; set path_mtu.uplink_target")
		return rd
	}
	route, err := m.os.PathMTU.RouteTo(target)
	if err != nil {
		rd.Err = err
		return rd
	}
	if route.Link == m.spec.cfg.Interface {
		rd.Err = fmt.Errorf("%s is reached through the tunnel, not over the uplink: set path_mtu.uplink_target to an address outside it", target)
		return rd
	}
	rd.Link, rd.Full = route.Link, route.MTU
	rd.Endpoint = target == endpoint
	rd.Overhead = 60 // IPv4, UDP and WireGuard's header and tag
	if target.Is6() {
		rd.Overhead = 80
	}
	m.measureWay(ctx, target, rd.Full, &rd)
	return rd
}

// measureWay sends the smallest echo and one of full size; when only the
// small one comes back it searches for the largest that crosses.
func (m *Monitor) measureWay(ctx context.Context, target netip.Addr, full int, rd *pathReading) {
	small := probes.MinProbeSize(target)
	if full <= small {
		rd.Err = fmt.Errorf("link MTU %d is too small to measure", full)
		return
	}
	res := m.os.PathMTU.Sizes(ctx, target, probes.SizeProbe{Sizes: []int{small, full}, Timeout: m.spec.mtu.timeout, Settle: mtuSettle})
	switch a, _ := res.Answer(small); {
	case res.Err != nil:
		rd.Err = res.Err
		return
	case !a.Answered:
		rd.Silent = true
		return
	}
	if f, _ := res.Answer(full); f.Answered {
		rd.Largest = full
		return
	}
	rd.Largest, rd.Err = m.searchMTU(ctx, target, small, full)
	if rd.Err == nil && rd.Largest == 0 {
		rd.Silent = true // went silent while searched
	}
}

// searchMTU finds the largest size in [lo, hi] that crosses, lo having
// crossed and hi not: up to mtuSearchStages stages of parallel echoes.
// Every stage sends lo again: its answer times the stage (a stage whose
// sizes all fall between two WireGuard paddings has no other answer, and
// would wait its whole timeout), and in the first stage it tells a target
// that went silent (0) from a small path. The first stage also sends hi
// again: a lost echo is not a small path.
func (m *Monitor) searchMTU(ctx context.Context, target netip.Addr, lo, hi int) (int, error) {
	for stage := range mtuSearchStages {
		if hi-lo <= 1 {
			break
		}
		sizes := append(mtuSearchSizes(lo, hi, mtuSearchWidth), lo)
		if stage == 0 {
			sizes = append(sizes, hi)
		}
		res := m.os.PathMTU.Sizes(ctx, target, probes.SizeProbe{Sizes: sizes, Timeout: m.spec.mtu.timeout, Settle: mtuSettle})
		if res.Err != nil {
			return 0, res.Err
		}
		if stage == 0 {
			if a, _ := res.Answer(hi); a.Answered {
				return hi, nil
			}
			if !res.Answered() {
				return 0, nil
			}
		}
		lo, hi = mtuNarrow(lo, hi, res)
	}
	return lo, nil
}

// mtuSearchSizes are up to n sizes spread evenly strictly between lo and
// hi.
func mtuSearchSizes(lo, hi, n int) []int {
	gap := hi - lo
	if gap <= 1 {
		return nil
	}
	step := max((gap+n)/(n+1), 1)
	var out []int
	for s := lo + step; s < hi && len(out) < n; s += step {
		out = append(out, s)
	}
	return out
}

// mtuNarrow is the new [lo, hi] after a stage: lo the largest size that
// crossed, hi the smallest above it that did not. A smaller echo lost
// while a larger one crossed was lost, not too large.
func mtuNarrow(lo, hi int, res probes.SizesResult) (int, int) {
	for _, a := range res.Answers {
		if a.Answered && a.Size > lo && a.Size < hi {
			lo = a.Size
		}
	}
	for _, a := range res.Answers {
		if !a.Answered && !a.LocalTooBig && a.Size > lo && a.Size < hi {
			hi = a.Size
		}
	}
	return lo, hi
}
