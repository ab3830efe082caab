package tunnel

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/go-cmp/cmp"
	"golang.zx2c4.com/wireguard/wgctrl/wgtypes"

	"github.com/edgeheal/edgeheal/agent/clock"
	"github.com/edgeheal/edgeheal/agent/core"
	"github.com/edgeheal/edgeheal/configs"
	"github.com/edgeheal/edgeheal/probes"
	"github.com/edgeheal/edgeheal/wire"
)

// The loop tests run the real Monitor.Run against tunnelWorld inside
// a synctest bubble: time is fake, starts at the bubble's epoch and only
// moves when every goroutine is blocked, so "at 13 s" is exact. Rounds run
// at whole seconds (probe interval 1 s); the test acts at half seconds so
// that no test step races a round.

type tunnelEventLog struct {
	mu  sync.Mutex
	t0  time.Time
	evs []core.Event
}

func (l *tunnelEventLog) add(ev core.Event) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.evs = append(l.evs, ev)
}

// lines renders the events as "13s incident wg0/AAEAAAAA opened" (action
// events also name the action).
func (l *tunnelEventLog) lines() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for _, ev := range l.evs {
		line := fmt.Sprintf("%s %s %s", ev.Time.Sub(l.t0), ev.Kind, ev.Target)
		if ev.Action != "" {
			line += " " + ev.Action
		}
		out = append(out, line+" "+ev.Result)
	}
	return out
}

func (l *tunnelEventLog) All() []core.Event {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]core.Event(nil), l.evs...)
}

func tunnelTestConfig() configs.Tunnel {
	return configs.Tunnel{
		Interface:           "wg0",
		Peers:               configs.PeerSelector{All: true},
		PersistentKeepalive: configs.Duration(20 * time.Second),
		StaleAfter:          configs.Duration(210 * time.Second),
		RxSilence:           configs.Duration(75 * time.Second),
		Probe:               configs.Probe{Target: "icmp://10.100.0.1", Interval: configs.Duration(time.Second), Timeout: configs.Duration(time.Second), Misses: 3},
		Heal:                configs.HealRungs,
	}
}

func tunnelTestPolicy() configs.Policy {
	return configs.Policy{
		Cooldown:      configs.Duration(30 * time.Second),
		MaxDisruptive: 3,
		Window:        configs.Duration(time.Hour),
		VerifyTimeout: configs.Duration(15 * time.Second),
		ResumeGrace:   configs.Duration(8 * time.Second),
	}
}

// tunnelHarness runs a monitor in the current synctest bubble.
type tunnelHarness struct {
	t     *testing.T
	t0    time.Time
	w     *tunnelWorld
	m     *Monitor
	ev    *tunnelEventLog
	clock *clock.Guard
	stop  func()
}

func startTunnelMonitor(t *testing.T, w *tunnelWorld, tun configs.Tunnel, pol configs.Policy, dryRun bool) *tunnelHarness {
	t.Helper()
	return startTunnelMonitorWith(t, w, Config{Tunnel: tun, Policy: pol, DryRun: dryRun}, time.Now(), &tunnelEventLog{t0: time.Now()})
}

// startTunnelMonitorWith runs a monitor made from cfg (its OS, offload, log
// and emit are the world's and the harness's), counting time from t0 and
// adding its events to ev: a second monitor after a reload or a restart
// shares both with the first.
func startTunnelMonitorWith(t *testing.T, w *tunnelWorld, cfg Config, t0 time.Time, ev *tunnelEventLog) *tunnelHarness {
	t.Helper()
	h := &tunnelHarness{t: t, t0: t0, w: w, ev: ev, clock: clock.New(w.clock)}
	cfg.OS, cfg.Offload, cfg.Emit, cfg.Clock = w.os(), w, h.ev.add, h.clock
	cfg.Log = slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelDebug}))
	h.m = New(cfg)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- h.m.Run(ctx) }()
	h.stop = func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run returned %v, want nil when stopped", err)
		}
	}
	return h
}

// at sleeps until d after the start and lets every round up to then finish.
func (h *tunnelHarness) at(d time.Duration) {
	time.Sleep(time.Until(h.t0.Add(d)))
	synctest.Wait()
}

func (h *tunnelHarness) peer(i int) wire.Check {
	h.t.Helper()
	id := tunnelFakeID("wg0", tunnelFakeKey(i))
	for _, c := range h.m.Checks() {
		if c.Target == id {
			return c
		}
	}
	h.t.Fatalf("no check for %s in %+v", id, h.m.Checks())
	return wire.Check{}
}

