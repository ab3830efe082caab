package lab

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sync"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.zx2c4.com/wireguard/wgctrl"
	"golang.zx2c4.com/wireguard/wgctrl/wgtypes"
)

// Node is one machine of the lab, each a network namespace.
type Node string

// The lab's nodes, from the workload to the cloud.
const (
	Pod   Node = "pod"   // the workload: reaches the cloud only through the tunnel
	Edge  Node = "edge"  // the edge host: WireGuard, the agent, the uplink
	Modem Node = "modem" // the faulty 4G modem: a frame relay
	Cloud Node = "cloud" // the hub: WireGuard, the MQTT broker, telemetry subscriber
	// Carrier is the carrier NAT between the modem and the cloud; it exists
	// only with Options.NAT.
	Carrier Node = "carrier"
)

// Nodes lists every node in path order, without the optional Carrier.
var Nodes = []Node{Pod, Edge, Modem, Cloud}

// BrokerKind selects the cloud's MQTT broker.
type BrokerKind string

// The brokers the lab can run.
const (
	BrokerEmbedded  BrokerKind = "embedded"  // mochi-mqtt in the lab's own process
	BrokerMosquitto BrokerKind = "mosquitto" // the Debian package's binary, as a child process
)

// DefaultRunRoot is the parent of every lab's run directory unless
// Options.RunDir says otherwise.
const DefaultRunRoot = "/run/edgeheal-lab"

// Fixed ports and addresses. Every address lives only inside the lab's
// namespaces, so they cannot clash with the machine's own networks.
const (
	WireGuardPort = 51820 // the cloud's listen port
	BrokerPort    = 1883
	// CloudHost is the DNS name of the cloud's public address, answered by
	// the edge namespace's hosts file (see HostsFile).
	CloudHost = "cloud.edgeheal-lab.test"
	// TelemetryTopic carries the pod's telemetry.
	TelemetryTopic = "edgeheal-lab/telemetry"
)

var (
	podAddr         = netip.MustParsePrefix("10.77.1.2/24")
	edgePodSideAddr = netip.MustParsePrefix("10.77.1.1/24")
	edgeTunnelAddr  = netip.MustParsePrefix("10.77.0.2/24")
	cloudTunnelAddr = netip.MustParsePrefix("10.77.0.1/24")
	edgeUplinkAddr  = netip.MustParsePrefix("192.0.2.2/24")
	cloudPublicAddr = netip.MustParsePrefix("192.0.2.1/24")
)

// Options configure a lab. The zero value is the faithful reproduction:
// embedded broker, edge uplink TX checksum offload on, no keepalive (as
// Flannel sets it) and telemetry at 20 msg/s.
type Options struct {
	// Prefix names everything the lab creates: namespaces
	// /var/run/netns/<prefix>-<node>, links <prefix>-up, <prefix>-wg, ...
	// 2–7 characters of [a-z0-9]; empty means "ehl" and 4 random hex digits.
	// Start refuses a prefix that is in use.
	Prefix string
	// RunDir holds the lab's files (mosquitto config and log, lab.json).
	// Empty means DefaultRunRoot/<prefix>. Close removes it.
	RunDir string
	// Broker is BrokerEmbedded (default) or BrokerMosquitto.
	Broker BrokerKind
	// MosquittoPath is the mosquitto binary; empty means "mosquitto" on PATH.
	MosquittoPath string
	// BrokerPersistence (mosquitto only) keeps the broker's sessions, the
	// messages queued for them and the retained messages across
	// StopBroker and StartBroker, in RunDir, as a cloud's broker is run:
	// a persistent subscriber then misses nothing published while it was
	// away. Off, a restarted broker starts empty.
	BrokerPersistence bool
	// OffloadOff turns the edge uplink's TX checksum offload off at start
	// (the manual fix applied). By default it is left on: the fault.
	OffloadOff bool
	// Keepalive is the edge peer's PersistentKeepalive; 0 (off) as Flannel.
	Keepalive time.Duration
	// NoTelemetry leaves the pod's publisher and the cloud's subscriber off.
	NoTelemetry bool
	// TelemetryRate is messages per second; 0 means 20.
	TelemetryRate int
	// LateAfter is how long after sending a telemetry message counts as
	// delivered; later arrivals count as lost. 0 means 1 s.
	LateAfter time.Duration
	// NAT puts a carrier NAT between the modem and the cloud: nftables
	// masquerade with real conntrack in the carrier's namespace (carrier.go).
	NAT bool
	// EdgeListenPort is the edge's WireGuard listen port; 0 lets WireGuard
	// pick one. Flannel's WireGuard backend uses a fixed 51820.
	EdgeListenPort int
	// Logger receives the lab's own diagnostics; nil discards them.
	Logger *slog.Logger
}

