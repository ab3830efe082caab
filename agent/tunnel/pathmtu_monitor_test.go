package tunnel

import (
	"net/netip"
	"slices"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/edgeheal/edgeheal/configs"
	"github.com/edgeheal/edgeheal/netfix"
	"github.com/edgeheal/edgeheal/wire"
)

// The path-MTU runner in the loop, against tunnelWorld: the tunnel's probe
// target 10.100.0.1 behind wg0 (MTU 1420), peer 0's endpoint 203.0.113.1
// over wwan0 (MTU 1500).

var (
	mtuTunnelTarget = netip.MustParseAddr("10.100.0.1")
	mtuUplinkTarget = netip.MustParseAddr("203.0.113.1")
)

// mtuTestConfig is the test tunnel with its path MTU checked every 2 s
// while traffic crosses it (a budget that never runs out in a test) and
// relaxed after 30 s.
func mtuTestConfig() configs.Tunnel {
	t := tunnelTestConfig()
	t.PathMTU = configs.PathMTU{Check: true, Repair: true, Interval: configs.Duration(2 * time.Second),
		IdleInterval: configs.Duration(15 * time.Minute), ChecksPerHour: 3600, RelaxAfter: configs.Duration(30 * time.Second)}
	return t
}

// newMTUWorld is a tunnelWorld whose links always carry traffic that a
// smaller path would hurt: every read of the traffic watch finds more.
func newMTUWorld() *tunnelWorld {
	w := newTunnelWorld(1, 20*tsec)
	w.nft.Busy = true
	return w
}

// carrier makes the carrier path carry IP packets up to mtu, silently
// dropping larger ones: the uplink's path MTU, and the tunnel's (60 bytes
// of WireGuard over IPv4 and its padding to 16 less).
func (w *tunnelWorld) carrier(mtu int) {
	up := min(mtu, 1500)
	w.pmtu.SetRoute(mtuTunnelTarget, "wg0")
	w.pmtu.SetRoute(mtuUplinkTarget, "wwan0")
	w.pmtu.SetPath(mtuUplinkTarget, up)
	w.pmtu.SetPath(mtuTunnelTarget, tunnelViaUplink(up, 1420, 60))
}

func (h *tunnelHarness) pathMTU() wire.Check {
	h.t.Helper()
	for _, c := range h.m.Checks() {
		if c.Kind == wire.KindPathMTU {
			return c
		}
	}
	h.t.Fatalf("no path-mtu check in %+v", h.m.Checks())
	return wire.Check{}
}

func (h *tunnelHarness) wantPathMTU(when string, state mtuPhase, tunnel, uplink int) {
	h.t.Helper()
	c := h.pathMTU()
	if c.State != string(state) || c.Healthy != (state != mtuLow) {
		h.t.Errorf("%s: path-mtu check %s (healthy %v), want %s: %s", when, c.State, c.Healthy, state, c.Detail)
	}
	if c.PathMTU == nil || c.PathMTU.Tunnel == nil || c.PathMTU.Tunnel.PathMTU != tunnel ||
		(uplink > 0 && (c.PathMTU.Uplink == nil || c.PathMTU.Uplink.PathMTU != uplink)) {
		h.t.Errorf("%s: path MTU %+v, want %d through the tunnel, %d over the uplink", when, c.PathMTU, tunnel, uplink)
	}
}

// wantNode compares what the node has: the clamp table's content and wg0's MTU.
func (h *tunnelHarness) wantNode(when string, mtu int, clamps ...netfix.LinkClamp) {
	h.t.Helper()
	got, _, err := netfix.ReadMSSClamp(h.w.nft, netfix.ClampTable("wg0"))
	if err != nil {
		h.t.Fatal(err)
	}
	if diff := cmp.Diff(clamps, got.Links); diff != "" {
		h.t.Errorf("%s: clamp table (-want +got):\n%s", when, diff)
	}
	if m := h.w.mtus.MTU("wg0"); m != mtu {
		h.t.Errorf("%s: wg0 MTU %d, want %d", when, m, mtu)
	}
}

var mtuClamps = []netfix.LinkClamp{{Link: "wg0", PathMTU: 1328, MTUBefore: 1420}, {Link: "wwan0", PathMTU: 1400}}

