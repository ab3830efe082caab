package tunnel

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"time"

	"github.com/edgeheal/edgeheal/probes"
)

// The host path: whether the host itself can reach a peer's endpoint,
// outside the tunnel. It is what tells a dead session (the path works,
// the tunnel does not: a repair helps) from an uplink outage (nothing
// gets through: a forced handshake would only throw away a session that
// survives the outage, docs/operations/tunnels.md, "WireGuard facts"). Its probe
// is an ICMP echo to the endpoint, or the tunnel's host_check.

// pathVerdict is what the host path's probe, made now, says.
type pathVerdict string

const (
	pathWorks   pathVerdict = "works"   // it answered
	pathDown    pathVerdict = "down"    // silent, and it answered before: an outage
	pathUnknown pathVerdict = "unknown" // silent, and silence is all it ever gave (or it could not be probed)
)

// pathMemory is how long an answer of the host path keeps its silence
// meaningful. The background learner refreshes it every pathLearnEvery
// while the tunnel works, so only an outage longer than this makes a
// known path unknown again (and unknown holds as well).
const pathMemory = 15 * time.Minute

// pathBook remembers, per host probe target, when it last answered, when
// it was last silent while the tunnel through it carried traffic (then
// silence says nothing: the target drops ICMP, or does not answer
// reliably), and when the path came back after an outage. Safe for
// concurrent use: the learner and the rounds share it.
type pathBook struct {
	mu sync.Mutex
	m  map[string]*pathRecord
}

type pathRecord struct {
	answered time.Time // the last answer
	silent   time.Time // a background probe's silence, not yet confirmed by a round
	silentOK time.Time // the last silence while the tunnel worked (confirmed)
	down     bool      // the last verdict was down
	back     time.Time // when it answered again after being down
}

func (b *pathBook) rec(target string) *pathRecord {
	if b.m == nil {
		b.m = map[string]*pathRecord{}
	}
	r := b.m[target]
	if r == nil {
		r = &pathRecord{}
		b.m[target] = r
	}
	return r
}