// wantChanges compares what the monitor changed in the world so far.
func (h *tunnelHarness) wantChanges(when string, want ...string) {
	h.t.Helper()
	if diff := cmp.Diff(want, h.w.Changes()); diff != "" {
		h.t.Errorf("%s: changes (-want +got):\n%s", when, diff)
	}
}

func (h *tunnelHarness) wantEvents(when string, want ...string) {
	h.t.Helper()
	if diff := cmp.Diff(want, h.ev.lines()); diff != "" {
		h.t.Errorf("%s: events (-want +got):\n%s", when, diff)
	}
}

func (h *tunnelHarness) wantState(when string, i int, want peerPhase) {
	h.t.Helper()
	if got := h.peer(i).State; got != string(want) {
		h.t.Errorf("%s: peer %d state %q, want %q (check %+v)", when, i, got, want, h.peer(i))
	}
}

// clockCheck is the clock check the monitor's clock guard shows.
func (h *tunnelHarness) clockCheck() *wire.Check {
	for _, c := range h.clock.Checks() {
		return &c
	}
	return nil
}

const tsec = time.Second

var (
	tunnelPeer0    = tunnelFakeID("wg0", tunnelFakeKey(0))
	handshakePeer0 = "handshake " + tunnelPeer0 + " keepalive 20s"
	bounceWG0      = []string{"link wg0 down", "link wg0 up"}
)

func TestTunnelMonitorConfirmsAStreakThenHealsAndRebaselines(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newTunnelWorld(1, 20*tsec)
		h := startTunnelMonitor(t, w, tunnelTestConfig(), tunnelTestPolicy(), false)
		defer h.stop()

		h.at(10*tsec + tsec/2)
		h.wantState("healthy for 10 s", 0, peerOK)
		w.set(func(w *tunnelWorld) { w.dark, w.fixedBy = true, "handshake" })

		h.at(12*tsec + tsec/2)
		h.wantState("after two misses", 0, peerSuspect)
		h.wantChanges("after two misses: not confirmed, no action")

		h.at(13*tsec + tsec/2)
		// reassert ran first and changed nothing: not a fix, the ladder moved on at once.
		h.wantChanges("after the third miss", handshakePeer0)
		h.wantState("after the forced handshake", 0, peerHealing)

		h.at(14*tsec + tsec/2)
		h.wantState("after the probe answered again", 0, peerOK)
		h.wantEvents("after recovery",
			"13s incident "+tunnelPeer0+" opened",
			"13s action wg0 reassert unchanged",
			"13s action "+tunnelPeer0+" handshake changed",
			"14s recovered "+tunnelPeer0+" ok")
		evs := h.ev.All()
		if detect := evs[0].Time.Sub(h.t0) - (10*tsec + tsec/2); detect > 3*tsec+tsec {
			t.Errorf("detected %s after the tunnel went dark, want within interval × misses + 1 s = 4s", detect)
		}
		if got := evs[3].Summary; !strings.Contains(got, "healed by handshake") {
			t.Errorf("recovered summary %q does not say the handshake healed it", got)
		}
		// The forced handshake re-added the peer with zero counters: that round
		// re-baselined (zero deltas) instead of reading a drop as an alarm.
		if got := h.peer(0).Peer.RxDeltaBytes; got != 0 {
			t.Errorf("rx delta in the round after the re-add = %v, want 0 (re-baselined)", got)
		}
		h.at(15*tsec + tsec/2)
		if got := h.peer(0).Peer.RxDeltaBytes; got != 100 {
			t.Errorf("rx delta a round later = %v, want 100", got)
		}

		h.at(400 * tsec)
		h.wantState("long after recovery", 0, peerOK)
		if n := len(h.ev.lines()); n != 4 {
			t.Errorf("%d events by 400 s, want still 4 (no false alarm after the re-add): %v", n, h.ev.lines())
		}
	})
}

