package core

import (
	"context"
	"errors"
	"net/netip"
	"time"

	"github.com/edgeheal/edgeheal/netfix"
	"github.com/edgeheal/edgeheal/probes"
)

// OS is the agent's one seam to the system: a small interface for each
// kind of handle, all bound to one network namespace. agent/system opens
// the real ones, once per namespace (system.Open, system.OpenAt); tests
// fill in fakes (agent/core/coretest). Every field must be set.
//
// Nothing behind these interfaces decides anything. Every call that can
// hang has a bound behind the interface (agent/system): a WireGuard device
// that gives no answer is an error after a deadline, not a goroutine held
// forever.
type OS struct {
	NIC       netfix.NIC       // link features (ethtool)
	Links     Links            // links, default routes and their changes (rtnetlink)
	WireGuard netfix.WireGuard // devices and peers (wgctrl)
	Bounce    netfix.Links     // links set down and up (rtnetlink)
	Systemd   netfix.Systemd   // units (D-Bus)
	Net       Prober           // active probes
	Pods      PodLocator       // pods' network namespaces (CRI)
	Clock     Clock            // the time, and the kernel's clock status
	PathMTU   PathMTU          // sized DF probes and the MTUs they are judged against
	Nftables  Nftables         // the path-MTU repair's TCP MSS clamp table
	MTU       netfix.LinkMTU   // link MTUs set (rtnetlink)
	// SNMPPath is the namespace's /proc/net/snmp, read for evidence.
	SNMPPath string
}

// PathMTU measures how large a packet crosses a path (probes.ProbeSizes:
// ICMP echoes of given sizes with DF set, from the namespace), and reads
// the MTUs the answer is judged against.
type PathMTU interface {
	Sizes(ctx context.Context, target netip.Addr, p probes.SizeProbe) probes.SizesResult
	// RouteTo is the link that carries packets to ip, and its MTU.
	RouteTo(ip netip.Addr) (probes.RouteLink, error)
	// LinkMTU reads a link's MTU; a missing link matches os.ErrNotExist.
	LinkMTU(name string) (int, error)
}

// Nftables opens connections to nftables in the namespace. A connection
// buffers its commands until Flush, so each is used by one caller at a
// time: Conn returns a new one for every use (netfix.EnsureMSSClamp).
type Nftables interface {
	Conn() (netfix.NFT, error)
}

// Links lists the links and default routes of the namespace and subscribes
// to their changes (probes.LinkWatcher), and reads the routes and link
// counters that go into incident evidence.
type Links interface {
	probes.LinkWatcher
	Routes() ([]probes.RouteInfo, error)
	LinkStats() ([]probes.LinkStat, error)
}

// Prober makes active probes. None of them retries; an error (or
// ProbeResult.Err) means the probe could not be made, never that the
// network failed.
type Prober interface {
	// Tunnel sends one probe to target ("tcp://ip:port" or "icmp://ip")
	// from the namespace and waits at most timeout (probes.ProbeTunnel).
	Tunnel(ctx context.Context, target string, timeout time.Duration) probes.ProbeResult
	// MQTT probes a broker with CONNECT/CONNACK from ns; the zero Netns is
	// the OS's own namespace (probes.MQTT).
	MQTT(ctx context.Context, ns probes.Netns, cfg probes.MQTTConfig) (probes.Result, error)
	// Lookup resolves a host name from the namespace.
	Lookup(ctx context.Context, name string) ([]netip.Addr, error)
}

// PodLocator finds a workload's network namespace (probes.Locator).
type PodLocator interface {
	Locate(ctx context.Context, w probes.Where) (probes.Target, error)
}

// Clock is the time policy reads, and the kernel's view of the system
// clock (probes.Clock).
type Clock interface {
	Now() time.Time
	Status() (probes.ClockStatus, error)
}

// ErrNoAnswer matches the error of a call through OS that overran its
// deadline: the handle behind it (a WireGuard device, the container
// runtime) gave no answer in time. The error names what did not answer
// and for how long; the call itself may still be waiting, on a goroutine
// of its own, and holds up nothing else.
var ErrNoAnswer = errors.New("gave no answer")
