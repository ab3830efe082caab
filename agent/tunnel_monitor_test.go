package agent

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

	"github.com/edgeheal/edgeheal/configs"
)

// The loop tests run the real TunnelMonitor.Run against tunnelFakeOS inside
// a synctest bubble: time is fake, starts at the bubble's epoch and only
// moves when every goroutine is blocked, so "at 13 s" is exact. Rounds run
// at whole seconds (probe interval 1 s); the test acts at half seconds so
// that no test step races a round.

type tunnelEventLog struct {
	mu  sync.Mutex
	t0  time.Time
	evs []Event
}

func (l *tunnelEventLog) add(ev Event) {
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

func (l *tunnelEventLog) all() []Event {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]Event(nil), l.evs...)
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
	}
}

// tunnelHarness runs a monitor in the current synctest bubble.
type tunnelHarness struct {
	t    *testing.T
	t0   time.Time
	f    *tunnelFakeOS
	m    *TunnelMonitor
	ev   *tunnelEventLog
	stop func()
}

func startTunnelMonitor(t *testing.T, f *tunnelFakeOS, tuns []configs.Tunnel, pol configs.Policy, dryRun bool) *tunnelHarness {
	t.Helper()
	h := &tunnelHarness{t: t, t0: time.Now(), f: f}
	h.ev = &tunnelEventLog{t0: h.t0}
	log := slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelDebug}))
	h.m = NewTunnelMonitor(tuns, pol, dryRun, f, log, h.ev.add)
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

func (h *tunnelHarness) peer(i int) Check {
	h.t.Helper()
	id := tunnelFakeID("wg0", tunnelFakeKey(i))
	for _, c := range h.m.Checks() {
		if c.Target == id {
			return c
		}
	}
	h.t.Fatalf("no check for %s in %+v", id, h.m.Checks())
	return Check{}
}

func (h *tunnelHarness) wantCalls(when string, want ...string) {
	h.t.Helper()
	if diff := cmp.Diff(want, h.f.Calls()); diff != "" {
		h.t.Errorf("%s: actions (-want +got):\n%s", when, diff)
	}
}

func (h *tunnelHarness) wantEvents(when string, want ...string) {
	h.t.Helper()
	if diff := cmp.Diff(want, h.ev.lines()); diff != "" {
		h.t.Errorf("%s: events (-want +got):\n%s", when, diff)
	}
}

func (h *tunnelHarness) wantState(when string, i int, want PeerPhase) {
	h.t.Helper()
	if got := h.peer(i).State; got != string(want) {
		h.t.Errorf("%s: peer %d state %q, want %q (check %+v)", when, i, got, want, h.peer(i))
	}
}

const tsec = time.Second

var tunnelPeer0 = tunnelFakeID("wg0", tunnelFakeKey(0))

func TestTunnelMonitorConfirmsAStreakThenHealsAndRebaselines(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newTunnelFakeOS("wg0", 1, 20*tsec)
		h := startTunnelMonitor(t, f, []configs.Tunnel{tunnelTestConfig()}, tunnelTestPolicy(), false)
		defer h.stop()

		h.at(10*tsec + tsec/2)
		h.wantState("healthy for 10 s", 0, PeerOK)
		f.set(func(f *tunnelFakeOS) { f.dark["wg0"], f.fixedBy = true, "handshake" })

		h.at(12*tsec + tsec/2)
		h.wantState("after two misses", 0, PeerSuspect)
		h.wantCalls("after two misses: not confirmed, no action")

		h.at(13*tsec + tsec/2)
		h.wantCalls("after the third miss",
			"reassert wg0", // changed nothing: not a fix, the ladder moves on at once
			"handshake "+tunnelPeer0+" keepalive 20s")
		h.wantState("after the forced handshake", 0, PeerHealing)

		h.at(14*tsec + tsec/2)
		h.wantState("after the probe answered again", 0, PeerOK)
		h.wantEvents("after recovery",
			"13s incident "+tunnelPeer0+" opened",
			"13s action wg0 reassert unchanged",
			"13s action "+tunnelPeer0+" handshake changed",
			"14s recovered "+tunnelPeer0+" ok")
		evs := h.ev.all()
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
		h.wantState("long after recovery", 0, PeerOK)
		if n := len(h.ev.lines()); n != 4 {
			t.Errorf("%d events by 400 s, want still 4 (no false alarm after the re-add): %v", n, h.ev.lines())
		}
	})
}

