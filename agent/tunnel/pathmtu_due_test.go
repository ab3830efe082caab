package tunnel

import (
	"slices"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/edgeheal/edgeheal/configs"
	"github.com/edgeheal/edgeheal/netfix"
)

func TestMTUDue(t *testing.T) {
	t0 := time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC)
	base := mtuDue{Now: t0.Add(10 * time.Second), Last: t0, Interval: 2 * time.Second, Idle: 15 * time.Minute, Watched: true, Tokens: 30}
	for _, tc := range []struct {
		name string
		edit func(d *mtuDue)
		want string
	}{
		{"a quiet path is not checked", func(d *mtuDue) {}, ""},
		{"traffic a smaller path would hurt checks it", func(d *mtuDue) { d.Traffic = "traffic: 3 large TCP packets" }, "traffic: 3 large TCP packets"},
		{"but not within the interval", func(d *mtuDue) { d.Traffic, d.Now = "traffic: 1 connections opened", t0.Add(time.Second) }, ""},
		{"nor once the budget is spent", func(d *mtuDue) { d.Traffic, d.Tokens = "traffic: 1 connections opened", 0.9 }, ""},
		{"a quiet path is checked at the idle interval", func(d *mtuDue) { d.Now = t0.Add(15 * time.Minute) }, "the idle interval"},
		{"within the budget only", func(d *mtuDue) { d.Now, d.Tokens = t0.Add(15*time.Minute), 0 }, ""},
		{"the first check runs at once", func(d *mtuDue) { d.Last, d.Tokens = time.Time{}, 0 }, "the first check"},
		{"a hint checks at once, whatever the interval and the budget", func(d *mtuDue) { d.Hint, d.Now, d.Tokens = true, t0, 0 }, "a workload's hint"},
		{"so does an MTU reset", func(d *mtuDue) { d.Reset, d.Now, d.Tokens = true, t0, 0 }, "the tunnel's MTU was changed"},
		{"without a watch, every interval", func(d *mtuDue) { d.Watched = false }, "no traffic watch: every interval"},
		{"a tunnel back from dark is checked", func(d *mtuDue) { d.Back = true }, "the tunnel carries traffic again"},
		{"within the interval and the budget", func(d *mtuDue) { d.Back, d.Tokens = true, 0 }, ""},
		{"a larger path that held relax_after is checked once more", func(d *mtuDue) { d.RelaxAt = t0.Add(9 * time.Second) }, "a larger path held relax_after"},
		{"not before", func(d *mtuDue) { d.RelaxAt = t0.Add(11 * time.Second) }, ""},
	} {
		d := base
		tc.edit(&d)
		if got := d.why(); got != tc.want {
			t.Errorf("%s: why() = %q, want %q", tc.name, got, tc.want)
		}
	}
}

func TestMTUBudgetRefillsAtItsRateUpToItsSize(t *testing.T) {
	t0 := time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC)
	b := mtuBudget{perHour: 30}
	if got := b.now(t0); got != 30 {
		t.Fatalf("a new budget has %v checks, want 30", got)
	}
	for range 31 {
		b.spend(t0)
	}
	if got := b.now(t0); got != 0 {
		t.Errorf("after 31 checks at once: %v left, want 0 (never below empty)", got)
	}
	if got := b.now(t0.Add(6 * time.Minute)); got < 2.99 || got > 3.01 {
		t.Errorf("6 minutes later: %v, want 3 (30 an hour)", got)
	}
	if got := b.now(t0.Add(5 * time.Hour)); got != 30 {
		t.Errorf("hours later: %v, want the full 30", got)
	}
}

func TestTrafficSince(t *testing.T) {
	for _, tc := range []struct {
		before, now netfix.TrafficCounts
		want        string
	}{
		{netfix.TrafficCounts{Large: 5, Opens: 2}, netfix.TrafficCounts{Large: 5, Opens: 2}, ""},
		{netfix.TrafficCounts{Large: 5, Opens: 2}, netfix.TrafficCounts{Large: 8, Opens: 2}, "traffic: 3 large TCP packets"},
		{netfix.TrafficCounts{Large: 5, Opens: 2}, netfix.TrafficCounts{Large: 5, Opens: 3}, "traffic: 1 connections opened"},
		{netfix.TrafficCounts{Large: 5, Opens: 2}, netfix.TrafficCounts{Large: 6, Opens: 4}, "traffic: 1 large TCP packets, 2 connections opened"},
		// The table was written again: its counters start from zero.
		{netfix.TrafficCounts{Large: 5, Opens: 2}, netfix.TrafficCounts{}, ""},
		{netfix.TrafficCounts{Large: 5, Opens: 2}, netfix.TrafficCounts{Opens: 1}, "traffic: 1 connections opened"},
	} {
		if got := trafficSince(tc.before, tc.now); got != tc.want {
			t.Errorf("trafficSince(%+v, %+v) = %q, want %q", tc.before, tc.now, got, tc.want)
		}
	}
}

