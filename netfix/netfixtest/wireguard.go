package netfixtest

import (
	"fmt"
	"net"
	"os"
	"slices"
	"strings"
	"sync"
	"syscall"

	"golang.zx2c4.com/wireguard/wgctrl/wgtypes"
)

// WireGuard is a fake of the wgctrl client (netfix.WireGuard,
// probes.WireGuardReader). It holds device state, applies ConfigureDevice
// with WireGuard's semantics (UpdateOnly, Remove, ReplacePeers,
// ReplaceAllowedIPs, an allowed IP belongs to one peer only), and logs every
// call. Like the real thing, a peer that is removed and added back starts
// with zero rx/tx counters and no handshake. Device returns deep copies.
// Safe for concurrent use.
type WireGuard struct {
	mu      sync.Mutex
	devices map[string]*wgtypes.Device
	calls   []string

	// DeviceErr and ConfigureErr, when set, are returned by Device and
	// ConfigureDevice (after logging the call, before anything else).
	DeviceErr    error
	ConfigureErr error

	// OnAdd, when set, is called (with the fake locked) for every peer that
	// ConfigureDevice creates, including a removed peer added back. Tests use
	// it to model a working path, e.g. p.LastHandshakeTime = now.
	OnAdd func(iface string, p *wgtypes.Peer)

	// BusyPorts are listen ports another socket holds: ConfigureDevice
	// refuses them as the kernel does (EADDRINUSE), changing nothing.
	BusyPorts map[int]bool
}

// NewWireGuard returns a fake with no devices.
func NewWireGuard() *WireGuard {
	return &WireGuard{devices: make(map[string]*wgtypes.Device)}
}

// AddDevice creates (or replaces) device name with peers. It is not logged.
func (w *WireGuard) AddDevice(name string, peers ...wgtypes.Peer) {
	w.mu.Lock()
	defer w.mu.Unlock()
	d := &wgtypes.Device{Name: name, Type: wgtypes.Userspace}
	for _, p := range peers {
		d.Peers = append(d.Peers, clonePeer(p))
	}
	w.devices[name] = d
}

// RemoveDevice deletes device name (as if the interface went away). It is
// not logged.
func (w *WireGuard) RemoveDevice(name string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	delete(w.devices, name)
}

// UpdatePeer runs f on the stored peer, to model traffic and handshakes
// (counters, LastHandshakeTime) or drift (a keepalive reset by another
// tool). It is not logged and reports whether the peer exists.
func (w *WireGuard) UpdatePeer(iface string, key wgtypes.Key, f func(p *wgtypes.Peer)) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	d := w.devices[iface]
	if d == nil {
		return false
	}
	for i := range d.Peers {
		if d.Peers[i].PublicKey == key {
			f(&d.Peers[i])
			return true
		}
	}
	return false
}

// Peer returns a copy of the stored peer. It is not logged.
func (w *WireGuard) Peer(iface string, key wgtypes.Key) (wgtypes.Peer, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if d := w.devices[iface]; d != nil {
		for i := range d.Peers {
			if d.Peers[i].PublicKey == key {
				return clonePeer(d.Peers[i]), true
			}
		}
	}
	return wgtypes.Peer{}, false
}

// Calls returns the calls made so far, e.g.
// "ConfigureDevice(wg0, remove AAAAAAAA, add AAAAAAAA endpoint=192.0.2.1:51820 keepalive=25s allowed=10.0.0.2/32)".
func (w *WireGuard) Calls() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.calls)
}

// ResetCalls forgets the logged calls.
func (w *WireGuard) ResetCalls() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.calls = nil
}

// Device returns a deep copy of device name, or an error matching
// os.ErrNotExist as wgctrl does.
func (w *WireGuard) Device(name string) (*wgtypes.Device, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.calls = append(w.calls, "Device("+name+")")
	if w.DeviceErr != nil {
		return nil, w.DeviceErr
	}
	d := w.devices[name]
	if d == nil {
		return nil, os.ErrNotExist
	}
	c := *d
	c.Peers = make([]wgtypes.Peer, len(d.Peers))
	for i := range d.Peers {
		c.Peers[i] = clonePeer(d.Peers[i])
	}
	return &c, nil
}