func TestTunnelMonitorNeverActsOnAProbeThatErrored(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newTunnelFakeOS("wg0", 1, 20*tsec)
		h := startTunnelMonitor(t, f, []configs.Tunnel{tunnelTestConfig()}, tunnelTestPolicy(), false)
		defer h.stop()

		h.at(10*tsec + tsec/2)
		f.set(func(f *tunnelFakeOS) {
			f.dark["wg0"], f.fixedBy = true, "handshake"
			f.probeErr = errors.New("icmp socket: operation not permitted")
		})
		h.at(100 * tsec)
		h.wantCalls("after 90 s of probe errors")
		h.wantEvents("after 90 s of probe errors")
		h.wantState("after 90 s of probe errors", 0, PeerOK)
		if got := h.peer(0).Peer.Probe; got != "error: icmp socket: operation not permitted" {
			t.Errorf("check shows probe %v, want the error", got)
		}
	})
}

func TestTunnelMonitorGivesUpWhenTheBudgetIsSpent(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newTunnelFakeOS("wg0", 1, 20*tsec)
		tun := tunnelTestConfig()
		tun.EndpointHost, tun.Unit = "hub.example.net", "wg-quick@wg0.service"
		pol := tunnelTestPolicy()
		pol.MaxDisruptive = 2
		h := startTunnelMonitor(t, f, []configs.Tunnel{tun}, pol, false)
		defer h.stop()

		h.at(10*tsec + tsec/2)
		f.set(func(f *tunnelFakeOS) { f.dark["wg0"] = true }) // nothing fixes it

		h.at(600 * tsec)
		h.wantCalls("after 10 minutes dark",
			"reassert wg0",
			"reresolve "+tunnelPeer0+" hub.example.net", // 13 s: same address, free: the next rung at once
			"handshake "+tunnelPeer0+" keepalive 20s",   // 13 s: budget 1 of 2
			"bounce wg0", // 43 s (cooldown after 13 s): budget 2 of 2
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
		f.set(func(f *tunnelFakeOS) { f.dark["wg0"] = false })
		h.at(601*tsec + tsec/2)
		h.wantState("once the peer answers again", 0, PeerOK)
		if got := h.ev.lines(); got[len(got)-1] != "10m1s recovered "+tunnelPeer0+" ok" {
			t.Errorf("last event %q, want the incident closed at 10m1s", got[len(got)-1])
		}
	})
}

func TestTunnelMonitorDoesNotTouchTheTunnelWhenTheUplinkIsDown(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newTunnelFakeOS("wg0", 1, 20*tsec)
		h := startTunnelMonitor(t, f, []configs.Tunnel{tunnelTestConfig()}, tunnelTestPolicy(), false)
		defer h.stop()

		h.at(10*tsec + tsec/2)
		f.set(func(f *tunnelFakeOS) {
			f.dark["wg0"], f.fixedBy = true, "handshake"
			f.uplink = UplinkStatus{Detail: "no default route"}
		})
		h.at(60*tsec + tsec/2)
		h.wantCalls("during the uplink outage")
		h.wantEvents("during the uplink outage",
			"13s incident "+tunnelPeer0+" opened",
			"13s uplink-outage "+tunnelPeer0+" held") // once, not every round
		if c := h.peer(0); c.State != "down" || !strings.Contains(c.Detail, "uplink outage: no default route") {
			t.Errorf("check %+v, want down and the uplink outage as the reason for waiting", c)
		}

		f.set(func(f *tunnelFakeOS) { f.uplink = UplinkStatus{Up: true} })
		h.at(61*tsec + tsec/2)
		h.wantCalls("one round after the uplink came back: that round's probe was made while it was down")
		h.at(63*tsec + tsec/2)
		h.wantCalls("after the uplink came back and the tunnel stayed dark",
			"reassert wg0",
			"handshake "+tunnelPeer0+" keepalive 20s")
		h.wantState("after the uplink came back", 0, PeerOK)
	})
}