// checks counts the path-MTU checks made so far: each starts with the
// smallest and the full-size echo to the tunnel's target (a search sends
// more sizes at once).
func (h *tunnelHarness) checks() int {
	n := 0
	for _, c := range h.w.pmtu.Calls() {
		sizes, ok := strings.CutPrefix(c, "probe "+mtuTunnelTarget.String()+" [")
		if ok && strings.HasSuffix(sizes, " 1420]") && strings.Count(sizes, " ") == 1 {
			n++
		}
	}
	return n
}

// A node whose links carry nothing a smaller path would hurt is checked at
// start and then at the idle interval only; the blackhole that came in
// between is found by the first check after traffic crossed, at once.
func TestPathMTUMonitorChecksAQuietNodeOnlyAtTheIdleInterval(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newTunnelWorld(1, 20*tsec)
		w.carrier(1500)
		cfg := mtuTestConfig()
		cfg.PathMTU.IdleInterval = configs.Duration(5 * time.Minute)
		h := startTunnelMonitor(t, w, cfg, tunnelTestPolicy(), false)
		defer h.stop()
		h.at(10*time.Minute + tsec/2)
		if n := h.checks(); n != 3 {
			t.Errorf("a quiet node was checked %d times in 10 minutes, want 3 (at start, at 5 and 10 minutes)", n)
		}
		if got := w.nft.Tables(); !slices.Contains(got, netfix.WatchTable("wg0")) {
			t.Errorf("tables %v: no traffic watch", got)
		}
		if i := h.pathMTU().PathMTU; i.Checks != 3 || i.Because != "the idle interval" || i.Watch != netfix.WatchTable("wg0") {
			t.Errorf("the check shows %d checks, the last because %q, watch %q", i.Checks, i.Because, i.Watch)
		}
		w.carrier(1400)
		h.at(12 * time.Minute)
		h.wantNode("a blackhole nothing crossed yet", 1420)
		w.nft.Busy = true // traffic that a smaller path would hurt
		h.at(12*time.Minute + 2*tsec)
		h.wantNode("checked as soon as traffic crossed", 1328, mtuClamps...)
		if b := h.pathMTU().PathMTU.Because; !strings.HasPrefix(b, "traffic: ") {
			t.Errorf("the check ran because %q; want the traffic", b)
		}
	})
}

// A node whose links always carry traffic is checked every interval while
// the budget lasts, then at the budget's rate.
func TestPathMTUMonitorSpendsNoMoreThanItsBudget(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newMTUWorld()
		w.carrier(1500)
		cfg := mtuTestConfig()
		cfg.PathMTU.ChecksPerHour = 10
		h := startTunnelMonitor(t, w, cfg, tunnelTestPolicy(), false)
		defer h.stop()
		h.at(30*tsec + tsec/2)
		if n := h.checks(); n != 10 {
			t.Errorf("in the first 30 s: %d checks, want the budget's 10 (one every 2 s, then none)", n)
		}
		h.at(time.Hour + 30*tsec + tsec/2)
		if n := h.checks(); n < 19 || n > 21 {
			t.Errorf("after an hour and 30 s: %d checks, want about 20 (10 an hour after the first 10)", n)
		}
	})
}

// A check turned off removes the watch a previous run left.
func TestPathMTUMonitorOffRemovesTheWatchLeftBehind(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newTunnelWorld(1, 20*tsec)
		w.carrier(1500)
		if _, err := netfix.EnsureTrafficWatch(t.Context(), w.nft, netfix.TrafficWatch{Table: netfix.WatchTable("wg0"), Links: []string{"wg0"}}, false); err != nil {
			t.Fatal(err)
		}
		cfg := mtuTestConfig()
		cfg.PathMTU.Check = false
		h := startTunnelMonitor(t, w, cfg, tunnelTestPolicy(), false)
		defer h.stop()
		h.at(2 * tsec)
		if got := w.nft.Tables(); len(got) != 0 {
			t.Errorf("with the check off, the tables %v are left", got)
		}
	})
}

// A quiet node whose tunnel comes back from dark is checked at once: the
// modem may have come back on another path.
func TestPathMTUMonitorChecksATunnelBackFromDark(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newTunnelWorld(1, 20*tsec)
		w.carrier(1500)
		h := startTunnelMonitor(t, w, mtuTestConfig(), tunnelTestPolicy(), false)
		defer h.stop()
		h.at(4*tsec + tsec/2)
		w.set(func(w *tunnelWorld) { w.dark, w.fixedBy = true, "nothing" })
		w.pmtu.SetPath(mtuTunnelTarget, 0)
		h.at(12*tsec + tsec/2)
		before := h.checks()
		w.set(func(w *tunnelWorld) { w.dark = false })
		w.carrier(1400)
		h.at(16*tsec + tsec/2)
		h.wantNode("back from dark, on a smaller path", 1328, mtuClamps...)
		if n := h.checks() - before; n != 1 {
			t.Errorf("%d checks once the tunnel was back; want one", n)
		}
		if b := h.pathMTU().PathMTU.Because; b != "the tunnel carries traffic again" {
			t.Errorf("the check ran because %q", b)
		}
	})
}