func TestTunnelMonitorNeverActsOnAProbeThatErrored(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newTunnelWorld(1, 20*tsec)
		h := startTunnelMonitor(t, w, tunnelTestConfig(), tunnelTestPolicy(), false)
		defer h.stop()

		h.at(10*tsec + tsec/2)
		w.set(func(w *tunnelWorld) {
			w.dark, w.fixedBy = true, "handshake"
			w.probeErr = errors.New("icmp socket: operation not permitted")
		})
		h.at(100 * tsec)
		h.wantChanges("after 90 s of probe errors")
		h.wantEvents("after 90 s of probe errors")
		h.wantState("after 90 s of probe errors", 0, peerOK)
		if got := h.peer(0).Peer.Probe; got != "error: icmp socket: operation not permitted" {
			t.Errorf("check shows probe %v, want the error", got)
		}
	})
}

func TestTunnelMonitorGivesUpWhenTheBudgetIsSpent(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newTunnelWorld(1, 20*tsec)
		tun := tunnelTestConfig()
		tun.EndpointHost, tun.Unit = "hub.example.net", "wg-quick@wg0.service"
		pol := tunnelTestPolicy()
		pol.MaxDisruptive = 2
		h := startTunnelMonitor(t, w, tun, pol, false)
		defer h.stop()

		h.at(10*tsec + tsec/2)
		w.set(func(w *tunnelWorld) { w.dark = true }) // nothing fixes it

		h.at(600 * tsec)
		h.wantChanges("after 10 minutes dark",
			// 13 s: reassert and reresolve (the same address) change nothing: the next rung at once
			handshakePeer0,             // 13 s: budget 1 of 2
			bounceWG0[0], bounceWG0[1], // 43 s (cooldown after 13 s): budget 2 of 2
			// 58 s: restart-unit would be the third: gave up instead.
		)
		h.wantEvents("after 10 minutes dark",
			"13s incident "+tunnelPeer0+" opened",
			"13s action wg0 reassert unchanged",
			"13s action "+tunnelPeer0+" reresolve unchanged",
			"13s action "+tunnelPeer0+" handshake changed",
			"43s action wg0 bounce changed",
			"58s gave-up "+tunnelPeer0+" degraded",
			"1m58s degraded "+tunnelPeer0+" alert", // alerts back off: 1, 2, 4 minutes
			"3m58s degraded "+tunnelPeer0+" alert",
			"7m58s degraded "+tunnelPeer0+" alert",
		)
		c := h.peer(0)
		if c.State != "degraded" || c.Healthy || !strings.Contains(c.Detail, "budget spent: 2 disruptive actions in 1h0m0s (next rung restart-unit)") {
			t.Errorf("check %+v, want degraded, unhealthy, with the budget as the reason", c)
		}

		h.at(600*tsec + tsec/2)
		w.set(func(w *tunnelWorld) { w.dark = false })
		h.at(601*tsec + tsec/2)
		h.wantState("once the peer answers again", 0, peerOK)
		if got := h.ev.lines(); got[len(got)-1] != "10m1s recovered "+tunnelPeer0+" ok" {
			t.Errorf("last event %q, want the incident closed at 10m1s", got[len(got)-1])
		}
	})
}

func TestTunnelMonitorDoesNotTouchTheTunnelWhenTheUplinkIsDown(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newTunnelWorld(1, 20*tsec)
		h := startTunnelMonitor(t, w, tunnelTestConfig(), tunnelTestPolicy(), false)
		defer h.stop()

		h.at(10*tsec + tsec/2)
		w.set(func(w *tunnelWorld) {
			w.dark, w.fixedBy = true, "handshake"
			w.uplinkDown = true
		})
		h.at(60*tsec + tsec/2)
		h.wantChanges("during the uplink outage")
		h.wantEvents("during the uplink outage",
			"13s incident "+tunnelPeer0+" opened",
			"13s uplink-outage "+tunnelPeer0+" held") // once, not every round
		if c := h.peer(0); c.State != "down" || !strings.Contains(c.Detail, "uplink outage: no default route") {
			t.Errorf("check %+v, want down and the uplink outage as the reason for waiting", c)
		}

		w.set(func(w *tunnelWorld) { w.uplinkDown = false })
		h.at(68*tsec + tsec/2)
		h.wantChanges("within resume_grace (8 s) of the uplink's return: WireGuard may resume by itself")
		h.at(70*tsec + tsec/2)
		h.wantChanges("after the uplink came back and the tunnel stayed dark beyond the grace", handshakePeer0)
		h.wantState("after the uplink came back", 0, peerOK)
	})
}