// ConfigureDevice applies cfg to device name in order, as WireGuard does.
func (w *WireGuard) ConfigureDevice(name string, cfg wgtypes.Config) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.calls = append(w.calls, "ConfigureDevice("+name+describeConfig(cfg)+")")
	if w.ConfigureErr != nil {
		return w.ConfigureErr
	}
	d := w.devices[name]
	if d == nil {
		return os.ErrNotExist
	}
	if cfg.PrivateKey != nil {
		d.PrivateKey = *cfg.PrivateKey
		d.PublicKey = cfg.PrivateKey.PublicKey()
	}
	if cfg.ListenPort != nil {
		if w.BusyPorts[*cfg.ListenPort] {
			return fmt.Errorf("listen port %d: %w", *cfg.ListenPort, syscall.EADDRINUSE)
		}
		d.ListenPort = *cfg.ListenPort
	}
	if cfg.FirewallMark != nil {
		d.FirewallMark = *cfg.FirewallMark
	}
	if cfg.ReplacePeers {
		d.Peers = nil
	}
	for _, pc := range cfg.Peers {
		i := slices.IndexFunc(d.Peers, func(p wgtypes.Peer) bool { return p.PublicKey == pc.PublicKey })
		switch {
		case pc.Remove:
			if i >= 0 {
				d.Peers = slices.Delete(d.Peers, i, i+1)
			}
			continue
		case i < 0 && pc.UpdateOnly:
			continue
		case i < 0:
			d.Peers = append(d.Peers, wgtypes.Peer{PublicKey: pc.PublicKey, ProtocolVersion: 1})
			i = len(d.Peers) - 1
			defer w.added(name, pc.PublicKey)
		}
		p := &d.Peers[i]
		if pc.PresharedKey != nil {
			p.PresharedKey = *pc.PresharedKey
		}
		if pc.Endpoint != nil {
			ep := *pc.Endpoint
			ep.IP = slices.Clone(ep.IP)
			p.Endpoint = &ep
		}
		if pc.PersistentKeepaliveInterval != nil {
			p.PersistentKeepaliveInterval = *pc.PersistentKeepaliveInterval
		}
		if pc.ReplaceAllowedIPs {
			p.AllowedIPs = nil
		}
		for _, n := range pc.AllowedIPs {
			// An allowed IP belongs to one peer: claiming it takes it away
			// from any other.
			for j := range d.Peers {
				d.Peers[j].AllowedIPs = slices.DeleteFunc(d.Peers[j].AllowedIPs, func(m net.IPNet) bool { return m.String() == n.String() })
			}
			p.AllowedIPs = append(p.AllowedIPs, cloneIPNet(n))
		}
	}
	return nil
}

// added runs OnAdd on the new peer; deferred so that it sees the peer's
// final configuration. The fake is still locked.
func (w *WireGuard) added(iface string, key wgtypes.Key) {
	if w.OnAdd == nil {
		return
	}
	if d := w.devices[iface]; d != nil {
		for i := range d.Peers {
			if d.Peers[i].PublicKey == key {
				w.OnAdd(iface, &d.Peers[i])
			}
		}
	}
}

func describeConfig(cfg wgtypes.Config) string {
	var b strings.Builder
	if cfg.PrivateKey != nil {
		b.WriteString(", private-key")
	}
	if cfg.ListenPort != nil {
		fmt.Fprintf(&b, ", listen-port=%d", *cfg.ListenPort)
	}
	if cfg.ReplacePeers {
		b.WriteString(", replace-peers")
	}
	for _, pc := range cfg.Peers {
		k := pc.PublicKey.String()[:8]
		switch {
		case pc.Remove:
			b.WriteString(", remove " + k)
			continue
		case pc.UpdateOnly:
			b.WriteString(", update " + k)
		default:
			b.WriteString(", add " + k)
		}
		if pc.PresharedKey != nil {
			b.WriteString(" psk")
		}
		if pc.Endpoint != nil {
			b.WriteString(" endpoint=" + pc.Endpoint.String())
		}
		if pc.PersistentKeepaliveInterval != nil {
			b.WriteString(" keepalive=" + pc.PersistentKeepaliveInterval.String())
		}
		if pc.ReplaceAllowedIPs || len(pc.AllowedIPs) > 0 {
			s := make([]string, len(pc.AllowedIPs))
			for i, n := range pc.AllowedIPs {
				s[i] = n.String()
			}
			b.WriteString(" allowed=" + strings.Join(s, ","))
		}
	}
	return b.String()
}

func clonePeer(p wgtypes.Peer) wgtypes.Peer {
	if p.Endpoint != nil {
		ep := *p.Endpoint
		ep.IP = slices.Clone(ep.IP)
		p.Endpoint = &ep
	}
	if p.AllowedIPs != nil {
		ips := make([]net.IPNet, len(p.AllowedIPs))
		for i, n := range p.AllowedIPs {
			ips[i] = cloneIPNet(n)
		}
		p.AllowedIPs = ips
	}
	return p
}

func cloneIPNet(n net.IPNet) net.IPNet {
	return net.IPNet{IP: slices.Clone(n.IP), Mask: slices.Clone(n.Mask)}
}
