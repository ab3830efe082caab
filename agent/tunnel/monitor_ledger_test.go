package tunnel

import (
	"slices"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/edgeheal/edgeheal/agent/core"
	"github.com/edgeheal/edgeheal/configs"
	"github.com/edgeheal/edgeheal/wire"
)

// The bounds on disruptive actions across a restart and a reload: the
// monitors of successive processes or configs share the ledger.

// countDisruptive counts the disruptive tunnel actions among the events.
func countDisruptive(evs []core.Event) int {
	n := 0
	for _, ev := range evs {
		if ev.Kind == wire.EventAction && ladderDisruptive(ev.Action) && ev.Action != "keepalive" && ev.Result == "changed" {
			n++
		}
	}
	return n
}

func TestTunnelMonitorKeepsItsBudgetAndIncidentAcrossARestart(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		dir := t.TempDir()
		w := newTunnelWorld(1, 20*tsec)
		tun := tunnelTestConfig()
		pol := tunnelTestPolicy()
		pol.MaxDisruptive = 2
		t0 := time.Now()
		ev := &tunnelEventLog{t0: t0}
		start := func() *tunnelHarness {
			l, err := OpenLedger(dir, time.Now(), nil)
			if err != nil {
				t.Fatal(err)
			}
			return startTunnelMonitorWith(t, w, Config{Tunnel: tun, Policy: pol, Ledger: l}, t0, ev)
		}
		h := start()
		h.at(10*tsec + tsec/2)
		w.set(func(w *tunnelWorld) { w.dark = true }) // nothing fixes it

		// Restart right after every action: each new process reads the
		// ledger the last one wrote.
		for _, at := range []time.Duration{14, 44, 60, 90} {
			h.at(at*tsec + tsec/2)
			h.stop()
			h = start()
		}
		h.at(300 * tsec)
		h.stop()

		if n := countDisruptive(ev.All()); n != 2 {
			t.Errorf("%d disruptive actions across five processes, want policy.max_disruptive = 2:\n%s", n, strings.Join(ev.lines(), "\n"))
		}
		opened := 0
		for _, line := range ev.lines() {
			if strings.Contains(line, "incident "+tunnelPeer0+" opened") {
				opened++
			}
		}
		if opened != 1 {
			t.Errorf("incident opened %d times, want once (it stays open across restarts):\n%s", opened, strings.Join(ev.lines(), "\n"))
		}
		if !slices.ContainsFunc(ev.lines(), func(l string) bool { return strings.Contains(l, "gave-up "+tunnelPeer0) }) {
			t.Errorf("never gave up:\n%s", strings.Join(ev.lines(), "\n"))
		}
	})
}

func TestTunnelMonitorWaitsForAnActionThePreviousConfigStarted(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newTunnelWorld(1, 20*tsec)
		w.set(func(w *tunnelWorld) { w.restarting = 30 * tsec })
		tun := tunnelTestConfig()
		tun.Heal = []string{"restart-unit", "handshake"}
		tun.Unit = "wg-quick@wg0.service"
		pol := tunnelTestPolicy()
		pol.Cooldown = configs.Duration(tsec) // the next rung may follow as soon as the first is verified
		l, _ := OpenLedger("", time.Now(), nil)
		t0 := time.Now()
		ev := &tunnelEventLog{t0: t0}
		cfg := Config{Tunnel: tun, Policy: pol, Ledger: l}
		h := startTunnelMonitorWith(t, w, cfg, t0, ev)

		h.at(10*tsec + tsec/2)
		w.set(func(w *tunnelWorld) { w.dark = true })
		h.at(20*tsec + tsec/2) // the restart began at 13 s and takes 30 s
		h.stop()               // a reload: the old monitor goes, its restart goes on
		h = startTunnelMonitorWith(t, w, cfg, t0, ev)
		h.at(50 * tsec)
		h.wantChanges("while and after the adopted restart ran",
			"restart wg-quick@wg0.service", "restarted wg-quick@wg0.service")
		if c := h.peer(0); c.State != string(peerHealing) {
			t.Errorf("peer at 50 s: %+v; want healing: the restart returned at 43 s and is being verified", c)
		}
		h.at(60 * tsec) // 43 s + verify_timeout 15 s: the next rung
		h.wantChanges("after the restart was verified as not enough",
			"restart wg-quick@wg0.service", "restarted wg-quick@wg0.service", handshakePeer0)
		h.stop()
		if got := ev.lines(); !slices.Contains(got, "13s action wg0 restart-unit changed") {
			t.Errorf("the adopted restart was not reported with its start:\n%s", strings.Join(got, "\n"))
		}
	})
}

