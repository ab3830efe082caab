package netfix_test

import (
	"context"
	"errors"
	"os"
	"syscall"
	"testing"

	"github.com/google/go-cmp/cmp"
	"golang.zx2c4.com/wireguard/wgctrl/wgtypes"

	"github.com/edgeheal/edgeheal/netfix"
	"github.com/edgeheal/edgeheal/netfix/netfixtest"
)

// flannelHub is hub() listening on Flannel's fixed port.
func flannelHub() *netfixtest.WireGuard {
	wg := hub()
	port := 51820
	if err := wg.ConfigureDevice("wg0", wgtypes.Config{ListenPort: &port}); err != nil {
		panic(err)
	}
	wg.ResetCalls()
	return wg
}

func TestForceRebind(t *testing.T) {
	tests := []struct {
		name       string
		candidates []int
		busy       map[int]bool
		dryRun     bool
		want       netfix.Result
		wantCalls  []string
		wantPort   int
	}{
		{
			name:       "moves to the first candidate and forces a handshake from it",
			candidates: []int{51830, 51831},
			want: netfix.Result{Action: "rebind", Target: "wg0/AQEBAQEB", Changed: true, Changes: []string{
				"wg0: listen port 51820 -> 51830",
				"wg0/AQEBAQEB: removed and re-added (endpoint 192.0.2.1:51820, 2 allowed IPs, keepalive 25s)",
			}},
			wantCalls: []string{
				"Device(wg0)",
				"ConfigureDevice(wg0, listen-port=51830)",
				"Device(wg0)",
				"ConfigureDevice(wg0, remove AQEBAQEB, add AQEBAQEB psk endpoint=192.0.2.1:51820 keepalive=25s allowed=10.0.0.1/32,10.42.0.0/24)",
				"Device(wg0)",
				"Device(wg0)",
			},
			wantPort: 51830,
		},
		{
			name:       "skips the current port and a port another socket holds",
			candidates: []int{51820, 51830, 51831},
			busy:       map[int]bool{51830: true},
			want: netfix.Result{Action: "rebind", Target: "wg0/AQEBAQEB", Changed: true, Changes: []string{
				"wg0: listen port 51820 -> 51831",
				"wg0/AQEBAQEB: removed and re-added (endpoint 192.0.2.1:51820, 2 allowed IPs, keepalive 25s)",
			}},
			wantCalls: []string{
				"Device(wg0)",
				"ConfigureDevice(wg0, listen-port=51830)",
				"ConfigureDevice(wg0, listen-port=51831)",
				"Device(wg0)",
				"ConfigureDevice(wg0, remove AQEBAQEB, add AQEBAQEB psk endpoint=192.0.2.1:51820 keepalive=25s allowed=10.0.0.1/32,10.42.0.0/24)",
				"Device(wg0)",
				"Device(wg0)",
			},
			wantPort: 51831,
		},
		{
			name:       "reports but changes nothing in dry run",
			candidates: []int{51830},
			dryRun:     true,
			want: netfix.Result{Action: "rebind", Target: "wg0/AQEBAQEB", DryRun: true, Changes: []string{
				"wg0: listen port 51820 -> 51830, then a forced handshake with wg0/AQEBAQEB",
			}},
			wantCalls: []string{"Device(wg0)"},
			wantPort:  51820,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			wg := flannelHub()
			wg.BusyPorts = tt.busy
			got, err := netfix.ForceRebind(context.Background(), wg, "wg0", keyA, tt.candidates, 0, tt.dryRun)
			if err != nil {
				t.Fatalf("ForceRebind: %v", err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("Result (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tt.wantCalls, wg.Calls()); diff != "" {
				t.Errorf("calls (-want +got):\n%s", diff)
			}
			d, _ := wg.Device("wg0")
			if d.ListenPort != tt.wantPort {
				t.Errorf("listen port after = %d; want %d", d.ListenPort, tt.wantPort)
			}
		})
	}
}

func TestForceRebindErrors(t *testing.T) {
	ctx := context.Background()
	t.Run("every candidate in use: each refusal is returned and the port stays", func(t *testing.T) {
		wg := flannelHub()
		wg.BusyPorts = map[int]bool{51830: true, 51831: true}
		_, err := netfix.ForceRebind(ctx, wg, "wg0", keyA, []int{51830, 51831}, 0, false)
		if !errors.Is(err, syscall.EADDRINUSE) {
			t.Fatalf("err = %v; want EADDRINUSE", err)
		}
		if d, _ := wg.Device("wg0"); d.ListenPort != 51820 {
			t.Errorf("listen port = %d; want 51820 kept", d.ListenPort)
		}
	})
	t.Run("no candidate but the current port changes nothing", func(t *testing.T) {
		wg := flannelHub()
		if _, err := netfix.ForceRebind(ctx, wg, "wg0", keyA, []int{51820}, 0, false); err == nil {
			t.Fatal("err = nil; want one")
		}
		if diff := cmp.Diff([]string{"Device(wg0)"}, wg.Calls()); diff != "" {
			t.Errorf("calls (-want +got):\n%s", diff)
		}
	})
	t.Run("a missing peer matches os.ErrNotExist and configures nothing", func(t *testing.T) {
		wg := flannelHub()
		_, err := netfix.ForceRebind(ctx, wg, "wg0", fixedKey(7), []int{51830}, 0, false)
		if !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("err = %v; want os.ErrNotExist", err)
		}
		if len(wg.Calls()) != 1 {
			t.Errorf("calls = %v; want only the read", wg.Calls())
		}
	})
	t.Run("a peer without an endpoint is ErrNoEndpoint and keeps the port", func(t *testing.T) {
		wg := flannelHub()
		wg.UpdatePeer("wg0", keyA, func(p *wgtypes.Peer) { p.Endpoint = nil })
		_, err := netfix.ForceRebind(ctx, wg, "wg0", keyA, []int{51830}, 0, false)
		if !errors.Is(err, netfix.ErrNoEndpoint) {
			t.Fatalf("err = %v; want ErrNoEndpoint", err)
		}
		if d, _ := wg.Device("wg0"); d.ListenPort != 51820 {
			t.Errorf("listen port = %d; want 51820 kept", d.ListenPort)
		}
	})
}
