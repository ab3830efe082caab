package probes

import (
	"fmt"
	"net"
	"time"

	"golang.zx2c4.com/wireguard/wgctrl"
	"golang.zx2c4.com/wireguard/wgctrl/wgtypes"
)

// PeerStats is one WireGuard peer's observation. It carries no key other
// than the peer's public key (never the device's private key or a PSK).
type PeerStats struct {
	PublicKey     wgtypes.Key
	Endpoint      *net.UDPAddr // nil when the peer has none yet
	LastHandshake time.Time    // zero when the peer never completed one (or was re-added)
	RxBytes       int64
	TxBytes       int64
	Keepalive     time.Duration // 0 when off
	AllowedIPs    []net.IPNet
}

// WireGuardReader is the read-only part of *wgctrl.Client that probes uses.
type WireGuardReader interface {
	Device(name string) (*wgtypes.Device, error)
}

var _ WireGuardReader = (*wgctrl.Client)(nil)

// ReadPeers returns every peer of iface, in the device's order, from one
// Device call. The slices of the device are reused, not copied, and the
// result is allocated once, so a hub with thousands of peers costs one
// wgctrl round trip and one allocation beyond it. A missing interface
// matches os.ErrNotExist.
func ReadPeers(wg WireGuardReader, iface string) ([]PeerStats, error) {
	ps, _, err := ReadDevice(wg, iface)
	return ps, err
}

// ReadDevice is ReadPeers and the device's listen port, from the same
// Device call.
func ReadDevice(wg WireGuardReader, iface string) ([]PeerStats, int, error) {
	dev, err := wg.Device(iface)
	if err != nil {
		return nil, 0, fmt.Errorf("reading wireguard device %s: %w", iface, err)
	}
	out := make([]PeerStats, len(dev.Peers))
	for i := range dev.Peers {
		p := &dev.Peers[i]
		out[i] = PeerStats{
			PublicKey:     p.PublicKey,
			Endpoint:      p.Endpoint,
			LastHandshake: p.LastHandshakeTime,
			RxBytes:       p.ReceiveBytes,
			TxBytes:       p.TransmitBytes,
			Keepalive:     p.PersistentKeepaliveInterval,
			AllowedIPs:    p.AllowedIPs,
		}
	}
	return out, dev.ListenPort, nil
}