func TestTunnelMonitorLetsASessionResumeByItselfWhenTheUplinkReturns(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newTunnelWorld(1, 20*tsec)
		h := startTunnelMonitor(t, w, tunnelTestConfig(), tunnelTestPolicy(), false)
		defer h.stop()
		// The endpoint answers the host's own probe while the tunnel works:
		// the learner knows it by the time of the blackhole, so its silence
		// then is evidence that the host path is down.
		h.at(10*tsec + tsec/2)
		w.set(func(w *tunnelWorld) { w.dark, w.hostDark = true, true })
		h.at(30*tsec + tsec/2)
		// The modem passes again: the host path answers at once, the 31 s
		// round's probe still misses (it raced the return), and WireGuard's
		// session resumes by itself before the next one.
		w.set(func(w *tunnelWorld) { w.hostDark = false })
		h.at(31*tsec + tsec/2)
		w.set(func(w *tunnelWorld) { w.dark = false })
		h.at(40 * tsec)
		h.wantChanges("after a short blackhole")
		h.wantEvents("after a short blackhole",
			"13s incident "+tunnelPeer0+" opened",
			"13s action wg0 reassert unchanged", // free: it runs during an outage
			"13s uplink-outage "+tunnelPeer0+" held",
			"32s recovered "+tunnelPeer0+" ok")
	})
}

// S3b's race: WireGuard's own retry (or the far side's) completes a
// handshake between the round's reading, which chose a forced handshake,
// and the rung. The rung reads the peer again and holds: forcing a
// handshake now would throw away the session WireGuard just made.
func TestTunnelMonitorDoesNotForceAHandshakeOverOneWireGuardJustCompleted(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newTunnelWorld(1, 20*tsec)
		h := startTunnelMonitor(t, w, tunnelTestConfig(), tunnelTestPolicy(), false)
		defer h.stop()
		h.at(10*tsec + tsec/2)
		w.set(func(w *tunnelWorld) { w.dark, w.fixedBy = true, "handshake" })
		// The 13 s round confirms the incident on its reading; WireGuard's
		// handshake completes while the ladder probes the host path.
		h.at(12*tsec + tsec/2)
		w.set(func(w *tunnelWorld) { w.ownHandshake = true })
		h.at(13*tsec + tsec/2)
		h.wantChanges("in the round of the incident")
		if got := h.peer(0).Detail; !strings.Contains(got, "waiting: WireGuard completed a handshake of its own") {
			t.Errorf("check detail in the round of the incident = %q, want the fresh session named", got)
		}
		h.at(20 * tsec)
		h.wantChanges("after the session came back")
		h.wantEvents("after the session came back",
			"13s incident "+tunnelPeer0+" opened",
			"13s action wg0 reassert unchanged",
			"14s recovered "+tunnelPeer0+" ok")
	})
}

// A blackhole longer than the session's 180 s: the host path is watched
// every 250 ms while the peer is held, and its handshake is forced as soon
// as the path answers, not a round's probe timeout later. With probes that
// take their whole timeout, as real ones do, the rounds are back to back,
// each waiting on its tunnel probe, and the path's answer cuts the probe
// in progress short instead of waiting for it.
func TestTunnelMonitorForcesAnExpiredSessionsHandshakeAsSoonAsThePathAnswers(t *testing.T) {
	for _, waits := range []bool{false, true} {
		t.Run(fmt.Sprintf("probes wait out their timeout: %v", waits), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				w := newTunnelWorld(1, 20*tsec)
				w.net.SetWaits(waits)
				h := startTunnelMonitor(t, w, tunnelTestConfig(), tunnelTestPolicy(), false)
				defer h.stop()
				h.at(10*tsec + tsec/2)
				w.set(func(w *tunnelWorld) { w.dark, w.hostDark, w.fixedBy = true, true, "handshake" })
				h.at(200*tsec + 3*tsec/10)
				h.wantChanges("during the blackhole")
				w.set(func(w *tunnelWorld) { w.hostDark = false })
				h.at(200*tsec + 6*tsec/10)
				h.wantChanges("0.3 s after the path returned", handshakePeer0)
				h.at(210 * tsec)
				h.wantState("after the path returned", 0, peerOK)
				if !waits {
					h.wantEvents("after the path returned",
						"13s incident "+tunnelPeer0+" opened",
						"13s action wg0 reassert unchanged",
						"13s uplink-outage "+tunnelPeer0+" held",
						"3m20.5s action "+tunnelPeer0+" handshake changed",
						"3m20.5s recovered "+tunnelPeer0+" ok")
					return
				}
				// Rounds wait on their probes: the incident's timing differs,
				// the handshake's must not.
				var at []time.Duration
				for _, ev := range h.ev.All() {
					if ev.Action == "handshake" {
						at = append(at, ev.Time.Sub(h.t0))
					}
				}
				if len(at) != 1 || at[0] != 200*tsec+tsec/2 {
					t.Errorf("handshakes at %v, want one at 3m20.5s; events %v", at, h.ev.lines())
				}
			})
		})
	}
}

