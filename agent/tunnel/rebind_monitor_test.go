package tunnel

import (
	"strings"
	"testing"
	"testing/synctest"

	"golang.zx2c4.com/wireguard/wgctrl/wgtypes"

	"github.com/edgeheal/edgeheal/agent/core"
	"github.com/edgeheal/edgeheal/configs"
)

// A NAT mapping stuck on the tunnel's source port, in the fake: the tunnel
// is dark until the listen port changes, while the host path answers and
// every read shows tx growing and rx flat. The forced handshake gets no
// answer; 2 s after it the monitor rebinds (without the handshake's
// cooldown) and the tunnel is back. Then someone (Flannel) sets the old
// port again: one listen-port event, and the port is left alone.
func TestTunnelMonitorRebindsWhenAForcedHandshakeGetsNoAnswer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newTunnelWorld(1, 20*tsec)
		flannel := 51820
		if err := w.wg.ConfigureDevice("wg0", wgtypes.Config{ListenPort: &flannel}); err != nil {
			t.Fatal(err)
		}
		tun := tunnelTestConfig()
		tun.RebindPorts = configs.DefaultRebindPorts
		h := startTunnelMonitor(t, w, tun, tunnelTestPolicy(), false)
		defer h.stop()

		h.at(10*tsec + tsec/2)
		w.set(func(w *tunnelWorld) { w.dark, w.fixedBy = true, configs.HealRebind })

		h.at(14*tsec + tsec/2)
		h.wantChanges("a second after the forced handshake", handshakePeer0)
		h.wantState("a second after the forced handshake: still being verified", 0, peerHealing)

		h.at(15*tsec + tsec/2)
		h.wantChanges("2 s after the forced handshake", handshakePeer0, "listen-port wg0 51830", handshakePeer0)

		h.at(16*tsec + tsec/2)
		h.wantState("after the rebind", 0, peerOK)
		h.wantEvents("after the rebind",
			"13s incident "+tunnelPeer0+" opened",
			"13s action wg0 reassert unchanged",
			"13s action "+tunnelPeer0+" handshake changed",
			"15s action "+tunnelPeer0+" rebind changed",
			"16s recovered "+tunnelPeer0+" ok")
		var rebind core.Event
		for _, ev := range h.ev.All() {
			if ev.Action == configs.HealRebind {
				rebind = ev
			}
		}
		if got := rebind.Evidence["stuck_mapping"]; got != "udp local port 51820 → 203.0.113.1:51820" {
			t.Errorf("stuck_mapping = %v", got)
		}
		if got := rebind.Evidence["listen_port_after"]; got != 51830 {
			t.Errorf("listen_port_after = %v; want 51830", got)
		}
		if got := rebind.Evidence["budget_left"]; got != 1 {
			t.Errorf("budget_left = %v; want 1 (handshake and rebind spent)", got)
		}

		// Flannel adds a peer and sets its port again.
		if err := w.wg.ConfigureDevice("wg0", wgtypes.Config{ListenPort: &flannel}); err != nil {
			t.Fatal(err)
		}
		h.at(120 * tsec)
		lines := h.ev.lines()
		if len(lines) != 6 || !strings.HasPrefix(lines[5], "17s listen-port wg0 replaced") {
			t.Errorf("events after Flannel set 51820 again: %v; want one listen-port replaced at 17 s", lines)
		}
		h.wantChanges("after Flannel set its port again: left alone", handshakePeer0, "listen-port wg0 51830", handshakePeer0)
	})
}

// The same darkness, but the host path is silent too: an outage, not a
// stuck mapping. The forced handshake waits for the path (held), and
// rebind never runs.
func TestTunnelMonitorDoesNotRebindDuringAnOutage(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newTunnelWorld(1, 20*tsec)
		tun := tunnelTestConfig()
		tun.RebindPorts = configs.DefaultRebindPorts
		h := startTunnelMonitor(t, w, tun, tunnelTestPolicy(), false)
		defer h.stop()

		h.at(40*tsec + tsec/2) // the host path has been learnt
		w.set(func(w *tunnelWorld) { w.dark, w.hostDark, w.fixedBy = true, true, configs.HealRebind })
		h.at(100 * tsec)
		for _, c := range h.w.Changes() {
			if strings.HasPrefix(c, "listen-port") || strings.HasPrefix(c, "handshake") {
				t.Errorf("a disruptive change during an outage: %q (all: %v)", c, h.w.Changes())
			}
		}
	})
}