func TestTunnelMonitorLetsASessionResumeByItselfWhenTheUplinkReturns(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newTunnelFakeOS("wg0", 1, 20*tsec)
		h := startTunnelMonitor(t, f, []configs.Tunnel{tunnelTestConfig()}, tunnelTestPolicy(), false)
		defer h.stop()

		h.at(10*tsec + tsec/2)
		f.set(func(f *tunnelFakeOS) {
			f.dark["wg0"], f.uplink = true, UplinkStatus{Detail: "host path to 192.0.2.1:51820: timeout"}
		})
		h.at(30*tsec + tsec/2)
		// The modem passes again: the host path answers at once, the 31 s
		// round's probe still misses (it raced the return), and WireGuard's
		// session resumes by itself before the next one.
		f.set(func(f *tunnelFakeOS) { f.uplink = UplinkStatus{Up: true} })
		h.at(31*tsec + tsec/2)
		f.set(func(f *tunnelFakeOS) { f.dark["wg0"] = false })
		h.at(40 * tsec)
		h.wantCalls("after a short blackhole")
		h.wantEvents("after a short blackhole",
			"13s incident "+tunnelPeer0+" opened",
			"13s uplink-outage "+tunnelPeer0+" held",
			"32s recovered "+tunnelPeer0+" ok")
	})
}

func TestTunnelMonitorBlamesAClockThatSteppedBackInsteadOfForcingHandshakes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newTunnelFakeOS("wg0", 1, 20*tsec)
		h := startTunnelMonitor(t, f, []configs.Tunnel{tunnelTestConfig()}, tunnelTestPolicy(), false)
		defer h.stop()

		h.at(10*tsec + tsec/2)
		f.set(func(f *tunnelFakeOS) {
			f.dark["wg0"], f.fixedBy = true, "handshake"
			f.clock = ClockStatus{Synchronized: true, SteppedBack: true, Detail: "wall clock 42s behind"}
		})
		h.at(60*tsec + tsec/2)
		h.wantCalls("while the clock is stepped back", "reassert wg0") // free, and changes nothing
		h.wantEvents("while the clock is stepped back",
			"13s incident "+tunnelPeer0+" opened",
			"13s action wg0 reassert unchanged",
			"13s clock "+tunnelPeer0+" held")
		if c := h.peer(0); !strings.Contains(c.Detail, "clock stepped back (wall clock 42s behind)") {
			t.Errorf("peer check %+v does not name the clock as the likely cause", c)
		}
		var clock *Check
		for _, c := range h.m.Checks() {
			if c.Kind == "clock" {
				clock = &c
			}
		}
		if clock == nil || clock.Healthy {
			t.Errorf("clock check %+v, want one, unhealthy", clock)
		}

		f.set(func(f *tunnelFakeOS) { f.clock = ClockStatus{Synchronized: true} })
		h.at(62*tsec + tsec/2)
		h.wantCalls("after the clock recovered", "reassert wg0", "handshake "+tunnelPeer0+" keepalive 20s")
		h.wantState("after the clock recovered", 0, PeerOK)
	})
}

func TestTunnelMonitorForcesAHandshakeWithAnUnsynchronisedClockButDoesNotBounce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newTunnelFakeOS("wg0", 1, 20*tsec)
		h := startTunnelMonitor(t, f, []configs.Tunnel{tunnelTestConfig()}, tunnelTestPolicy(), false)
		defer h.stop()

		h.at(10*tsec + tsec/2)
		f.set(func(f *tunnelFakeOS) {
			f.dark["wg0"], f.fixedBy = true, "bounce"
			f.clock = ClockStatus{Detail: "STA_UNSYNC"}
		})
		h.at(80*tsec + tsec/2)
		h.wantCalls("while the clock is unsynchronised",
			"reassert wg0",
			"handshake "+tunnelPeer0+" keepalive 20s") // the bounce after it is held
		var clock *Check
		for _, c := range h.m.Checks() {
			if c.Kind == "clock" {
				clock = &c
			}
		}
		if clock == nil || !clock.Healthy || clock.State != "unsynchronised" {
			t.Errorf("clock check %+v, want a healthy warning in state unsynchronised", clock)
		}
		if c := h.peer(0); !strings.Contains(c.Detail, "clock not synchronised (STA_UNSYNC)") {
			t.Errorf("peer check %+v does not name the clock as the likely cause of the held bounce", c)
		}
	})
}