func TestTunnelMonitorBlamesAClockThatSteppedBackInsteadOfForcingHandshakes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newTunnelWorld(1, 20*tsec)
		h := startTunnelMonitor(t, w, tunnelTestConfig(), tunnelTestPolicy(), false)
		defer h.stop()

		h.at(10*tsec + tsec/2)
		w.set(func(w *tunnelWorld) { w.dark, w.fixedBy = true, "handshake" })
		w.clock.Set(probes.ClockStatus{Synchronized: true, SteppedBack: true, Detail: "wall clock 42s behind"})
		h.at(60*tsec + tsec/2)
		h.wantChanges("while the clock is stepped back") // reassert is free, and changed nothing
		h.wantEvents("while the clock is stepped back",
			"13s incident "+tunnelPeer0+" opened",
			"13s action wg0 reassert unchanged",
			"13s clock "+tunnelPeer0+" held")
		if c := h.peer(0); !strings.Contains(c.Detail, "clock stepped back (wall clock 42s behind)") {
			t.Errorf("peer check %+v does not name the clock as the likely cause", c)
		}
		if c := h.clockCheck(); c == nil || c.Healthy {
			t.Errorf("clock check %+v, want one, unhealthy", c)
		}

		w.clock.Set(probes.ClockStatus{Synchronized: true})
		h.at(62*tsec + tsec/2)
		h.wantChanges("after the clock recovered", handshakePeer0)
		h.wantState("after the clock recovered", 0, peerOK)
	})
}

func TestTunnelMonitorForcesAHandshakeWithAnUnsynchronisedClockButDoesNotBounce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newTunnelWorld(1, 20*tsec)
		h := startTunnelMonitor(t, w, tunnelTestConfig(), tunnelTestPolicy(), false)
		defer h.stop()

		h.at(10*tsec + tsec/2)
		w.set(func(w *tunnelWorld) { w.dark, w.fixedBy = true, "bounce" })
		w.clock.Set(probes.ClockStatus{Detail: "STA_UNSYNC"})
		h.at(80*tsec + tsec/2)
		h.wantChanges("while the clock is unsynchronised", handshakePeer0) // the bounce after it is held
		if c := h.clockCheck(); c == nil || !c.Healthy || c.State != "unsynchronised" {
			t.Errorf("clock check %+v, want a healthy warning in state unsynchronised", c)
		}
		if c := h.peer(0); !strings.Contains(c.Detail, "clock not synchronised (STA_UNSYNC)") {
			t.Errorf("peer check %+v does not name the clock as the likely cause of the held bounce", c)
		}
	})
}

func TestTunnelMonitorDryRunChangesNothingAndSaysWhatItWouldDo(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newTunnelWorld(1, 0) // keepalive drifted to 0
		h := startTunnelMonitor(t, w, tunnelTestConfig(), tunnelTestPolicy(), true)
		defer h.stop()

		h.at(10*tsec + tsec/2)
		w.set(func(w *tunnelWorld) { w.dark, w.fixedBy = true, "handshake" })
		h.at(80 * tsec)
		h.wantChanges("after 70 s dark in dry run")
		h.wantEvents("after 70 s dark in dry run",
			"0s action wg0 keepalive dry-run", // then after the cooldown, doubling
			"13s incident "+tunnelPeer0+" opened",
			"13s action wg0 reassert dry-run",              // would set the keepalive
			"28s action "+tunnelPeer0+" handshake dry-run", // reassert not verified
			"30s action wg0 keepalive dry-run",
			"58s action wg0 bounce dry-run", // reresolve and restart-unit not configured; cooldown after 28 s
			"1m13s gave-up "+tunnelPeer0+" degraded",
			// the next keepalive report is due at 90 s
		)
		if ka := w.peer(0).PersistentKeepaliveInterval; ka != 0 {
			t.Errorf("keepalive is %s after a dry run, want untouched 0", ka)
		}
		w.set(func(w *tunnelWorld) {
			if !w.dark {
				t.Errorf("the fault was fixed in a dry run")
			}
		})
		for _, ev := range h.ev.All() {
			if ev.Kind != "action" {
				continue
			}
			if ev.Result != "dry-run" || !strings.HasPrefix(ev.Summary, "dry run: would "+ev.Action) {
				t.Errorf("action event %q %q: %q, want a dry-run saying what it would do", ev.Action, ev.Result, ev.Summary)
			}
		}
		want := "dry run: would handshake on " + tunnelPeer0 + " (" + tunnelPeer0 + ": removed and re-added (endpoint 203.0.113.1:51820, 1 allowed IPs, keepalive 20s))"
		found := false
		for _, ev := range h.ev.All() {
			found = found || ev.Summary == want
		}
		if !found {
			t.Errorf("no event says %q: %v", want, h.ev.All())
		}
	})
}

