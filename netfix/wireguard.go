package netfix

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"slices"
	"time"

	"golang.zx2c4.com/wireguard/wgctrl"
	"golang.zx2c4.com/wireguard/wgctrl/wgtypes"
)

// WireGuard is the part of *wgctrl.Client that netfix uses.
type WireGuard interface {
	Device(name string) (*wgtypes.Device, error)
	ConfigureDevice(name string, cfg wgtypes.Config) error
}

var _ WireGuard = (*wgctrl.Client)(nil)

// DefaultHandshakeKeepalive is the keepalive ForceHandshake puts on a
// re-added peer when neither the caller nor the peer had one: without a
// keepalive the re-added peer sends nothing until there is traffic, so no
// handshake would start. 25 s is the value wg(8) recommends for NAT.
const DefaultHandshakeKeepalive = 25 * time.Second

// ErrNoEndpoint is returned (wrapped) by ForceHandshake for a peer without an
// endpoint: it could not initiate a handshake after being re-added, so
// removing it would only drop its session.
var ErrNoEndpoint = errors.New("peer has no endpoint")

// PeerTarget names a peer in Results, events and checks: the interface, a
// slash, and the first 8 characters of the base64 public key
// ("wg0/hXk3Qm1a"). It never contains key material other than the public key.
func PeerTarget(iface string, peer wgtypes.Key) string {
	return iface + "/" + peer.String()[:8]
}

// EnsureKeepalive sets PersistentKeepalive on the selected peers of iface
// whose keepalive differs, touching nothing else (UpdateOnly). A nil selected
// means every peer. It reads the device back after the change and returns an
// error if a peer still has another keepalive. Idempotent: a second call with
// the same input returns Changed=false. A missing interface matches
// os.ErrNotExist. Setting a keepalive on a peer whose was 0 makes WireGuard
// send one keepalive at once (which starts a handshake if there is no
// session); nothing else is disturbed.
func EnsureKeepalive(ctx context.Context, wg WireGuard, iface string, selected func(wgtypes.Key) bool, keepalive time.Duration, dryRun bool) (Result, error) {
	r := Result{Action: "keepalive", Target: iface}
	if err := ctx.Err(); err != nil {
		return r, err
	}
	if keepalive < 0 {
		return r, fmt.Errorf("setting keepalive on %s: negative keepalive %s", iface, keepalive)
	}
	dev, err := wg.Device(iface)
	if err != nil {
		return r, fmt.Errorf("reading wireguard device %s: %w", iface, err)
	}
	ka := keepalive
	var cfgs []wgtypes.PeerConfig
	for i := range dev.Peers {
		p := &dev.Peers[i]
		if selected != nil && !selected(p.PublicKey) {
			continue
		}
		if p.PersistentKeepaliveInterval == keepalive {
			continue
		}
		cfgs = append(cfgs, wgtypes.PeerConfig{
			PublicKey:                   p.PublicKey,
			UpdateOnly:                  true,
			PersistentKeepaliveInterval: &ka,
		})
		r.Changes = append(r.Changes, fmt.Sprintf("%s: keepalive %s -> %s",
			PeerTarget(iface, p.PublicKey), p.PersistentKeepaliveInterval, keepalive))
	}
	if len(cfgs) == 0 {
		return r, nil
	}
	if dryRun {
		r.DryRun = true
		return r, nil
	}
	if err := wg.ConfigureDevice(iface, wgtypes.Config{Peers: cfgs}); err != nil {
		return r, fmt.Errorf("setting keepalive on %d peers of %s: %w", len(cfgs), iface, err)
	}
	r.Changed = true
	after, err := wg.Device(iface)
	if err != nil {
		return r, fmt.Errorf("reading back wireguard device %s: %w", iface, err)
	}
	want := make(map[wgtypes.Key]bool, len(cfgs))
	for _, c := range cfgs {
		want[c.PublicKey] = true
	}
	var errs []error
	for i := range after.Peers {
		p := &after.Peers[i]
		if want[p.PublicKey] && p.PersistentKeepaliveInterval != keepalive {
			errs = append(errs, fmt.Errorf("peer %s still has keepalive %s", PeerTarget(iface, p.PublicKey), p.PersistentKeepaliveInterval))
		}
	}
	if len(errs) > 0 {
		return r, fmt.Errorf("setting keepalive on %s: %w", iface, errors.Join(errs...))
	}
	return r, nil
}

