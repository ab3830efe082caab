// Package configs owns edgeheal's configuration: the version 1 schema, the
// embedded defaults, layered loading (defaults, the main file, then
// config.d/*.yaml in lexical order), the origin of every value, and
// validation. Rendering fleet templates is the fleet side's (fleet/render),
// which validates each node's file with Check; the templates it ships are
// data in configs/fleet/.
//
// configs never touches the network or the system it configures: it reads
// files and returns values or errors. A problem is always reported with the
// file, the key path and the reason, and Validate reports every problem at
// once so that an operator fixes a file in one pass.
package configs

import (
	"fmt"
	"strings"
	"time"

	"github.com/edgeheal/edgeheal/broker"
)

// Version is the only schema version this build reads.
const Version = 1

// Config is the merged, decoded configuration. Its zero value is not useful:
// use Load or Parse, which start from the embedded defaults.
type Config struct {
	Version    int        `yaml:"version"`
	Node       Node       `yaml:"node"`
	Interval   Duration   `yaml:"interval"`
	DryRun     bool       `yaml:"dry_run"`
	Uplinks    []Uplink   `yaml:"uplinks"`
	Tunnels    []Tunnel   `yaml:"tunnels"`
	Workloads  []Workload `yaml:"workloads"`
	Report     Report     `yaml:"report"`
	Policy     Policy     `yaml:"policy"`
	Kubernetes Kubernetes `yaml:"kubernetes"`

	// Origins maps a key path (as in Validate's messages: "tunnels[0].probe.target")
	// to where its value came from. It is filled by Load and Parse.
	Origins Origins `yaml:"-"`
	// Files are the layers read, in order (the defaults not included).
	Files []string `yaml:"-"`
	// Revision is a short hash of the merged values, reported with the status.
	Revision string `yaml:"-"`
}

// Node identifies this machine in reports.
type Node struct {
	Name string `yaml:"name"` // defaults to the hostname
	Site string `yaml:"site"`
}

// Uplink selects links whose TX checksum offload the agent guards.
type Uplink struct {
	// Name is an exact link name, a glob (wwan*, usb*), or "default-route":
	// the interfaces of the IPv4 and IPv6 default routes.
	Name string `yaml:"name"`
	// TxChecksum is "off" (turn every tx-checksum-* feature off and keep it
	// off) or "leave".
	TxChecksum string `yaml:"tx_checksum"`
	// Features are extra kernel (or ethtool -K group) feature names, each
	// "on" or "off".
	Features map[string]string `yaml:"features"`
	// Unit is the systemd unit that owns this uplink (a modem or network
	// manager): restart-unit refuses to restart it.
	Unit string `yaml:"unit"`
}

// DefaultRoute is the Uplink.Name that selects the default-route interfaces.
const DefaultRoute = "default-route"

// Tunnel is a WireGuard interface whose peers the agent keeps alive.
type Tunnel struct {
	Interface string `yaml:"interface"`
	// Peers is "all" or a list of base64 public keys.
	Peers               PeerSelector `yaml:"peers"`
	PersistentKeepalive Duration     `yaml:"persistent_keepalive"`
	EndpointHost        string       `yaml:"endpoint_host"`
	// HostCheck is the host path's probe (tcp://ip:port or icmp://ip, sent
	// outside the tunnel) for endpoints that do not answer ICMP; empty: an
	// ICMP echo to each peer's endpoint.
	HostCheck  string   `yaml:"host_check"`
	StaleAfter Duration `yaml:"stale_after"`
	RxSilence  Duration `yaml:"rx_silence"`
	Probe      Probe    `yaml:"probe"`
	Heal       []string `yaml:"heal"`
	Unit       string   `yaml:"unit"`
	// RebindPorts is where the rebind rung moves the tunnel's listen port
	// ("LO-HI" or one port); empty: the rung is skipped.
	RebindPorts string  `yaml:"rebind_ports"`
	PathMTU     PathMTU `yaml:"path_mtu"`
}