func TestTunnelMonitorRestoresAKeepaliveResetToZeroWithinOneRound(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newTunnelWorld(1, 20*tsec)
		h := startTunnelMonitor(t, w, tunnelTestConfig(), tunnelTestPolicy(), false)
		defer h.stop()

		h.at(10*tsec + tsec/2)
		h.wantChanges("with the keepalive as configured")
		// Flannel's resync rewrote the peer.
		w.wg.UpdatePeer("wg0", tunnelFakeKey(0), func(p *wgtypes.Peer) { p.PersistentKeepaliveInterval = 0 })
		h.at(11*tsec + tsec/2)
		h.wantChanges("one round after the reset", "keepalive "+tunnelPeer0+" 20s")
		if ka := w.peer(0).PersistentKeepaliveInterval; ka != 20*tsec {
			t.Errorf("keepalive %s, want 20s again", ka)
		}
		h.wantEvents("one round after the reset", "11s action wg0 keepalive changed")
	})
}

func TestTunnelMonitorActsAtOnceOnAWorkloadSuspicion(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newTunnelWorld(1, 20*tsec)
		h := startTunnelMonitor(t, w, tunnelTestConfig(), tunnelTestPolicy(), false)
		defer h.stop()

		h.at(10*tsec + tsec/2)
		w.set(func(w *tunnelWorld) { w.dark, w.fixedBy = true, "handshake" })
		h.m.Suspect("collector: pod path dark, host path fine")
		synctest.Wait()
		h.wantChanges("right after the suspicion: the first miss is enough", handshakePeer0)
		h.at(11*tsec + tsec/2)
		h.wantEvents("after the suspicion",
			"10.5s incident "+tunnelPeer0+" opened",
			"10.5s action wg0 reassert unchanged",
			"10.5s action "+tunnelPeer0+" handshake changed",
			"11s recovered "+tunnelPeer0+" ok")
		if got := h.ev.All()[0].Summary; !strings.Contains(got, "workload: collector: pod path dark, host path fine") {
			t.Errorf("incident summary %q does not carry the workload's reason", got)
		}
	})
}

func TestTunnelMonitorIgnoresASuspicionWhileItsProbeAnswers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newTunnelWorld(1, 20*tsec)
		h := startTunnelMonitor(t, w, tunnelTestConfig(), tunnelTestPolicy(), false)
		defer h.stop()
		h.at(10*tsec + tsec/2)
		if ok, why := h.m.ProbeHealthy(); !ok || !strings.Contains(why, "icmp://10.100.0.1 answered") {
			t.Errorf("ProbeHealthy = %v %q, want true with the probe named", ok, why)
		}
		for range 30 {
			h.m.Suspect("collector: pod path dark, host path fine")
			time.Sleep(tsec)
		}
		h.wantChanges("after 30 s of suspicions with the tunnel's probe answering")
		h.wantEvents("after 30 s of suspicions with the tunnel's probe answering")
		w.set(func(w *tunnelWorld) { w.dark = true })
		h.at(45 * tsec)
		if ok, _ := h.m.ProbeHealthy(); ok {
			t.Error("ProbeHealthy with the tunnel dark for 4 s")
		}
	})
}