func TestTunnelMonitorDryRunChangesNothingAndSaysWhatItWouldDo(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newTunnelFakeOS("wg0", 1, 0) // keepalive drifted to 0
		h := startTunnelMonitor(t, f, []configs.Tunnel{tunnelTestConfig()}, tunnelTestPolicy(), true)
		defer h.stop()

		h.at(10*tsec + tsec/2)
		f.set(func(f *tunnelFakeOS) { f.dark["wg0"], f.fixedBy = true, "handshake" })
		h.at(80 * tsec)
		h.wantCalls("after 70 s dark in dry run",
			"keepalive wg0 20s dry-run",                       // 0 s, then after the cooldown, doubling
			"reassert wg0 dry-run",                            // 13 s: would set the keepalive
			"handshake "+tunnelPeer0+" keepalive 20s dry-run", // 28 s: reassert not verified
			"keepalive wg0 20s dry-run",                       // 30 s
			"bounce wg0 dry-run",                              // 58 s: reresolve and restart-unit not configured; cooldown after 28 s
			// the next keepalive report is due at 90 s
		)
		f.set(func(f *tunnelFakeOS) {
			if ka := f.peers["wg0"][0].Keepalive; ka != 0 {
				t.Errorf("keepalive is %s after a dry run, want untouched 0", ka)
			}
			if !f.dark["wg0"] {
				t.Errorf("the fault was fixed in a dry run")
			}
		})
		for _, ev := range h.ev.all() {
			if ev.Kind != "action" {
				continue
			}
			if ev.Result != "dry-run" || !strings.HasPrefix(ev.Summary, "dry run: would "+ev.Action) {
				t.Errorf("action event %q %q: %q, want a dry-run saying what it would do", ev.Action, ev.Result, ev.Summary)
			}
		}
		want := "dry run: would handshake on " + tunnelPeer0 + " (peer removed and added back)"
		found := false
		for _, ev := range h.ev.all() {
			found = found || ev.Summary == want
		}
		if !found {
			t.Errorf("no event says %q: %v", want, h.ev.all())
		}
		if got := h.ev.lines(); got[len(got)-1] != "1m13s gave-up "+tunnelPeer0+" degraded" {
			t.Errorf("last event %q, want gave up at 1m13s once every configured rung was tried", got[len(got)-1])
		}
	})
}

func TestTunnelMonitorRestoresAKeepaliveResetToZeroWithinOneRound(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newTunnelFakeOS("wg0", 1, 20*tsec)
		h := startTunnelMonitor(t, f, []configs.Tunnel{tunnelTestConfig()}, tunnelTestPolicy(), false)
		defer h.stop()

		h.at(10*tsec + tsec/2)
		h.wantCalls("with the keepalive as configured")
		f.set(func(f *tunnelFakeOS) { f.peers["wg0"][0].Keepalive = 0 }) // Flannel's resync rewrote the peer
		h.at(11*tsec + tsec/2)
		h.wantCalls("one round after the reset", "keepalive wg0 20s")
		f.set(func(f *tunnelFakeOS) {
			if ka := f.peers["wg0"][0].Keepalive; ka != 20*tsec {
				t.Errorf("keepalive %s, want 20s again", ka)
			}
		})
		h.wantEvents("one round after the reset", "11s action wg0 keepalive changed")
	})
}