// Lab is a running lab. Its methods are safe for concurrent use.
type Lab struct {
	opts   Options
	prefix string
	runDir string
	log    *slog.Logger

	ns map[Node]netns.NsHandle
	wg *wgctrl.Client

	edgeKey, cloudKey wgtypes.Key

	mu          sync.Mutex // guards the fields below
	edgeWG      *wgDevice
	cloudWG     *wgDevice
	relay       *relay
	broker      broker
	tel         *telemetry
	xfer        *transferServer // the cloud's transfer server, started by the first Transfer
	cloudPublic netip.Prefix
	faultTimer  *time.Timer
	faultUntil  time.Time
	pluggedAt   time.Time
	plugAsked   time.Duration // CLOCK_MONOTONIC: the last uplink's create request
	closed      bool

	natMu      sync.Mutex // guards the carrier's state; held across its nft calls
	natProfile int        // index in natProfiles
	natStuck   []NATMapping
}

var prefixRE = regexp.MustCompile(`^[a-z0-9]{2,7}$`)

// newPrefix is "ehl" and 4 random hex digits.
func newPrefix() string {
	var b [2]byte
	_, _ = rand.Read(b[:])
	return "ehl" + hex.EncodeToString(b[:])
}

// Start builds and starts a lab. On error, everything it made is removed.
// ctx bounds the start only; the lab runs until Close.
func Start(ctx context.Context, opts Options) (*Lab, error) {
	if err := requireRoot(); err != nil {
		return nil, err
	}
	randomPrefix := opts.Prefix == ""
	if randomPrefix {
		opts.Prefix = newPrefix()
	}
	if !prefixRE.MatchString(opts.Prefix) {
		return nil, fmt.Errorf("prefix %q: want 2-7 characters of [a-z0-9]", opts.Prefix)
	}
	switch opts.Broker {
	case "":
		opts.Broker = BrokerEmbedded
	case BrokerEmbedded, BrokerMosquitto:
	default:
		return nil, fmt.Errorf("unknown broker %q: want %q or %q", opts.Broker, BrokerEmbedded, BrokerMosquitto)
	}
	if opts.BrokerPersistence && opts.Broker != BrokerMosquitto {
		return nil, fmt.Errorf("broker persistence: only with %q, not %q", BrokerMosquitto, opts.Broker)
	}
	if opts.TelemetryRate <= 0 {
		opts.TelemetryRate = 20
	}
	if opts.LateAfter <= 0 {
		opts.LateAfter = time.Second
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	for try := 0; ; try++ {
		left := Leftovers(opts.Prefix, "")
		if len(left) == 0 {
			break
		}
		if !randomPrefix || try == 5 {
			return nil, fmt.Errorf("prefix %s is in use (%s): %w", opts.Prefix, left[0], os.ErrExist)
		}
		opts.Prefix = newPrefix() // another lab drew the same one
	}
	if opts.RunDir == "" {
		opts.RunDir = filepath.Join(DefaultRunRoot, opts.Prefix)
	}
	if _, err := os.Stat(opts.RunDir); err == nil {
		return nil, fmt.Errorf("run directory %s: %w", opts.RunDir, os.ErrExist)
	}
	l := &Lab{
		opts:        opts,
		prefix:      opts.Prefix,
		runDir:      opts.RunDir,
		log:         opts.Logger.With("lab", opts.Prefix),
		ns:          map[Node]netns.NsHandle{},
		cloudPublic: cloudPublicAddr,
	}
	if err := l.start(ctx); err != nil {
		return nil, errors.Join(fmt.Errorf("starting lab %s: %w", l.prefix, err), l.Close())
	}
	return l, nil
}

// mkdirAll is os.MkdirAll, tried again when another lab's Sweep removed an
// empty shared parent (/etc/netns, DefaultRunRoot) between its steps.
func mkdirAll(dir string) error {
	var err error
	for range 3 {
		if err = os.MkdirAll(dir, 0o755); err == nil || !errors.Is(err, os.ErrNotExist) {
			return err
		}
	}
	return err
}

func requireRoot() error {
	if os.Geteuid() != 0 {
		return errors.New("the lab needs root (network namespaces, TUN, AF_PACKET)")
	}
	return nil
}

// link names; all ≤ 15 characters with a ≤ 7 character prefix.
func (l *Lab) link(s string) string { return l.prefix + "-" + s }

func (l *Lab) start(ctx context.Context) error {
	if err := mkdirAll(l.runDir); err != nil {
		return fmt.Errorf("creating run directory: %w", err)
	}
	for _, n := range l.nodes() {
		h, err := createNamedNS(l.NetnsName(n))
		if err != nil {
			return err
		}
		l.ns[n] = h
		if err := l.handle(n, func(nh *netlink.Handle) error { return linkUp(nh, "lo") }); err != nil {
			return err
		}
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := l.buildLinks(); err != nil {
		return err
	}
	if l.opts.OffloadOff {
		if err := l.SetUplinkTxChecksum(false); err != nil {
			return err
		}
	}
	r, err := startRelay(l.ns[Modem], l.link("m0"), l.link("m1"))
	if err != nil {
		return err
	}
	l.relay = r
	if err := l.startWireGuard(); err != nil {
		return err
	}
	if err := l.writeHosts(); err != nil {
		return err
	}
	if err := l.writeEdgeWGConfig(); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := l.StartBroker(); err != nil {
		return err
	}
	if !l.opts.NoTelemetry {
		t, err := startTelemetry(ctx, l, l.opts.TelemetryRate, l.opts.LateAfter)
		if err != nil {
			return err
		}
		l.mu.Lock()
		l.tel = t
		l.mu.Unlock()
	}
	b, err := json.MarshalIndent(l.Info(), "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(l.runDir, "lab.json"), append(b, '\n'), 0o644)
}

// Close stops telemetry, the broker, the relay and WireGuard, and removes
// every namespace, link, socket, process and file the lab created. Any
// process still inside one of the lab's namespaces (an agent started with
// Command, say) is killed: stop such processes gracefully before Close if
// that matters. It is safe to call more than once and after a failed Start.
func (l *Lab) Close() error {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return nil
	}
	l.closed = true
	if l.faultTimer != nil {
		l.faultTimer.Stop()
	}
	tel, br, r, ewg, cwg, xfer := l.tel, l.broker, l.relay, l.edgeWG, l.cloudWG, l.xfer
	l.tel, l.broker, l.relay, l.edgeWG, l.cloudWG, l.xfer = nil, nil, nil, nil, nil, nil
	l.mu.Unlock()

	var errs []error
	tel.stop()
	xfer.close()
	if br != nil {
		errs = append(errs, br.stop())
	}
	r.close()
	errs = append(errs, ewg.close(), cwg.close())
	if l.wg != nil {
		errs = append(errs, l.wg.Close())
	}
	for _, h := range l.ns {
		h.Close()
	}
	errs = append(errs, Sweep(l.prefix, l.runDir))
	return errors.Join(errs...)
}

// Prefix is the per-run name prefix of everything the lab created.
func (l *Lab) Prefix() string { return l.prefix }

// RunDir is the lab's run directory.
func (l *Lab) RunDir() string { return l.runDir }

// NetnsName is the node's namespace name, as `ip netns` lists it.
func (l *Lab) NetnsName(n Node) string { return l.prefix + "-" + string(n) }

// NetnsPath is the node's namespace path under /var/run/netns.
func (l *Lab) NetnsPath(n Node) string { return filepath.Join(netnsDir, l.NetnsName(n)) }

// Do runs fn on a locked OS thread inside the node's namespace. Sockets and
// handles fn creates stay in that namespace; goroutines it starts do not.
func (l *Lab) Do(n Node, fn func() error) error {
	h, ok := l.ns[n]
	if !ok {
		return fmt.Errorf("unknown node %q", n)
	}
	return doIn(h, fn)
}

// Command returns a command that runs inside the node's namespace through
// `ip netns exec`, which also bind-mounts /etc/netns/<ns>/hosts over
// /etc/hosts (so CloudHost resolves in the edge).
func (l *Lab) Command(ctx context.Context, n Node, name string, args ...string) *exec.Cmd {
	return exec.CommandContext(ctx, "ip", append([]string{"netns", "exec", l.NetnsName(n), name}, args...)...)
}

// Exec runs a command inside the node's namespace and returns its combined
// output.
func (l *Lab) Exec(ctx context.Context, n Node, name string, args ...string) ([]byte, error) {
	out, err := l.Command(ctx, n, name, args...).CombinedOutput()
	if err != nil {
		return out, fmt.Errorf("running %s in %s: %w: %s", name, n, err, out)
	}
	return out, nil
}

// handle runs fn with a netlink handle inside the node's namespace.
func (l *Lab) handle(n Node, fn func(*netlink.Handle) error) error {
	h, err := netlink.NewHandleAt(l.ns[n])
	if err != nil {
		return fmt.Errorf("opening netlink in %s: %w", n, err)
	}
	defer h.Close()
	return fn(h)
}

// DialIn opens a TCP connection to addr from inside the node's namespace
// (a broker client's custom dial, for one).
func (l *Lab) DialIn(n Node, addr string, timeout time.Duration) (net.Conn, error) {
	var c net.Conn
	err := l.Do(n, func() error {
		var err error
		c, err = net.DialTimeout("tcp", addr, timeout)
		return err
	})
	return c, err
}