// PathMTU is the tunnel's path-MTU check and repair: DF probes of the
// sizes the tunnel and its uplink send, and, when the path carries less
// without saying so (no ICMP), a TCP MSS clamp and a lower tunnel MTU.
// It is never a rung of the ladder.
type PathMTU struct {
	// Check measures the path (both ways: through the tunnel and over the
	// uplink to the peer's endpoint) and reports it; false: neither check
	// nor repair.
	Check bool `yaml:"check"`
	// Repair clamps the TCP MSS and lowers the tunnel's MTU to what the
	// path carries; false: report only.
	Repair bool `yaml:"repair"`
	// Target is probed through the tunnel (icmp://ip); empty: the address
	// of probe.target.
	Target string `yaml:"target"`
	// UplinkTarget is probed over the uplink, outside the tunnel
	// (icmp://ip); empty: the endpoint of the peer probe.target belongs to.
	UplinkTarget string `yaml:"uplink_target"`
	// Interval is the shortest time between two checks: a check runs when
	// the tunnel or its uplink carried what a smaller path would hurt
	// since the last (large TCP packets, new TCP connections), within
	// ChecksPerHour, and every IdleInterval otherwise.
	Interval Duration `yaml:"interval"`
	// IdleInterval is how often the path is checked when nothing crossed
	// it that a smaller path would hurt.
	IdleInterval Duration `yaml:"idle_interval"`
	// ChecksPerHour bounds the checks, whatever their cause but a
	// workload's hint and an MTU reset: up to this many in a burst, this
	// many an hour on average. A check that finds the full size crossing
	// costs about 6.3 KB on the uplink.
	ChecksPerHour int `yaml:"checks_per_hour"`
	// RelaxAfter is how long a larger path must hold before the clamp and
	// the MTU are raised again.
	RelaxAfter Duration `yaml:"relax_after"`
}

// Probe is an active check through a tunnel.
type Probe struct {
	Target   string   `yaml:"target"` // tcp://ip:port or icmp://ip
	Interval Duration `yaml:"interval"`
	Timeout  Duration `yaml:"timeout"`
	Misses   int      `yaml:"misses"`
}

// Heal rungs, in the default order of the remediation ladder.
const (
	HealReassert    = "reassert"
	HealReresolve   = "reresolve"
	HealHandshake   = "handshake"
	HealRebind      = "rebind"
	HealBounce      = "bounce"
	HealRestartUnit = "restart-unit"
)

// HealRungs lists every valid heal rung in the default ladder order.
// reresolve comes before handshake: it costs nothing when endpoint_host is
// unset or still resolves to the current endpoint (the rung is skipped and
// the next runs at once), and when the address did change, setting it keeps
// the session the hub may still have, where a forced handshake first would
// drop it and wait out a verify_timeout and a cooldown (measured in the lab:
// 39.5 s back with handshake first). rebind follows handshake: it runs only
// when a forced handshake's initiations left and nothing came back (a
// carrier NAT mapping stuck on the old source port), and is skipped
// otherwise.
var HealRungs = []string{HealReassert, HealReresolve, HealHandshake, HealRebind, HealBounce, HealRestartUnit}

// Workload is a pod whose network path to its broker the agent probes from
// inside the pod's own network namespace.
type Workload struct {
	Name      string   `yaml:"name"`
	Pod       Pod      `yaml:"pod"`
	Netns     string   `yaml:"netns"`
	PID       int      `yaml:"pid"`
	CRISocket string   `yaml:"cri_socket"`
	Tunnel    string   `yaml:"tunnel"`
	Interval  Duration `yaml:"interval"`
	Misses    int      `yaml:"misses"`
	MQTT      Broker   `yaml:"mqtt"`
}

// Pod selects a pod sandbox through CRI: namespace plus name or labels.
type Pod struct {
	Namespace string            `yaml:"namespace"`
	Name      string            `yaml:"name"`
	Labels    map[string]string `yaml:"labels"`
}

// Broker is an MQTT broker a workload depends on.
type Broker struct {
	Broker       string   `yaml:"broker"`      // as the pod reaches it
	HostBroker   string   `yaml:"host_broker"` // as the host reaches it
	Timeout      Duration `yaml:"timeout"`
	Username     string   `yaml:"username"`
	PasswordFile string   `yaml:"password_file"`
	TLS          TLS      `yaml:"tls"`
}

// TLS configures a TLS client (broker.TLS: the keys every program
// writes the same). Empty CA means the system roots.
type TLS = broker.TLS

// Report configures where the agent reports.
type Report struct {
	MQTT     ReportMQTT `yaml:"mqtt"`
	HTTP     HTTP       `yaml:"http"`
	StateDir string     `yaml:"state_dir"`
}

// ReportMQTT is the cloud broker the agent publishes status and events to,
// over the host network.
type ReportMQTT struct {
	Broker       string `yaml:"broker"` // empty: MQTT reporting off
	ClientID     string `yaml:"client_id"`
	TopicPrefix  string `yaml:"topic_prefix"`
	Username     string `yaml:"username"`
	PasswordFile string `yaml:"password_file"`
	TLS          TLS    `yaml:"tls"`
	// InsecurePlaintext allows a password over a plain tcp:// or mqtt://
	// broker URL (refused otherwise); the agent warns at every start.
	InsecurePlaintext bool      `yaml:"insecure_plaintext"`
	Reconnect         Reconnect `yaml:"reconnect"`
}

