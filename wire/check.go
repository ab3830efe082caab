package wire

import "time"

// Check is one health check's current state, as `edgeheal check`,
// `edgeheal status`, /v1/status, the metrics and the MQTT status show it.
// The typed part of its kind (Uplink, Peer, Workload) is set for checks of
// that kind and nil otherwise; the status topic carries checks without it.
type Check struct {
	Kind       string    `json:"kind"`   // KindUplink, KindPeer, KindWorkload, KindPathMTU, KindClock, KindComponent
	Target     string    `json:"target"` // link name, "wg0/<key prefix>", workload name, tunnel interface, component name
	State      string    `json:"state"`  // ok, suspect, down, healing, degraded, ...
	Healthy    bool      `json:"healthy"`
	Detail     string    `json:"detail,omitempty"`
	LastAction string    `json:"last_action,omitempty"`
	Since      time.Time `json:"since,omitzero"`

	Uplink   *UplinkInfo   `json:"uplink,omitempty"`
	Peer     *PeerInfo     `json:"peer,omitempty"`
	Workload *WorkloadInfo `json:"workload,omitempty"`
	PathMTU  *PathMTUInfo  `json:"path_mtu,omitempty"`
}

// Check states that readers act on. A check may be in others (suspect,
// unknown, fixed, ...); Healthy says whether any state is good.
const (
	CheckOK       = "ok"
	CheckDown     = "down"     // confirmed bad: repairs may run
	CheckHealing  = "healing"  // a repair ran and waits for its verification
	CheckDegraded = "degraded" // edgeheal gave up: it alerts only, until the target is healthy again
	// A path-mtu check's states besides ok (and unknown: not measured).
	CheckPathLow     = "low"     // unhealthy: the path carries less than is sent, silently, and nothing fits traffic to it
	CheckPathClamped = "clamped" // healthy: it carries less, and edgeheal's clamp (and tunnel MTU) fit traffic to it
)

// The kinds of checks.
const (
	KindUplink    = "uplink"
	KindPeer      = "peer"
	KindWorkload  = "workload"
	KindPathMTU   = "path-mtu" // a tunnel's path MTU, through it and over its uplink; target: the interface
	KindClock     = "clock"
	KindComponent = "component"
)

// Summary is the check without the typed part of its kind: what the
// status topic carries of it.
func (c Check) Summary() Check {
	c.Uplink, c.Peer, c.Workload, c.PathMTU = nil, nil, nil, nil
	return c
}

// UplinkInfo is what an uplink check shows of the link.
type UplinkInfo struct {
	SelectedBy        []string          `json:"selected_by"`
	TxChecksumGuarded bool              `json:"tx_checksum_guarded"`
	Features          map[string]string `json:"features,omitempty"` // guarded features and their state, as ethtool -k prints it
	// Fighting: something else keeps turning a guarded feature back on
	// (ModemManager, a driver reset, a script); edgeheal keeps turning it
	// off.
	Fighting bool `json:"fighting,omitempty"`
}

// PeerInfo is what a peer check shows of a WireGuard peer. It carries no
// key but the peer's public key.
type PeerInfo struct {
	Interface     string    `json:"interface"`
	PublicKey     string    `json:"public_key"`
	Endpoint      string    `json:"endpoint,omitempty"`
	LastHandshake time.Time `json:"last_handshake,omitzero"` // zero: none since the peer was (re-)added
	// HandshakeAgeSeconds is the age of the session as the detector counts
	// it, when the check was made.
	HandshakeAgeSeconds float64 `json:"handshake_age_seconds"`
	RxBytes             int64   `json:"rx_bytes"`
	TxBytes             int64   `json:"tx_bytes"`
	RxDeltaBytes        int64   `json:"rx_delta_bytes"` // since the previous round (0 in a one-shot check)
	TxDeltaBytes        int64   `json:"tx_delta_bytes"`
	KeepaliveSeconds    float64 `json:"keepalive_seconds"`
	Probe               string  `json:"probe,omitempty"` // the last probe through the tunnel: "ok", "miss: timeout", ...
}

// PathMTUInfo is what a path-mtu check shows: the largest packet that
// crosses each way of the tunnel's path, and what edgeheal changed on the
// node to fit traffic to it.
type PathMTUInfo struct {
	Tunnel *PathInfo `json:"tunnel,omitempty"` // through the tunnel
	Uplink *PathInfo `json:"uplink,omitempty"` // over the uplink, outside the tunnel
	// Table is the nftables table (family inet) that clamps the TCP MSS;
	// empty: none.
	Table string `json:"table,omitempty"`
	// LinkMTUSet is the MTU edgeheal set on the tunnel to match its path,
	// LinkMTUBefore what the tunnel had before; zero: it set none.
	LinkMTUSet    int `json:"link_mtu_set,omitempty"`
	LinkMTUBefore int `json:"link_mtu_before,omitempty"`
	// Fighting: something else (Flannel) keeps setting the tunnel's MTU
	// back; edgeheal leaves it there and keeps the clamp.
	Fighting  bool      `json:"fighting,omitempty"`
	CheckedAt time.Time `json:"checked_at,omitzero"`
	// Because says why the last check ran: traffic a smaller path would
	// hurt, the idle interval, a workload's hint.
	Because string `json:"because,omitempty"`
	// Checks counts the checks since the agent started (each about 6.3 KB
	// on the uplink when the full size crosses).
	Checks uint64 `json:"checks,omitempty"`
	// Watch is the nftables table (family inet) whose counters decide when
	// the path is checked; empty: none (a dry run), checked every interval.
	Watch string `json:"watch,omitempty"`
}