// Do no harm: during an uplink outage a forced handshake would throw away
// a session that survives it, and after a block longer than a session's
// life WireGuard makes the new one at its next packet. Either way edgeheal
// waits, whether it learnt the host path or not.
func TestTunnelMonitorWaitsOutABlackholeWithOrWithoutALearnedPath(t *testing.T) {
	for _, tc := range []struct {
		name    string
		silent  bool // the endpoint never answers ICMP: nothing to learn
		block   time.Duration
		holdEvt string
	}{
		{"20 s, learnt", false, 20 * tsec, "uplink-outage " + tunnelPeer0 + " held"},
		{"190 s, learnt", false, 190 * tsec, "uplink-outage " + tunnelPeer0 + " held"},
		{"20 s, never answered", true, 20 * tsec, "held " + tunnelPeer0 + " path-unknown"},
		{"190 s, never answered", true, 190 * tsec, "held " + tunnelPeer0 + " path-unknown"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				w := newTunnelWorld(1, 20*tsec)
				w.set(func(w *tunnelWorld) { w.icmpSilent, w.fixedBy = tc.silent, "handshake" })
				h := startTunnelMonitor(t, w, tunnelTestConfig(), tunnelTestPolicy(), false)
				defer h.stop()

				h.at(40*tsec + tsec/2)
				w.set(func(w *tunnelWorld) { w.dark, w.hostDark = true, true })
				h.at(40*tsec + tc.block)
				h.wantChanges("during the block")
				w.set(func(w *tunnelWorld) { w.dark, w.hostDark = false, false })
				h.at(40*tsec + tc.block + 30*tsec)
				h.wantChanges("after the block: the tunnel came back by itself")
				got := h.ev.lines()
				if !slices.ContainsFunc(got, func(l string) bool { return strings.HasSuffix(l, tc.holdEvt) }) ||
					!strings.Contains(got[len(got)-1], "recovered "+tunnelPeer0+" ok") {
					t.Errorf("events:\n%s\nwant the wait reported (%s) and the incident closed", strings.Join(got, "\n"), tc.holdEvt)
				}
			})
		})
	}
}

// A hub that restarted lost its sessions while the path works: that is
// what a forced handshake is for, and edgeheal forces it at once.
func TestTunnelMonitorForcesAHandshakeWhenThePathWorksAndTheTunnelIsDark(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newTunnelWorld(1, 20*tsec)
		h := startTunnelMonitor(t, w, tunnelTestConfig(), tunnelTestPolicy(), false)
		defer h.stop()
		h.at(40*tsec + tsec/2)
		w.set(func(w *tunnelWorld) { w.dark, w.fixedBy = true, "handshake" })
		h.at(45 * tsec)
		h.wantChanges("3 misses after the hub lost its sessions", handshakePeer0)
		h.wantState("after the forced handshake", 0, peerOK)
	})
}

// A bounce whose link-up fails does not leave the tunnel down: the rung
// retries until its deadline, and every round after it tries again until
// the link is up, reporting the failure once and the success.
func TestTunnelMonitorKeepsBringingUpALinkABounceLeftDown(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newTunnelWorld(1, 20*tsec)
		w.set(func(w *tunnelWorld) { w.upFails = 1000 })
		tun := tunnelTestConfig()
		tun.Heal = []string{"bounce"}
		h := startTunnelMonitor(t, w, tun, tunnelTestPolicy(), false)
		defer h.stop()
		h.at(10*tsec + tsec/2)
		w.set(func(w *tunnelWorld) { w.dark = true })
		h.at(60 * tsec) // the bounce at 13 s tried link-up for its whole 30 s
		h.wantChanges("while the link will not come up", "link wg0 down")
		w.set(func(w *tunnelWorld) { w.upFails = 0 })
		h.at(62 * tsec)
		h.wantChanges("once the driver lets it", "link wg0 down", "link wg0 up")
		var linkUp []string
		for _, l := range h.ev.lines() {
			if strings.Contains(l, "link-up") || strings.Contains(l, "bounce") {
				linkUp = append(linkUp, l)
			}
		}
		want := []string{"13s action wg0 bounce failed", "43s action wg0 link-up failed", "1m1s action wg0 link-up changed"}
		if !slices.Equal(linkUp, want) {
			t.Errorf("events %q, want %q", linkUp, want)
		}
		if h.m.book.leftDown() {
			t.Error("still recorded as left down")
		}
	})
}