func TestPathMTUMonitorClampsABlackholeAndRelaxesWhenThePathGrows(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newMTUWorld()
		w.carrier(1500)
		h := startTunnelMonitor(t, w, mtuTestConfig(), tunnelTestPolicy(), false)
		defer h.stop()

		h.at(5*tsec + tsec/2)
		h.wantPathMTU("healthy", mtuOK, 1420, 1500)
		h.wantNode("healthy", 1420)

		w.carrier(1400) // the blackhole: small echoes and the tunnel's probe still answer
		h.at(8*tsec + tsec/2)
		h.wantEvents("the check after the fault",
			"6s incident wg0 opened",
			"6s action wg0 mss-clamp changed",
			"6s action wg0 link-mtu changed",
			"6s recovered wg0 clamped")
		h.wantPathMTU("clamped", mtuClamped, 1328, 1400)
		h.wantNode("clamped", 1328, mtuClamps...)
		h.wantChanges("no rung ran: nothing changed in WireGuard")
		h.wantState("the peer never went dark", 0, peerOK)
		opened := h.ev.All()[0]
		if !strings.Contains(opened.Summary, "1328") || !strings.Contains(opened.Summary, "1400") {
			t.Errorf("the incident does not name the path MTU: %s", opened.Summary)
		}

		w.carrier(1500) // the fault lifts
		h.at(20*tsec + tsec/2)
		h.wantPathMTU("grown back, within relax_after", mtuClamped, 1420, 1500)
		h.wantNode("grown back, within relax_after", 1328, mtuClamps...)
		if d := h.pathMTU().Detail; !strings.Contains(d, "raised after") {
			t.Errorf("the check does not say the clamp waits: %s", d)
		}

		h.at(55*tsec + tsec/2)
		h.wantEvents("relaxed after relax_after",
			"6s incident wg0 opened",
			"6s action wg0 mss-clamp changed",
			"6s action wg0 link-mtu changed",
			"6s recovered wg0 clamped",
			"40s path-mtu wg0 relaxed",
			"40s action wg0 mss-clamp changed",
			"40s action wg0 link-mtu changed")
		h.wantPathMTU("relaxed", mtuOK, 1420, 1500)
		h.wantNode("relaxed", 1420)
		h.wantChanges("still no rung")
	})
}

func TestPathMTUMonitorNoticesFlannelResettingTheMTUAndDoesNotFightIt(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newMTUWorld()
		w.carrier(1400)
		h := startTunnelMonitor(t, w, mtuTestConfig(), tunnelTestPolicy(), false)
		defer h.stop()

		h.at(tsec / 2)
		h.wantNode("clamped at the first check", 1328, mtuClamps...)
		for i, at := range []time.Duration{10, 20} {
			w.mtus.Set("wg0", 1420) // Flannel re-creates its link
			h.at((at + 1) * tsec)
			h.wantNode("lowered again: the path still needs it", 1328, mtuClamps...)
			if got := len(h.mtuEvents("mtu-reset")); got != i+1 {
				t.Errorf("after reset %d: %d mtu-reset events", i+1, got)
			}
		}
		w.mtus.Set("wg0", 1420)
		h.at(31 * tsec)
		if len(h.mtuEvents("fight")) != 1 {
			t.Errorf("no fight reported: %v", h.ev.lines())
		}
		h.wantNode("fighting: the MTU is left, the clamp stays", 1420,
			netfix.LinkClamp{Link: "wg0", PathMTU: 1328}, netfix.LinkClamp{Link: "wwan0", PathMTU: 1400})
		h.wantPathMTU("fighting", mtuClamped, 1328, 1400)
		if c := h.pathMTU(); !c.PathMTU.Fighting || !strings.Contains(c.Detail, "Flannel") {
			t.Errorf("the check does not say so: %+v", c)
		}
		h.at(40 * tsec)
		h.wantNode("still left alone", 1420,
			netfix.LinkClamp{Link: "wg0", PathMTU: 1328}, netfix.LinkClamp{Link: "wwan0", PathMTU: 1400})
		h.wantChanges("no rung")
	})
}

func (h *tunnelHarness) mtuEvents(result string) []string {
	var out []string
	for _, l := range h.ev.lines() {
		if strings.HasSuffix(l, " path-mtu wg0 "+result) {
			out = append(out, l)
		}
	}
	return out
}

