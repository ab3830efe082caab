package agent

import (
	"context"
	"net"
	"time"

	"golang.zx2c4.com/wireguard/wgctrl/wgtypes"

	"github.com/edgeheal/edgeheal/netfix"
)

// This file is the seam between the tunnel policy and the system: the shapes
// the tunnel monitor reads and the calls it makes. The real implementation
// maps them onto probes and netfix (tunnel_os.go); tests use a hand-written
// fake. Nothing here decides anything.

// PeerStats is one WireGuard peer as read in one round. It mirrors
// probes.PeerStats so that agent does not depend on the probes package's
// progress; the adapter copies field by field.
type PeerStats struct {
	PublicKey     wgtypes.Key
	Endpoint      *net.UDPAddr
	LastHandshake time.Time // zero: no handshake since the peer was (re-)added
	RxBytes       int64
	TxBytes       int64
	Keepalive     time.Duration // persistent keepalive; 0 is off
	AllowedIPs    []net.IPNet
}

// TunnelProbeResult is one active probe through a tunnel. It mirrors
// probes.ProbeResult. Err set means the probe could not be made at all (a
// malformed target, no socket): the monitor never acts on it. OK false with
// Err nil is a confirmed miss.
type TunnelProbeResult struct {
	OK      bool
	Err     error
	Class   string // "ok", "timeout", "refused", "no-route", ...
	Latency time.Duration
}

// ClockStatus is the kernel's view of the system clock. It mirrors
// probes.ClockStatus.
type ClockStatus struct {
	Synchronized bool          // the kernel says the clock is disciplined (no STA_UNSYNC)
	SteppedBack  bool          // the wall clock moved backwards since the last reading
	Offset       time.Duration // the estimated offset, if known
	Detail       string
}

// UplinkStatus says whether the host itself can reach a peer's endpoint: a
// carrier on the uplink, a default route, and a host path to the endpoint.
// Detail names what is missing when Up is false ("no default route",
// "host path to 203.0.113.7:51820: timeout").
type UplinkStatus struct {
	Up     bool
	Detail string
}

// TunnelObserver is what the tunnel monitor reads. Its methods never change
// the system. An error means the observation could not be made.
type TunnelObserver interface {
	// ReadPeers returns every peer of the interface (one device read).
	ReadPeers(ctx context.Context, iface string) ([]PeerStats, error)
	// Probe makes one active probe through the tunnel to target
	// ("tcp://ip:port" or "icmp://ip") and waits at most timeout.
	Probe(ctx context.Context, target string, timeout time.Duration) TunnelProbeResult
	// Clock reads the kernel's clock status.
	Clock(ctx context.Context) (ClockStatus, error)
	// UplinkUp checks carrier, default route and the host path to endpoint
	// (endpoint may be nil: then only carrier and default route).
	UplinkUp(ctx context.Context, endpoint *net.UDPAddr) (UplinkStatus, error)
}

// TunnelActuator is what the tunnel monitor changes. Each method is
// idempotent, changes nothing when dryRun is set (it reports what it would
// do, with Result.DryRun), and reports in Result.Changed whether it changed
// the system. None of them retries or sleeps: pacing is the monitor's job.
type TunnelActuator interface {
	// Keepalive sets the persistent keepalive of the selected peers of iface,
	// touching nothing else of them.
	Keepalive(ctx context.Context, iface string, selected func(wgtypes.Key) bool, keepalive time.Duration, dryRun bool) (netfix.Result, error)
	// Reassert is the first rung: offload off on the uplinks and the
	// keepalive on the selected peers (keepalive 0: peers left unchanged).
	Reassert(ctx context.Context, iface string, selected func(wgtypes.Key) bool, keepalive time.Duration, dryRun bool) (netfix.Result, error)
	// Handshake removes the peer and adds it back with the same key, PSK,
	// endpoint and allowed IPs and the keepalive, which starts a fresh
	// handshake at once.
	Handshake(ctx context.Context, iface string, peer wgtypes.Key, keepalive time.Duration, dryRun bool) (netfix.Result, error)
	// Reresolve resolves host ("name" or "name:port"; without a port, the
	// port of current is kept) and sets the peer's endpoint if the address
	// changed.
	Reresolve(ctx context.Context, iface string, peer wgtypes.Key, host string, current *net.UDPAddr, dryRun bool) (netfix.Result, error)
	// Bounce sets the link down and up, restoring addresses and routes.
	Bounce(ctx context.Context, iface string, dryRun bool) (netfix.Result, error)
	// RestartUnit restarts the systemd unit and waits until it is active.
	RestartUnit(ctx context.Context, unit string, dryRun bool) (netfix.Result, error)
}

// TunnelOS is everything the tunnel monitor needs from the system.
type TunnelOS interface {
	TunnelObserver
	TunnelActuator
}