// ForceHandshake removes peer from iface and adds it back, in one
// configuration call, with the same public key, preshared key, endpoint and
// allowed IPs and with a keepalive: keepalive if > 0, else the peer's own,
// else DefaultHandshakeKeepalive. A re-added peer has no session and sends a
// keepalive at once, which WireGuard turns into a handshake initiation
// (wireguard-go 2026-05: new handshake within 3–4 ms on a working path).
// Re-setting the same endpoint does not do this; see EnsureEndpoint.
//
// The peer's rx/tx counters and last handshake time restart from zero, so
// callers must re-baseline their detectors. The device is read back and the
// re-added peer checked. ForceHandshake is not idempotent by nature (every
// call starts a new handshake); Changed is true whenever it acted. A missing
// interface or peer matches os.ErrNotExist; a peer without an endpoint
// returns ErrNoEndpoint and is left alone.
func ForceHandshake(ctx context.Context, wg WireGuard, iface string, peer wgtypes.Key, keepalive time.Duration, dryRun bool) (Result, error) {
	r := Result{Action: "handshake", Target: PeerTarget(iface, peer)}
	_, p, err := endpointPeer(ctx, wg, iface, peer, "forcing handshake with")
	if err != nil {
		return r, err
	}
	ka := keepalive
	if ka <= 0 {
		ka = p.PersistentKeepaliveInterval
	}
	if ka <= 0 {
		ka = DefaultHandshakeKeepalive
	}
	add := readdConfig(p, ka)
	r.Changes = []string{fmt.Sprintf("%s: removed and re-added (endpoint %s, %d allowed IPs, keepalive %s)",
		r.Target, p.Endpoint, len(p.AllowedIPs), ka)}
	if dryRun {
		r.DryRun = true
		return r, nil
	}
	err = wg.ConfigureDevice(iface, wgtypes.Config{Peers: []wgtypes.PeerConfig{
		{PublicKey: peer, Remove: true},
		add,
	}})
	if err != nil {
		// The call may have stopped between the remove and the add; putting
		// the peer back matters more than the handshake.
		if rerr := wg.ConfigureDevice(iface, wgtypes.Config{Peers: []wgtypes.PeerConfig{add}}); rerr != nil {
			err = errors.Join(err, fmt.Errorf("re-adding peer: %w", rerr))
		}
		return r, fmt.Errorf("forcing handshake with %s: %w", r.Target, err)
	}
	r.Changed = true
	after, err := wg.Device(iface)
	if err != nil {
		return r, fmt.Errorf("reading back wireguard device %s: %w", iface, err)
	}
	q := findPeer(after, peer)
	if q == nil {
		return r, fmt.Errorf("forcing handshake with %s: peer missing after re-adding it", r.Target)
	}
	if diff := peerConfigDiff(p, q, ka); diff != "" {
		return r, fmt.Errorf("forcing handshake with %s: re-added peer differs: %s", r.Target, diff)
	}
	return r, nil
}

// endpointPeer is the start of the rungs that make a handshake: it reads
// iface and finds peer, which must have an endpoint (ErrNoEndpoint, checked
// before anything changes; a missing peer matches os.ErrNotExist). doing
// begins their errors ("forcing handshake with").
func endpointPeer(ctx context.Context, wg WireGuard, iface string, peer wgtypes.Key, doing string) (*wgtypes.Device, *wgtypes.Peer, error) {
	if err := ctx.Err(); err != nil {
		return nil, nil, err
	}
	dev, err := wg.Device(iface)
	if err != nil {
		return nil, nil, fmt.Errorf("reading wireguard device %s: %w", iface, err)
	}
	target := PeerTarget(iface, peer)
	p := findPeer(dev, peer)
	switch {
	case p == nil:
		return nil, nil, fmt.Errorf("%s %s: %w", doing, target, &notFound{what: "peer " + target})
	case p.Endpoint == nil:
		return nil, nil, fmt.Errorf("%s %s: %w", doing, target, ErrNoEndpoint)
	}
	return dev, p, nil
}