// PathInfo is one way of a path: the link it leaves by, the largest packet
// that link sends and the largest that crossed.
type PathInfo struct {
	Link   string `json:"link,omitempty"`
	Target string `json:"target,omitempty"` // the address the sized echoes go to
	// LinkMTU is the largest packet the link sends: what has to cross (a
	// tunnel's own MTU before edgeheal lowered it).
	LinkMTU int `json:"link_mtu,omitempty"`
	// PathMTU is the largest packet that crossed; zero: not measured.
	PathMTU int `json:"path_mtu,omitempty"`
	// ClampMTU is the path MTU the TCP MSS of the link is clamped to;
	// zero: no clamp.
	ClampMTU int    `json:"clamp_mtu,omitempty"`
	Detail   string `json:"detail,omitempty"` // why it is not measured, or what was seen
}

// WorkloadInfo is what a workload check shows: where its network namespace
// is, the probes from the pod and from the host, and the diagnosis.
type WorkloadInfo struct {
	Diagnosis string `json:"diagnosis,omitempty"` // DiagOverlay, DiagBroker, ...
	// Netns is the namespace found; nil when none is (then NetnsSource says
	// where it was looked for).
	Netns       *Netns `json:"netns,omitempty"`
	NetnsSource string `json:"netns_source,omitempty"`
	PodProbe    *Probe `json:"pod_probe,omitempty"`
	HostProbe   *Probe `json:"host_probe,omitempty"`
	// HostProbeConfigured is false without mqtt.host_broker: overlay cannot
	// be told from broker then.
	HostProbeConfigured bool   `json:"host_probe_configured"`
	FailedRounds        int    `json:"failed_rounds,omitempty"`
	Tunnel              string `json:"tunnel,omitempty"`
}

// The workload diagnoses a reader acts on (the agent has more; a reader
// shows any other as it is).
const (
	DiagOK      = "ok"
	DiagOverlay = "overlay" // the pod fails, the host reaches the broker: the overlay or tunnel is dark
	DiagBroker  = "broker"  // both fail and the broker answered the host with a failure
	DiagUplink  = "uplink"  // both fail and the host got no answer
	// DiagPathMTU: the pod's TCP connects, its TLS handshake stalls without
	// an alert: full-size packets are lost on the path (a path-MTU
	// blackhole); the tunnel's path-mtu check says more.
	DiagPathMTU = "path-mtu"
)

// Netns is where a workload's network namespace was found.
type Netns struct {
	Path      string `json:"netns"`
	Source    string `json:"source"` // "cri", "netns", "pid"
	Pod       string `json:"pod,omitempty"`
	SandboxID string `json:"sandbox_id,omitempty"`
	PID       int    `json:"pid,omitempty"`
	// ID identifies the namespace (its path, the device:inode of its file
	// and, through CRI, the sandbox): a recreated pod gets a new one.
	ID string `json:"netns_id"`
}

// Probe is one active probe's result.
type Probe struct {
	Probe             string  `json:"probe"`  // "mqtt", "tcp", "dns"
	Target            string  `json:"target"` // the address probed
	Class             string  `json:"class"`  // "ok", "timeout", "refused", "tls", "auth", ...
	ReturnCode        int     `json:"return_code,omitempty"`
	Detail            string  `json:"detail,omitempty"`
	LatencySeconds    float64 `json:"latency_seconds"`
	DNSLatencySeconds float64 `json:"dns_latency_seconds,omitempty"`
}

// Node states, from the checks while the agent runs (online, degraded),
// and on the status topic when it does not (offline, lost).
const (
	StateOnline   = "online"   // every check healthy
	StateDegraded = "degraded" // at least one check unhealthy
	StateOffline  = "offline"  // stopped cleanly
	StateLost     = "lost"     // the Last Will: the connection died without a goodbye
)

// NodeState is the node's state from its checks, and how many of them are
// healthy.
func NodeState(checks []Check) (state string, healthy, total int) {
	for _, c := range checks {
		if c.Healthy {
			healthy++
		}
	}
	if healthy < len(checks) {
		return StateDegraded, healthy, len(checks)
	}
	return StateOnline, healthy, len(checks)
}