// A dark tunnel at the same time as a small path: the ladder has the dark
// tunnel, the path MTU is not judged until the tunnel carries traffic
// again, and then it is.
func TestPathMTUMonitorLeavesADarkTunnelToTheLadder(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newMTUWorld()
		w.carrier(1500)
		h := startTunnelMonitor(t, w, mtuTestConfig(), tunnelTestPolicy(), false)
		defer h.stop()
		h.at(4*tsec + tsec/2)
		w.set(func(w *tunnelWorld) { w.dark, w.fixedBy = true, "nothing" })
		w.pmtu.SetPath(mtuTunnelTarget, 0) // nothing crosses a dark tunnel
		w.pmtu.SetPath(mtuUplinkTarget, 1400)
		h.at(12*tsec + tsec/2)
		for _, l := range h.ev.lines() {
			if strings.Contains(l, "mss-clamp") || strings.Contains(l, "link-mtu") || strings.Contains(l, "path-mtu") {
				t.Errorf("the path MTU acted on a dark tunnel: %s", l)
			}
		}
		if c := h.pathMTU(); !strings.Contains(c.Detail, "dark") {
			t.Errorf("the check does not say why it waits: %s", c.Detail)
		}
		if !slices.Contains(h.w.Changes(), handshakePeer0) {
			t.Errorf("the ladder did not have the dark tunnel: %v", h.w.Changes())
		}
		w.set(func(w *tunnelWorld) { w.dark = false })
		w.carrier(1400)
		h.at(16*tsec + tsec/2)
		h.wantNode("once it carries traffic the path is fitted", 1328, mtuClamps...)
	})
}

// A probe target that answers no echo (ICMP dropped behind the tunnel):
// the tunnel's path MTU is unknown, the uplink's is measured and clamped,
// and the tunnel's MTU is not guessed.
func TestPathMTUMonitorWithASilentProbeTarget(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newMTUWorld()
		w.carrier(1400)
		w.pmtu.SetPath(mtuTunnelTarget, 0)
		h := startTunnelMonitor(t, w, mtuTestConfig(), tunnelTestPolicy(), false)
		defer h.stop()
		h.at(2*tsec + tsec/2)
		h.wantNode("only the uplink", 1420, netfix.LinkClamp{Link: "wwan0", PathMTU: 1400})
		h.wantPathMTU("only the uplink", mtuClamped, 0, 1400)
	})
}

// A restart finds the clamp its previous run left: it takes it over
// without a new incident, and relaxes it once the path has grown.
func TestPathMTUMonitorTakesOverTheClampAPreviousRunLeft(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newMTUWorld()
		w.carrier(1400)
		if _, err := netfix.EnsureMSSClamp(t.Context(), w.nft, netfix.MSSClamp{Table: netfix.ClampTable("wg0"), Links: mtuClamps}, false); err != nil {
			t.Fatal(err)
		}
		w.mtus.Set("wg0", 1328)
		h := startTunnelMonitor(t, w, mtuTestConfig(), tunnelTestPolicy(), false)
		defer h.stop()
		h.at(5*tsec + tsec/2)
		h.wantEvents("taken over: nothing to report")
		h.wantPathMTU("taken over", mtuClamped, 1328, 1400)
		w.carrier(1500)
		h.at(40 * tsec)
		h.wantNode("relaxed", 1420)
		if !slices.Contains(h.ev.lines(), "36s path-mtu wg0 relaxed") {
			t.Errorf("events %v", h.ev.lines())
		}
	})
}

func TestPathMTUMonitorDryRunSaysWhatItWouldDoOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newMTUWorld()
		w.carrier(1400)
		h := startTunnelMonitor(t, w, mtuTestConfig(), tunnelTestPolicy(), true)
		defer h.stop()
		h.at(10 * tsec)
		h.wantEvents("dry run",
			"0s incident wg0 opened",
			"0s action wg0 mss-clamp dry-run",
			"0s action wg0 link-mtu dry-run")
		h.wantNode("dry run: nothing changed", 1420)
		if got := w.nft.Tables(); len(got) != 0 {
			t.Errorf("a dry run wrote the tables %v", got)
		}
		h.wantPathMTU("dry run", mtuLow, 1328, 1400)
	})
}

// A workload's hint (its TLS handshake stalled) checks the path at once,
// whatever the interval.
func TestPathMTUMonitorChecksAtOnceOnAHint(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newMTUWorld()
		w.carrier(1500)
		cfg := mtuTestConfig()
		cfg.PathMTU.Interval = configs.Duration(time.Hour)
		h := startTunnelMonitor(t, w, cfg, tunnelTestPolicy(), false)
		defer h.stop()
		h.at(5*tsec + tsec/2)
		w.carrier(1400)
		h.at(9*tsec + tsec/2)
		h.wantNode("not checked again within the interval", 1420)
		h.m.HintPathMTU("workload telemetry: TLS handshake stalled after TCP connected, without an alert")
		h.at(10 * tsec)
		h.wantNode("checked on the hint", 1328, mtuClamps...)
		if ev := h.ev.All(); len(ev) == 0 || ev[0].Evidence["hint"] == nil {
			t.Errorf("the incident does not carry the hint: %+v", ev)
		}
	})
}