func TestTunnelMonitorBlamesOnlyThePeerThatCarriesTheProbe(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newTunnelWorld(3, 20*tsec)
		tun := tunnelTestConfig()
		tun.Probe.Target = "tcp://10.100.1.7:6443" // inside peer 1's 10.100.1.0/24
		h := startTunnelMonitor(t, w, tun, tunnelTestPolicy(), false)
		defer h.stop()

		h.at(10*tsec + tsec/2)
		w.set(func(w *tunnelWorld) { w.dark, w.fixedBy = true, "handshake" })
		h.at(13*tsec + tsec/2)
		peer1 := tunnelFakeID("wg0", tunnelFakeKey(1))
		h.wantChanges("after three misses", "handshake "+peer1+" keepalive 20s")
		h.wantState("peer 0", 0, peerOK)
		h.wantState("peer 2", 2, peerOK)
		if got := h.peer(0).Peer.Probe; got != "" {
			t.Errorf("peer 0 shows probe %v, want none (the probe goes through peer 1)", got)
		}
		if got := len(h.m.Checks()); got != 3 {
			t.Errorf("%d checks, want one per peer", got)
		}
	})
}

func TestTunnelMonitorHoldsStateWhileThePeersCannotBeRead(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newTunnelWorld(1, 20*tsec)
		h := startTunnelMonitor(t, w, tunnelTestConfig(), tunnelTestPolicy(), false)
		defer h.stop()

		h.at(10*tsec + tsec/2)
		w.set(func(w *tunnelWorld) {
			w.dark = true
			w.readErr = errors.New("wgctrl: device wg0: no such device")
		})
		h.at(60 * tsec)
		h.wantChanges("while the device is unreadable")
		h.wantEvents("while the device is unreadable")
		// Nothing was done, and nothing green is shown of what cannot be seen.
		if c := h.peer(0); c.State != "unknown" || c.Healthy || !strings.Contains(c.Detail, "reading peers: reading wireguard device wg0: wgctrl: device wg0: no such device") {
			t.Errorf("check %+v, want unknown, unhealthy, with the read error", c)
		}
		if hl := h.m.Health(); !hl.Degraded || !strings.Contains(hl.Detail, "no such device") {
			t.Errorf("health %+v, want degraded with the read error (what /readyz names)", hl)
		}
		// Readable again: the state machine goes on from where it held.
		w.set(func(w *tunnelWorld) { w.readErr = nil })
		h.at(61 * tsec)
		if c := h.peer(0); c.State == "unknown" || !c.Healthy && c.State == "ok" {
			t.Errorf("check %+v after the device answers again, want the state machine's own", c)
		}
	})
}

func TestTunnelMonitorDoesNotDisruptForAPeerWithoutEndpoint(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newTunnelWorld(1, 20*tsec)
		// A hub's peer that never connected: only it can start a handshake,
		// and nothing shows a path to it works.
		w.wg.UpdatePeer("wg0", tunnelFakeKey(0), func(p *wgtypes.Peer) { p.Endpoint = nil })
		h := startTunnelMonitor(t, w, tunnelTestConfig(), tunnelTestPolicy(), false)
		defer h.stop()

		h.at(10*tsec + tsec/2)
		w.set(func(w *tunnelWorld) { w.dark, w.fixedBy = true, "bounce" })
		h.at(100 * tsec)
		h.wantChanges("after 90 s dark")
		h.wantEvents("after 90 s dark",
			"13s incident "+tunnelPeer0+" opened",
			"13s action wg0 reassert unchanged",
			"13s held "+tunnelPeer0+" path-unknown")
		if c := h.peer(0); !strings.Contains(c.Detail, "the peer has no endpoint") {
			t.Errorf("check %+v does not say why it waits", c)
		}
	})
}

func TestTunnelMonitorSkipsTheHandshakeForAPeerWithoutEndpoint(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newTunnelWorld(1, 20*tsec)
		// A hub's peer that never connected: only it can start a handshake.
		// The host_check shows the node's own path works.
		w.wg.UpdatePeer("wg0", tunnelFakeKey(0), func(p *wgtypes.Peer) { p.Endpoint = nil })
		tun := tunnelTestConfig()
		tun.HostCheck = "tcp://198.51.100.1:443"
		h := startTunnelMonitor(t, w, tun, tunnelTestPolicy(), false)
		defer h.stop()

		h.at(10*tsec + tsec/2)
		w.set(func(w *tunnelWorld) { w.dark, w.fixedBy = true, "bounce" })
		h.at(14*tsec + tsec/2)
		// The handshake does not apply: no budget, no cooldown, no verify wait.
		h.wantChanges("after the third miss", bounceWG0...)
		h.wantEvents("after recovery",
			"13s incident "+tunnelPeer0+" opened",
			"13s action wg0 reassert unchanged",
			"13s action "+tunnelPeer0+" handshake skipped",
			"13s action wg0 bounce changed",
			"14s recovered "+tunnelPeer0+" ok")
	})
}