// readdConfig is the configuration that adds p back as it was, with
// keepalive ka.
func readdConfig(p *wgtypes.Peer, ka time.Duration) wgtypes.PeerConfig {
	c := wgtypes.PeerConfig{
		PublicKey:                   p.PublicKey,
		Endpoint:                    p.Endpoint,
		PersistentKeepaliveInterval: &ka,
		ReplaceAllowedIPs:           true,
		AllowedIPs:                  slices.Clone(p.AllowedIPs),
	}
	if p.PresharedKey != (wgtypes.Key{}) {
		psk := p.PresharedKey
		c.PresharedKey = &psk
	}
	return c
}

// peerConfigDiff says how the re-added peer q differs from the original p
// (with keepalive ka), or "" when it is the same.
func peerConfigDiff(p, q *wgtypes.Peer, ka time.Duration) string {
	switch {
	case q.PresharedKey != p.PresharedKey:
		return "preshared key"
	case !sameUDPAddr(q.Endpoint, p.Endpoint):
		return fmt.Sprintf("endpoint %s, want %s", q.Endpoint, p.Endpoint)
	case q.PersistentKeepaliveInterval != ka:
		return fmt.Sprintf("keepalive %s, want %s", q.PersistentKeepaliveInterval, ka)
	case !sameIPNets(q.AllowedIPs, p.AllowedIPs):
		return fmt.Sprintf("allowed IPs %v, want %v", q.AllowedIPs, p.AllowedIPs)
	}
	return ""
}

// EnsureEndpoint sets peer's endpoint to ep if it differs (UpdateOnly,
// nothing else changes). It is what the reresolve rung uses after a DNS
// lookup. Setting the endpoint a peer already has is a no-op and starts no
// handshake (wireguard-go 2026-05, kernel alike), so EnsureEndpoint with the
// current address returns Changed=false and never calls ConfigureDevice. A
// missing interface or peer matches os.ErrNotExist.
func EnsureEndpoint(ctx context.Context, wg WireGuard, iface string, peer wgtypes.Key, ep *net.UDPAddr, dryRun bool) (Result, error) {
	r := Result{Action: "endpoint", Target: PeerTarget(iface, peer)}
	if err := ctx.Err(); err != nil {
		return r, err
	}
	if ep == nil || ep.IP == nil || ep.Port <= 0 || ep.Port > 65535 {
		return r, fmt.Errorf("setting endpoint of %s: invalid endpoint %v", r.Target, ep)
	}
	dev, err := wg.Device(iface)
	if err != nil {
		return r, fmt.Errorf("reading wireguard device %s: %w", iface, err)
	}
	p := findPeer(dev, peer)
	if p == nil {
		return r, fmt.Errorf("setting endpoint of %s: %w", r.Target, &notFound{what: "peer " + r.Target})
	}
	if sameUDPAddr(p.Endpoint, ep) {
		return r, nil
	}
	r.Changes = []string{fmt.Sprintf("%s: endpoint %v -> %s", r.Target, p.Endpoint, ep)}
	if dryRun {
		r.DryRun = true
		return r, nil
	}
	err = wg.ConfigureDevice(iface, wgtypes.Config{Peers: []wgtypes.PeerConfig{
		{PublicKey: peer, UpdateOnly: true, Endpoint: ep},
	}})
	if err != nil {
		return r, fmt.Errorf("setting endpoint of %s: %w", r.Target, err)
	}
	r.Changed = true
	after, err := wg.Device(iface)
	if err != nil {
		return r, fmt.Errorf("reading back wireguard device %s: %w", iface, err)
	}
	if q := findPeer(after, peer); q == nil || !sameUDPAddr(q.Endpoint, ep) {
		return r, fmt.Errorf("setting endpoint of %s: endpoint not %s after setting it", r.Target, ep)
	}
	return r, nil
}

func findPeer(dev *wgtypes.Device, k wgtypes.Key) *wgtypes.Peer {
	for i := range dev.Peers {
		if dev.Peers[i].PublicKey == k {
			return &dev.Peers[i]
		}
	}
	return nil
}