// learn records a probe made in the background; tunnelOK says the tunnel
// over this path worked in the round before it. A silence counts against
// the probe only once a round after it found the tunnel still working
// (confirm): an outage that began just before the probe is not a target
// that drops ICMP.
func (b *pathBook) learn(target string, r probes.ProbeResult, tunnelOK bool, now time.Time) {
	if r.Err != nil {
		return // not a probe: observed nothing
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	rec := b.rec(target)
	switch {
	case r.OK || r.Answered:
		rec.answered, rec.silent = now, time.Time{}
	case tunnelOK:
		rec.silent = now
	}
}

// confirm is a round's word on the tunnel over target: a silence the
// learner heard before now becomes "silent while the tunnel worked" if
// the tunnel still works, and is dropped if it does not.
func (b *pathBook) confirm(target string, tunnelOK bool, now time.Time) {
	b.mu.Lock()
	defer b.mu.Unlock()
	rec := b.m[target]
	if rec == nil || rec.silent.IsZero() || !now.After(rec.silent) {
		return
	}
	if tunnelOK {
		rec.silentOK = rec.silent
	}
	rec.silent = time.Time{}
}

// judge turns a probe of the host path made now into a verdict, with what
// to say about it, and remembers it.
func (b *pathBook) judge(target string, r probes.ProbeResult, now time.Time) (pathVerdict, string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	rec := b.rec(target)
	switch {
	case r.Err != nil:
		return pathUnknown, "host path not checked: " + r.Err.Error()
	case r.OK || r.Answered:
		if rec.down {
			rec.back = now
		}
		rec.answered, rec.down = now, false
		return pathWorks, "host path answers"
	case rec.answered.IsZero():
		return pathUnknown, fmt.Sprintf("host path unknown: %s has never answered (%s)", target, probeClass(&r))
	case !rec.silentOK.Before(rec.answered):
		return pathUnknown, fmt.Sprintf("host path unknown: %s was silent while the tunnel worked (%s)", target, probeClass(&r))
	case now.Sub(rec.answered) > pathMemory:
		return pathUnknown, fmt.Sprintf("host path unknown: %s last answered %s ago (%s)", target, now.Sub(rec.answered).Round(time.Second), probeClass(&r))
	}
	rec.down = true
	return pathDown, fmt.Sprintf("host path to %s: %s (it answered %s before)", target, probeClass(&r), now.Sub(rec.answered).Round(time.Second))
}

// backAt is when the path last came back after an outage (zero: it did not).
func (b *pathBook) backAt(target string) time.Time {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.rec(target).back
}

// observeGuards observes what gates the ladder (the uplink's own state,
// the host path to each peer's endpoint, the clock) for the peers that
// may need it in this round: those this round's reading takes or keeps
// down, and a forced handshake whose early verdict is due
// (handshakeFailed). The uplink is read once and each host path probed
// once per round; a healthy round observes nothing here.
func (m *Monitor) observeGuards(ctx context.Context, peers []peerRound) {
	clear(m.guardsOf)
	m.uplinks = nil
	for _, pr := range peers {
		next := nextPeer(pr.p.st, pr.obs, m.spec.pol)
		if next.Phase != peerDown && !m.handshakeSuspect(pr.p, pr.obs) {
			continue
		}
		if m.guardsOf == nil {
			m.guardsOf = map[*peerTrack]ladderGuards{}
		}
		m.guardsOf[pr.p] = m.observeGuard(ctx, pr.p)
	}
}

// guards are the guards observeGuards saw for p in this round. A peer it
// did not observe has none: the uplink is unknown, which holds every rung
// (never act on what could not be observed).
func (m *Monitor) guards(p *peerTrack) ladderGuards {
	g, ok := m.guardsOf[p]
	if !ok {
		return ladderGuards{UplinkCause: "not observed in this round"}
	}
	return g
}

// observeGuard observes the uplink's own state and the host path to p's
// endpoint (once per round each), what else shows that packets get
// through, and the clock.
func (m *Monitor) observeGuard(ctx context.Context, p *peerTrack) ladderGuards {
	target := m.hostTarget(p.sig.endpoint)
	g, ok := m.uplinks[target]
	if !ok {
		now := m.os.Clock.Now()
		g.UplinkOK, g.UplinkCause = m.uplinkOwn(now)
		switch {
		case !g.UplinkOK:
		case target == "":
			g.Path, g.PathCause = pathUnknown, "host path unknown: the peer has no endpoint"
		case m.watched(target):
			// Its watch probes it every pathWatchEvery and ends when it
			// answers: until then it is down, and a probe of the round's
			// own would only hold the round up while the path returns.
			g.Path, g.PathCause = pathDown, fmt.Sprintf("host path to %s: silent (probed every %s until it answers)", target, pathWatchEvery)
		default:
			r := m.os.Net.Tunnel(ctx, target, hostPathTimeout)
			g.Path, g.PathCause = m.hosts.judge(target, r, now)
		}
		back := m.ownBack
		if b := m.hosts.backAt(target); b.After(back) {
			back = b
		}
		if !back.IsZero() {
			g.SettleUntil = back.Add(m.settle)
		}
		if m.uplinks == nil {
			m.uplinks = map[string]ladderGuards{}
		}
		m.uplinks[target] = g
	}
	now := m.os.Clock.Now()
	g.SessionValid = !p.sig.handshake.IsZero() && now.Sub(p.sig.handshake) < wgRejectAfterTime
	switch {
	case m.nudged != "":
		g.Evidence = "right after " + m.nudged
	case p.sig.rxDelta > 0:
		g.Evidence = fmt.Sprintf("packets from the peer arrive (rx +%d bytes)", p.sig.rxDelta)
	}
	g.ClockOK, g.ClockSoft, g.ClockCause = m.clock.Verdict()
	g.Rebind = m.rebindVerdict(p, g, now)
	return g
}

// hostTarget is the host path's probe for a peer: the tunnel's host_check,
// or an ICMP echo to the peer's endpoint ("" without one).
func (m *Monitor) hostTarget(endpoint *net.UDPAddr) string {
	if m.spec.cfg.HostCheck != "" {
		return m.spec.cfg.HostCheck
	}
	if endpoint == nil {
		return ""
	}
	a, ok := netip.AddrFromSlice(endpoint.IP)
	if !ok {
		return ""
	}
	return "icmp://" + a.Unmap().String()
}

// uplinkOwn observes the uplink's own state: a default route on an up
// link with carrier. It remembers when the uplink came back.
func (m *Monitor) uplinkOwn(now time.Time) (bool, string) {
	up, why := m.defaultRoute()
	switch {
	case !up:
		m.ownDown = true
	case m.ownDown:
		m.ownDown, m.ownBack = false, now
	}
	return up, why
}

func (m *Monitor) defaultRoute() (bool, string) {
	idx, err := m.os.Links.DefaultRouteLinks()
	if err != nil {
		return false, fmt.Sprintf("uplink status unknown: reading default routes: %v", err)
	}
	links, err := m.os.Links.Links()
	if err != nil {
		return false, fmt.Sprintf("uplink status unknown: listing links: %v", err)
	}
	return defaultRouteUp(links, idx)
}

// The background learner: without it a path is known only after the
// first incident, and the first incident is the one it is needed for.
const (
	pathLearnEvery    = 30 * time.Second // each target at most this often
	pathLearnRate     = 20               // probes started per second at the most (a hub has thousands of peers)
	pathLearnParallel = 8                // probes in flight at once at the most
)

// pathTarget is one host path to learn: its probe, and whether the
// tunnel over it worked in the last round (every peer behind it healthy).
type pathTarget struct {
	target   string
	tunnelOK bool
}

// setPathTargets records the round's host paths for the learner.
func (m *Monitor) setPathTargets(peers []*peerTrack) {
	ok := map[string]bool{}
	var order []string
	for _, p := range peers {
		t := m.hostTarget(p.sig.endpoint)
		if t == "" {
			continue
		}
		if _, seen := ok[t]; !seen {
			order = append(order, t)
			ok[t] = true
		}
		ok[t] = ok[t] && (p.st.Phase == peerOK || p.st.Phase == "")
	}
	targets := make([]pathTarget, 0, len(order))
	now := m.os.Clock.Now()
	for _, t := range order {
		targets = append(targets, pathTarget{target: t, tunnelOK: ok[t]})
		m.hosts.confirm(t, ok[t], now)
	}
	m.mu.Lock()
	m.paths = targets
	m.mu.Unlock()
}

// learnPaths probes every host path in the background until ctx ends: a
// pass after the first round, then one every pathLearnEvery (longer for
// a hub whose pass takes longer at pathLearnRate).
func (m *Monitor) learnPaths(ctx context.Context) {
	wait := m.spec.interval + m.spec.interval/2
	for {
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		m.mu.Lock()
		targets := m.paths
		m.mu.Unlock()
		m.learnPass(ctx, targets)
		wait = max(pathLearnEvery, time.Duration(len(targets))*time.Second/pathLearnRate)
	}
}

// learnPass probes each target once, paced and bounded, and waits for
// every probe it started.
func (m *Monitor) learnPass(ctx context.Context, targets []pathTarget) {
	slots := make(chan struct{}, pathLearnParallel)
	var wg sync.WaitGroup
	defer wg.Wait()
	for i, pt := range targets {
		if i > 0 {
			t := time.NewTimer(time.Second / pathLearnRate)
			select {
			case <-ctx.Done():
				t.Stop()
				return
			case <-t.C:
			}
		}
		select {
		case <-ctx.Done():
			return
		case slots <- struct{}{}:
		}
		wg.Go(func() {
			defer func() { <-slots }()
			r := m.os.Net.Tunnel(ctx, pt.target, hostPathTimeout)
			if ctx.Err() == nil {
				m.hosts.learn(pt.target, r, pt.tunnelOK, m.os.Clock.Now())
			}
		})
	}
}