func TestTunnelMonitorCheckObservesOnceAndChangesNothing(t *testing.T) {
	w := newTunnelWorld(3, 20*tsec)
	w.wg.UpdatePeer("wg0", tunnelFakeKey(1), func(p *wgtypes.Peer) { p.LastHandshakeTime = time.Now().Add(-300 * tsec) })
	w.wg.UpdatePeer("wg0", tunnelFakeKey(2), func(p *wgtypes.Peer) { p.PersistentKeepaliveInterval = 0 })
	w.noTraffic, w.dark = true, true
	ev := &tunnelEventLog{}
	m := New(Config{Tunnel: tunnelTestConfig(), Policy: tunnelTestPolicy(), OS: w.os(), Clock: clock.New(w.clock), Emit: ev.add})

	var got []string
	for _, c := range m.Check(context.Background()) {
		got = append(got, fmt.Sprintf("%s %s %s healthy=%v: %s probe=%v", c.Kind, c.Target, c.State, c.Healthy, c.Detail, peerProbe(c)))
	}
	want := []string{
		"peer " + tunnelPeer0 + " suspect healthy=false: probe missed: timeout probe=miss: timeout",
		"peer " + tunnelFakeID("wg0", tunnelFakeKey(1)) + " down healthy=false: handshake age 5m0s over stale_after 3m30s probe=",
		"peer " + tunnelFakeID("wg0", tunnelFakeKey(2)) + " ok healthy=true: keepalive 0s, configured 20s probe=",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Check (-want +got):\n%s", diff)
	}
	if changes := w.Changes(); len(changes) != 0 {
		t.Errorf("Check changed the world: %v", changes)
	}
	if evs := ev.lines(); len(evs) != 0 {
		t.Errorf("Check emitted events: %v", evs)
	}
}

func TestTunnelMonitorConfirmsTheFirstMissAfterANudge(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		// The field failure at start: the uplink corrupted every handshake, so
		// the peer never had a session.
		w := newTunnelWorld(1, 20*tsec)
		w.wg.UpdatePeer("wg0", tunnelFakeKey(0), func(p *wgtypes.Peer) { p.LastHandshakeTime = time.Time{} })
		w.dark, w.fixedBy = true, "handshake"
		h := startTunnelMonitor(t, w, tunnelTestConfig(), tunnelTestPolicy(), false)
		defer h.stop()

		h.at(tsec / 2) // one miss so far: not confirmed
		h.wantChanges("before the nudge")
		h.m.Nudge("uplink offload fixed")
		h.at(3 * tsec / 4)
		h.wantChanges("a quarter second after the nudge: its miss confirmed at once", handshakePeer0)
		h.at(2 * tsec)
		h.wantState("a probe after the forced handshake", 0, peerOK)
	})
}

func TestTunnelMonitorKeepsAHealthySessionThroughANudge(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newTunnelWorld(1, 20*tsec)
		h := startTunnelMonitor(t, w, tunnelTestConfig(), tunnelTestPolicy(), false)
		defer h.stop()

		h.at(10*tsec + tsec/2)
		h.m.Nudge("uplink offload fixed")
		h.at(12 * tsec)
		h.wantChanges("after a nudge with the probe answering")
		h.wantState("after a nudge with the probe answering", 0, peerOK)

		// A re-plug: the probe sent while the new link came up is lost, but
		// the session (handshake seconds ago) survived: the usual streak.
		w.set(func(w *tunnelWorld) { w.dark = true })
		h.m.Nudge("uplink offload fixed")
		h.at(12*tsec + tsec/4)
		h.wantChanges("a miss right after a nudge, with a live session")
	})
}

func TestTunnelMonitorReassertFixesTheOffloadAndCountsAsARung(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newTunnelWorld(1, 20*tsec)
		w.offloadOn, w.dark, w.fixedBy = true, true, "reassert"
		h := startTunnelMonitor(t, w, tunnelTestConfig(), tunnelTestPolicy(), false)
		defer h.stop()
		h.at(4 * tsec)
		h.wantChanges("after three misses", "offload uplink0 off")
		h.wantState("after the reassert", 0, peerOK)
	})
}

func peerProbe(c wire.Check) string {
	if c.Peer == nil {
		return ""
	}
	return c.Peer.Probe
}
