package tunnel_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/edgeheal/edgeheal/agent/core"
	"github.com/edgeheal/edgeheal/agent/tunnel"
	"github.com/edgeheal/edgeheal/configs"
	"github.com/edgeheal/edgeheal/internal/testsupport"
	"github.com/edgeheal/edgeheal/internal/testsupport/agentlab"
	"github.com/edgeheal/edgeheal/internal/testsupport/labtest"
	"github.com/edgeheal/edgeheal/lab"
)

// TestLabTunnelMonitorDoesNoHarmDuringAModemBlackhole runs the monitor with
// the defaults (probe 1 s × 3, resume_grace 8 s) in the full lab's edge
// namespace. A blackhole of the whole uplink at the modem, 20 s (the
// session survives it) and 190 s (longer than a session's 180 s), with the
// host path to the cloud's endpoint learnt in the background or unknown
// (the cloud drops ICMP): the dark tunnel is reported and nothing
// disruptive touches it during the block, because WireGuard's session
// survives a short one and resumes at once when the path returns
// (docs/lab.md), sooner than any forced handshake could. A
// hub that lost its sessions while the path works is the case a forced
// handshake is for: that one the monitor repairs in seconds.
func TestLabTunnelMonitorDoesNoHarmDuringAModemBlackhole(t *testing.T) {
	for _, tc := range []struct {
		name    string
		icmpOff bool // the cloud drops ICMP echo: the host path cannot be learnt
		hole    time.Duration
		held    string // the event kind that reports the wait
	}{
		{"20s-learnt", false, 20 * time.Second, "uplink-outage"},
		{"20s-unknown", true, 20 * time.Second, "held"},
		{"190s-learnt", false, 190 * time.Second, "uplink-outage"},
		{"190s-unknown", true, 190 * time.Second, "held"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			l, _, evs := startBlackholeLab(t, tc.icmpOff)
			darkAt := time.Now()
			if err := l.Blackhole(tc.hole); err != nil {
				t.Fatal(err)
			}
			back := darkAt.Add(tc.hole)
			after := func(kind string) func(core.Event) bool {
				return func(ev core.Event) bool { return ev.Kind == kind && !ev.Time.Before(darkAt) }
			}
			inc := evs.wait(t, 6*time.Second, "incident", after("incident"))
			held := evs.wait(t, 6*time.Second, tc.held, after(tc.held))
			rec := evs.wait(t, tc.hole+20*time.Second, "recovered", after("recovered"))
			t.Logf("%s blackhole: detected after %s, held as %q; peer healthy %s after the path returned (%s); telemetry after the path returned: %s",
				tc.hole, inc.Time.Sub(darkAt).Round(time.Millisecond), held.Summary,
				rec.Time.Sub(back).Round(time.Millisecond), rec.Summary, telemetryBack(l, back))
			// A 20 s block leaves the session valid: it resumes by itself. After
			// 190 s it has expired, and a handshake forced as soon as the path
			// answers again discards nothing and beats WireGuard's next retry.
			if tc.hole < 180*time.Second && !strings.Contains(rec.Summary, "recovered by itself") {
				t.Errorf("recovered %q, want by itself", rec.Summary)
			}
			for _, ev := range evs.All() {
				if ev.Kind == "action" && ev.Action != "keepalive" && ev.Action != "reassert" && !ev.Time.Before(darkAt) && ev.Time.Before(back) {
					t.Errorf("a disruptive action during an uplink outage: %+v", ev)
				}
			}
		})
	}
	t.Run("hub-restart", func(t *testing.T) {
		t.Parallel()
		l, _, evs := startBlackholeLab(t, false)
		lostAt := time.Now()
		if err := l.RestartCloudWireGuard(); err != nil {
			t.Fatal(err)
		}
		after := func(kind string) func(core.Event) bool {
			return func(ev core.Event) bool { return ev.Kind == kind && !ev.Time.Before(lostAt) }
		}
		act := evs.wait(t, 10*time.Second, "a forced handshake", func(ev core.Event) bool {
			return after("action")(ev) && ev.Action == "handshake"
		})
		rec := evs.wait(t, 20*time.Second, "recovered", after("recovered"))
		t.Logf("hub restart: handshake forced %s after, peer healthy %s after (%s); telemetry: %s",
			act.Time.Sub(lostAt).Round(time.Millisecond), rec.Time.Sub(lostAt).Round(time.Millisecond), rec.Summary, telemetryBack(l, lostAt))
		if !strings.Contains(rec.Summary, "healed by handshake") {
			t.Errorf("recovered %q, want healed by the forced handshake (WireGuard alone takes 12-13 s)", rec.Summary)
		}
	})
}

// startBlackholeLab starts a lab with a working tunnel and the monitor
// with the default policy in its edge namespace; with icmpOff the cloud
// drops ICMP echo to its public address. It returns once the monitor has
// had the time to learn the host path.
func startBlackholeLab(t *testing.T, icmpOff bool) (*lab.Lab, *tunnel.Monitor, *tunnelLabEvents) {
	t.Helper()
	l := labtest.New(t, lab.Options{OffloadOff: true, Keepalive: 20 * time.Second})
	if icmpOff {
		for _, args := range [][]string{
			{"add", "table", "inet", "edgeheal_test"},
			{"add", "chain", "inet", "edgeheal_test", "in", "{ type filter hook input priority 0 ; }"},
			// Only to the public address: the tunnel's own probe is ICMP too.
			{"add", "rule", "inet", "edgeheal_test", "in", "ip", "daddr", l.CloudPublicAddr().String(), "icmp", "type", "echo-request", "drop"},
		} {
			if out, err := l.Exec(context.Background(), lab.Cloud, "nft", args...); err != nil {
				t.Fatalf("dropping ICMP in the cloud: %v: %s", err, out)
			}
		}
	}
	testsupport.WaitFor(t, 10*time.Second, "telemetry through the fresh lab", func() bool { return l.Stats().Received > 0 })
	tun := configs.Tunnel{
		Interface:           l.EdgeWG(),
		Peers:               configs.PeerSelector{All: true},
		PersistentKeepalive: configs.Duration(20 * time.Second),
		StaleAfter:          configs.Duration(210 * time.Second),
		RxSilence:           configs.Duration(75 * time.Second),
		Probe: configs.Probe{Target: "icmp://" + l.CloudTunnelAddr().String(), Interval: configs.Duration(time.Second),
			Timeout: configs.Duration(time.Second), Misses: 3},
		Heal: configs.HealRungs,
	}
	pol := configs.Policy{Cooldown: configs.Duration(30 * time.Second), MaxDisruptive: 3,
		Window: configs.Duration(time.Hour), VerifyTimeout: configs.Duration(15 * time.Second), ResumeGrace: configs.Duration(8 * time.Second)}
	m, evs := startTunnelLab(t, tun, pol, agentlab.LabOS(t, l, lab.Edge))
	waitTunnelLabOK(t, m)
	time.Sleep(3 * time.Second) // the learner's first pass runs 1.5 s after the start
	return l, m, evs
}

// telemetryBack says when telemetry (MQTT from the pod through the tunnel)
// flowed again after from: logged, not asserted, since after a long block
// it also depends on TCP's retransmission backoff.
func telemetryBack(l *lab.Lab, from time.Time) string {
	for deadline := time.Now().Add(15 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if st := l.StatsSince(from); st.Received > 0 {
			if st.FirstRecovered.IsZero() {
				return "flowing again"
			}
			return st.FirstRecovered.Sub(from).Round(time.Millisecond).String()
		}
	}
	return "not back within 15 s"
}