func TestTunnelMonitorActsAtOnceOnAWorkloadSuspicion(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newTunnelFakeOS("wg0", 1, 20*tsec)
		h := startTunnelMonitor(t, f, []configs.Tunnel{tunnelTestConfig()}, tunnelTestPolicy(), false)
		defer h.stop()

		h.at(10*tsec + tsec/2)
		h.m.Suspect("wg0", "collector: pod path dark, host path fine")
		h.m.Suspect("nope0", "not a configured tunnel")
		synctest.Wait()
		h.wantCalls("right after the suspicion", "reassert wg0", "handshake "+tunnelPeer0+" keepalive 20s")
		h.at(11*tsec + tsec/2)
		h.wantEvents("after the suspicion",
			"10.5s incident "+tunnelPeer0+" opened",
			"10.5s action wg0 reassert unchanged",
			"10.5s action "+tunnelPeer0+" handshake changed",
			"11s recovered "+tunnelPeer0+" ok")
		if got := h.ev.all()[0].Summary; !strings.Contains(got, "workload: collector: pod path dark, host path fine") {
			t.Errorf("incident summary %q does not carry the workload's reason", got)
		}
	})
}

func TestTunnelMonitorBlamesOnlyThePeerThatCarriesTheProbe(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newTunnelFakeOS("wg0", 3, 20*tsec)
		tun := tunnelTestConfig()
		tun.Probe.Target = "tcp://10.100.1.7:6443" // inside peer 1's 10.100.1.0/24
		h := startTunnelMonitor(t, f, []configs.Tunnel{tun}, tunnelTestPolicy(), false)
		defer h.stop()

		h.at(10*tsec + tsec/2)
		f.set(func(f *tunnelFakeOS) { f.dark["wg0"], f.fixedBy = true, "handshake" })
		h.at(13*tsec + tsec/2)
		peer1 := tunnelFakeID("wg0", tunnelFakeKey(1))
		h.wantCalls("after three misses", "reassert wg0", "handshake "+peer1+" keepalive 20s")
		h.wantState("peer 0", 0, PeerOK)
		h.wantState("peer 2", 2, PeerOK)
		if got := h.peer(0).Peer.Probe; got != "" {
			t.Errorf("peer 0 shows probe %v, want none (the probe goes through peer 1)", got)
		}
		peers := 0
		for _, c := range h.m.Checks() {
			if c.Kind == "peer" {
				peers++
			}
		}
		if got := peers; got != 3 {
			t.Errorf("%d checks, want one per peer", got)
		}
	})
}

func TestTunnelMonitorHoldsStateWhileThePeersCannotBeRead(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newTunnelFakeOS("wg0", 1, 20*tsec)
		h := startTunnelMonitor(t, f, []configs.Tunnel{tunnelTestConfig()}, tunnelTestPolicy(), false)
		defer h.stop()

		h.at(10*tsec + tsec/2)
		f.set(func(f *tunnelFakeOS) {
			f.dark["wg0"] = true
			f.readErr = errors.New("wgctrl: device wg0: no such device")
		})
		h.at(60 * tsec)
		h.wantCalls("while the device is unreadable")
		h.wantEvents("while the device is unreadable")
		if c := h.peer(0); c.State != "ok" || !strings.Contains(c.Detail, "reading peers: wgctrl: device wg0: no such device") {
			t.Errorf("check %+v, want its last state and the read error", c)
		}
	})
}

func TestTunnelMonitorSkipsTheHandshakeForAPeerWithoutEndpoint(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newTunnelFakeOS("wg0", 1, 20*tsec)
		f.peers["wg0"][0].Endpoint = nil // a hub's peer that never connected: only it can start a handshake
		h := startTunnelMonitor(t, f, []configs.Tunnel{tunnelTestConfig()}, tunnelTestPolicy(), false)
		defer h.stop()

		h.at(10*tsec + tsec/2)
		f.set(func(f *tunnelFakeOS) { f.dark["wg0"], f.fixedBy = true, "bounce" })
		h.at(14*tsec + tsec/2)
		h.wantCalls("after the third miss",
			"reassert wg0",
			"handshake "+tunnelPeer0+" keepalive 20s", // does not apply: no budget, no cooldown, no verify wait
			"bounce wg0")
		h.wantEvents("after recovery",
			"13s incident "+tunnelPeer0+" opened",
			"13s action wg0 reassert unchanged",
			"13s action "+tunnelPeer0+" handshake skipped",
			"13s action wg0 bounce changed",
			"14s recovered "+tunnelPeer0+" ok")
	})
}