// HTTP is where the agent serves locally: metrics and health on a TCP
// listener, and the local API (status, and everything a program on the
// node acts on) on a Unix socket only root and the edgeheal group can
// open.
type HTTP struct {
	Listen string `yaml:"listen"` // metrics and health; empty: off
	Socket string `yaml:"socket"` // the local API; empty: off
}

// Policy bounds what the remediation ladder may do.
type Policy struct {
	Cooldown      Duration `yaml:"cooldown"`
	MaxDisruptive int      `yaml:"max_disruptive"`
	Window        Duration `yaml:"window"`
	VerifyTimeout Duration `yaml:"verify_timeout"`
	// ResumeGrace is how long, after the uplink or the host path came back,
	// WireGuard gets to resume a tunnel by itself before a disruptive rung.
	ResumeGrace Duration `yaml:"resume_grace"`
}

// Duration is a time.Duration written as a Go duration string ("20s", "1h").
type Duration time.Duration

// D returns d as a time.Duration.
func (d Duration) D() time.Duration { return time.Duration(d) }

// String formats d the way operators write it: whole hours as "1h", whole
// minutes as "5m", other whole seconds as "210s", anything finer as Go does.
func (d Duration) String() string {
	v := time.Duration(d)
	switch {
	case v == 0:
		return "0s"
	case v%time.Hour == 0:
		return fmt.Sprintf("%dh", v/time.Hour)
	case v%time.Minute == 0:
		return fmt.Sprintf("%dm", v/time.Minute)
	case v%time.Second == 0:
		return fmt.Sprintf("%ds", v/time.Second)
	}
	return v.String()
}

// MarshalYAML writes d as a duration string.
func (d Duration) MarshalYAML() (any, error) { return d.String(), nil }

// PeerSelector is "all" (All set) or a list of public keys.
type PeerSelector struct {
	All  bool
	Keys []string
}

// MarshalYAML writes "all" or the key list.
func (p PeerSelector) MarshalYAML() (any, error) {
	if p.All {
		return "all", nil
	}
	if p.Keys == nil {
		return []string{}, nil
	}
	return p.Keys, nil
}

// String is "all" or the keys joined by commas.
func (p PeerSelector) String() string {
	if p.All {
		return "all"
	}
	return strings.Join(p.Keys, ",")
}

// Selects reports whether the peer with the base64 public key is selected.
func (p PeerSelector) Selects(key string) bool {
	if p.All {
		return true
	}
	for _, k := range p.Keys {
		if k == key {
			return true
		}
	}
	return false
}

// Tunnel returns the tunnel with the interface name, if configured.
func (c *Config) Tunnel(iface string) (Tunnel, bool) {
	for _, t := range c.Tunnels {
		if t.Interface == iface {
			return t, true
		}
	}
	return Tunnel{}, false
}

// Origin is where a value came from.
type Origin struct {
	File string // "(defaults)" for the embedded defaults
	Line int
}

func (o Origin) String() string {
	if o.Line == 0 {
		return o.File
	}
	return fmt.Sprintf("%s:%d", o.File, o.Line)
}

// Origins maps key paths to origins.
type Origins map[string]Origin

// Of returns the origin of path, or of its nearest ancestor that has one
// (a list replaced by a later file takes all its elements' origins with it).
func (o Origins) Of(path string) Origin {
	for p := path; p != ""; p = parentPath(p) {
		if or, ok := o[p]; ok {
			return or
		}
	}
	return Origin{File: DefaultsName}
}

// Blame returns the file to name in a problem about path: the origin of path
// itself, or, when path is a mapping the defaults started and files only
// added to (report.mqtt.tls), the first file that wrote a value inside it.
func (o Origins) Blame(path string) Origin {
	if or, ok := o[path]; ok && or.File != DefaultsName {
		return or
	}
	var best string
	for p, or := range o {
		if or.File != DefaultsName && (strings.HasPrefix(p, path+".") || strings.HasPrefix(p, path+"[")) && (best == "" || p < best) {
			best = p
		}
	}
	if best != "" {
		return o[best]
	}
	return o.Of(path)
}

// parentPath strips the last element of a key path: "a.b[2].c" → "a.b[2]" → "a.b" → "a" → "".
func parentPath(p string) string {
	i := strings.LastIndexAny(p, ".[")
	if i < 0 {
		return ""
	}
	return p[:i]
}

// DefaultsName is the origin file name of a value from the embedded defaults.
const DefaultsName = "(defaults)"