func sameUDPAddr(a, b *net.UDPAddr) bool {
	if a == nil || b == nil {
		return a == b
	}
	return a.IP.Equal(b.IP) && a.Port == b.Port
}

// sameIPNets compares allowed IPs as sets: the order wireguard reports them
// in is its trie's, not the order they were added in.
func sameIPNets(a, b []net.IPNet) bool {
	if len(a) != len(b) {
		return false
	}
	seen := make(map[string]int, len(a))
	for _, n := range a {
		seen[n.String()]++
	}
	for _, n := range b {
		seen[n.String()]--
	}
	for _, c := range seen {
		if c != 0 {
			return false
		}
	}
	return true
}

// notFound is a missing interface, peer, link or unit. It matches
// os.ErrNotExist, so callers and fakes never need the OS library's error
// types.
type notFound struct {
	what string
	err  error // the OS error, if any
}

func (e *notFound) Error() string {
	if e.err != nil {
		return e.what + " not found: " + e.err.Error()
	}
	return e.what + " not found"
}
func (e *notFound) Is(target error) bool { return target == os.ErrNotExist }
func (e *notFound) Unwrap() error        { return e.err }

// ForceRebind moves iface to a new listen port and forces a handshake with
// peer from it, so that a NAT on the path makes a fresh mapping for the
// tunnel's flow and the far side roams to it on the first authenticated
// packet (WireGuard follows a peer's source address, docs/operations/tunnels.md,
// "WireGuard facts"). It sets the first of candidates (the current port is
// skipped) that the system lets it bind: a bind is the only test of a free
// port that cannot race, so a port in use is passed over, and the errors of
// every refused one are returned when none binds. Then ForceHandshake, with
// its contract (counters reset, ErrNoEndpoint for a peer without an
// endpoint, checked before anything changes). The device is read back: the
// listen port must be the new one. Not idempotent by nature; Changed is
// true whenever it acted. A missing interface or peer matches
// os.ErrNotExist.
func ForceRebind(ctx context.Context, wg WireGuard, iface string, peer wgtypes.Key, candidates []int, keepalive time.Duration, dryRun bool) (Result, error) {
	r := Result{Action: "rebind", Target: PeerTarget(iface, peer)}
	dev, _, err := endpointPeer(ctx, wg, iface, peer, "rebinding for")
	if err != nil {
		return r, err
	}
	ports := slices.DeleteFunc(slices.Clone(candidates), func(c int) bool { return c == dev.ListenPort || c < 1 || c > 65535 })
	if len(ports) == 0 {
		return r, fmt.Errorf("rebinding %s: no candidate port other than the current %d", iface, dev.ListenPort)
	}
	if dryRun {
		r.DryRun = true
		r.Changes = []string{fmt.Sprintf("%s: listen port %d -> %d, then a forced handshake with %s", iface, dev.ListenPort, ports[0], r.Target)}
		return r, nil
	}
	var refused []error
	port := 0
	for _, c := range ports {
		if err := ctx.Err(); err != nil {
			return r, err
		}
		if err := wg.ConfigureDevice(iface, wgtypes.Config{ListenPort: &c}); err != nil {
			refused = append(refused, fmt.Errorf("port %d: %w", c, err))
			continue
		}
		port = c
		break
	}
	if port == 0 {
		return r, fmt.Errorf("rebinding %s: no candidate port could be bound: %w", iface, errors.Join(refused...))
	}
	r.Changed = true
	r.Changes = []string{fmt.Sprintf("%s: listen port %d -> %d", iface, dev.ListenPort, port)}
	hs, err := ForceHandshake(ctx, wg, iface, peer, keepalive, false)
	r.Changes = append(r.Changes, hs.Changes...)
	if err != nil {
		return r, fmt.Errorf("rebinding %s: %w", iface, err)
	}
	after, err := wg.Device(iface)
	if err != nil {
		return r, fmt.Errorf("reading back wireguard device %s: %w", iface, err)
	}
	if after.ListenPort != port {
		return r, fmt.Errorf("rebinding %s: listen port is %d after setting %d", iface, after.ListenPort, port)
	}
	return r, nil
}