func TestTunnelMonitorCheckObservesOnceAndChangesNothing(t *testing.T) {
	f := newTunnelFakeOS("wg0", 3, 20*tsec)
	f.peers["wg0"][1].LastHandshake = time.Now().Add(-300 * tsec)
	f.peers["wg0"][2].Keepalive = 0
	f.dark["wg0"] = true
	f.clock = ClockStatus{Detail: "STA_UNSYNC"}
	ev := &tunnelEventLog{}
	m := NewTunnelMonitor([]configs.Tunnel{tunnelTestConfig()}, tunnelTestPolicy(), false, f, nil, ev.add)

	var got []string
	for _, c := range m.Check(context.Background()) {
		got = append(got, fmt.Sprintf("%s %s %s healthy=%v: %s probe=%v", c.Kind, c.Target, c.State, c.Healthy, c.Detail, peerProbe(c)))
	}
	want := []string{
		"peer " + tunnelPeer0 + " suspect healthy=false: probe missed: timeout probe=miss: timeout",
		"peer " + tunnelFakeID("wg0", tunnelFakeKey(1)) + " down healthy=false: handshake age 5m0s over stale_after 3m30s probe=",
		"peer " + tunnelFakeID("wg0", tunnelFakeKey(2)) + " ok healthy=true: keepalive 0s, configured 20s probe=",
		"clock system unsynchronised healthy=true: clock not synchronised (STA_UNSYNC): if peers drop our handshakes this is the likely cause; not bouncing the tunnel probe=",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Check (-want +got):\n%s", diff)
	}
	if calls := f.Calls(); len(calls) != 0 {
		t.Errorf("Check acted: %v", calls)
	}
	if evs := ev.lines(); len(evs) != 0 {
		t.Errorf("Check emitted events: %v", evs)
	}
}

func TestTunnelMonitorConfirmsTheFirstMissAfterANudge(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		// The field failure at start: the uplink corrupted every handshake, so
		// the peer never had a session.
		f := newTunnelFakeOS("wg0", 1, 20*tsec)
		f.peers["wg0"][0].LastHandshake = time.Time{}
		f.dark["wg0"], f.fixedBy = true, "handshake"
		h := startTunnelMonitor(t, f, []configs.Tunnel{tunnelTestConfig()}, tunnelTestPolicy(), false)
		defer h.stop()

		h.at(tsec / 2) // one miss so far: not confirmed
		h.wantCalls("before the nudge")
		h.m.Nudge("uplink offload fixed")
		h.at(3 * tsec / 4)
		h.wantCalls("a quarter second after the nudge: its miss confirmed at once",
			"reassert wg0",
			"handshake "+tunnelPeer0+" keepalive 20s")
		h.at(2 * tsec)
		h.wantState("a probe after the forced handshake", 0, PeerOK)
	})
}

func TestTunnelMonitorKeepsAHealthySessionThroughANudge(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newTunnelFakeOS("wg0", 1, 20*tsec)
		h := startTunnelMonitor(t, f, []configs.Tunnel{tunnelTestConfig()}, tunnelTestPolicy(), false)
		defer h.stop()

		h.at(10*tsec + tsec/2)
		h.m.Nudge("uplink offload fixed")
		h.at(12 * tsec)
		h.wantCalls("after a nudge with the probe answering")
		h.wantState("after a nudge with the probe answering", 0, PeerOK)

		// A re-plug: the probe sent while the new link came up is lost, but
		// the session (handshake seconds ago) survived: the usual streak.
		f.set(func(f *tunnelFakeOS) { f.dark["wg0"] = true })
		h.m.Nudge("uplink offload fixed")
		h.at(12*tsec + tsec/4)
		h.wantCalls("a miss right after a nudge, with a live session")
	})
}

func peerProbe(c Check) string {
	if c.Peer == nil {
		return ""
	}
	return c.Peer.Probe
}
