package tunnel

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"time"

	"github.com/edgeheal/edgeheal/netfix"
)

// The traffic watch (netfix.TrafficWatch): kept on the tunnel and the
// uplink its last check went over, without edgeheal's own probes, and
// read before a check may be due.

// mtuWatch is the runner's memory of its traffic watch.
type mtuWatch struct {
	written string // the watch as last written (fmt of the TrafficWatch): "" none
	// seen are the counters as last read, counted as they were at the
	// last check.
	seen, counted netfix.TrafficCounts
	skip          []netip.AddrPort // edgeheal's own probes, resolved
	resolved      time.Time        // when skip was resolved
	failed        string           // the last failure reported
}

// watchLookupTimeout bounds resolving the names of edgeheal's own probe
// targets.
const watchLookupTimeout = 2 * time.Second

// watchTraffic keeps the watch as it should be and reads it: ok is false
// when there is none to read (a dry run writes none; nftables failed),
// and traffic says what it counted since the last check.
func (m *Monitor) watchTraffic(ctx context.Context, now time.Time) (ok bool, traffic string) {
	x := &m.mtu
	if x.w.resolved.IsZero() || now.Sub(x.w.resolved) >= m.spec.mtu.idle {
		x.w.skip, x.w.resolved = m.resolveOwn(ctx), now
	}
	links := []string{m.spec.cfg.Interface}
	if up := x.st.Uplink.Link; up != "" && up != m.spec.cfg.Interface {
		links = append(links, up)
	}
	want := netfix.TrafficWatch{Table: m.spec.mtu.watch, Links: links, Skip: x.w.skip}
	nft, err := m.os.Nftables.Conn()
	if err != nil {
		m.watchFailed(fmt.Errorf("opening nftables: %w", err))
		return false, ""
	}
	counts, exists, err := netfix.ReadTrafficWatch(nft, want.Table)
	if err == nil && (!exists || x.w.written != fmt.Sprint(want)) {
		var res netfix.Result
		actx, cancel := context.WithTimeout(ctx, tunnelActionTimeout)
		res, err = netfix.EnsureTrafficWatch(actx, nft, want, m.dryRun)
		cancel()
		switch {
		case err != nil:
		case res.DryRun:
			return false, "" // a dry run changes nothing, the watch included
		default:
			x.w.written = fmt.Sprint(want)
			if res.Changed {
				m.log.Debug("path MTU: traffic watch written", "changes", res.Changes)
			}
			counts, exists, err = netfix.ReadTrafficWatch(nft, want.Table)
		}
	}
	if err == nil && !exists {
		err = fmt.Errorf("nftables table %s is gone as soon as written", want.Table)
	}
	if err != nil {
		m.watchFailed(err)
		return false, ""
	}
	x.w.failed = ""
	x.w.seen = counts
	return true, trafficSince(x.w.counted, counts)
}

// watchFailed logs a failure of the watch once: the check then runs every
// interval, as it would without one.
func (m *Monitor) watchFailed(err error) {
	x := &m.mtu
	if x.w.failed == err.Error() {
		return
	}
	x.w.failed = err.Error()
	m.log.Warn("path MTU: no traffic watch, checking every interval", "table", m.spec.mtu.watch, "err", err)
}

// resolveOwn is the addresses and ports edgeheal's own probes connect to,
// names resolved from the host (a name that does not resolve here is
// left out: its probes count as traffic).
func (m *Monitor) resolveOwn(ctx context.Context) []netip.AddrPort {
	var out []netip.AddrPort
	for _, hp := range m.spec.mtu.own {
		host, p, err := net.SplitHostPort(hp)
		port, perr := strconv.ParseUint(p, 10, 16)
		if err != nil || perr != nil || port == 0 {
			continue
		}
		if a, err := netip.ParseAddr(host); err == nil {
			out = append(out, netip.AddrPortFrom(a.Unmap(), uint16(port)))
			continue
		}
		lctx, cancel := context.WithTimeout(ctx, watchLookupTimeout)
		addrs, err := m.os.Net.Lookup(lctx, host)
		cancel()
		if err != nil {
			m.log.Debug("path MTU: a probe target's name does not resolve; its probes count as traffic", "target", hp, "err", err)
		}
		for _, a := range addrs {
			out = append(out, netip.AddrPortFrom(a.Unmap(), uint16(port)))
		}
	}
	slices.SortFunc(out, func(a, b netip.AddrPort) int { return a.Compare(b) })
	return slices.Compact(out)
}

// removeWatch removes a watch a previous run left, once the check is
// turned off.
func (m *Monitor) removeWatch(ctx context.Context) {
	nft, err := m.os.Nftables.Conn()
	if err != nil {
		m.log.Warn("path MTU: cannot remove the traffic watch", "table", m.spec.mtu.watch, "err", err)
		return
	}
	actx, cancel := context.WithTimeout(ctx, tunnelActionTimeout)
	defer cancel()
	res, err := netfix.EnsureTrafficWatch(actx, nft, netfix.TrafficWatch{Table: m.spec.mtu.watch}, m.dryRun)
	switch {
	case err != nil:
		m.log.Warn("path MTU: cannot remove the traffic watch", "table", m.spec.mtu.watch, "err", err)
	case res.Changed:
		m.log.Info("path MTU: check off, traffic watch removed", "table", m.spec.mtu.watch)
	}
}
