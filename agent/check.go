package agent

import (
	"time"

	"github.com/edgeheal/edgeheal/probes"
)

// Check is one health check's current state, as `edgeheal check`,
// `edgeheal status`, /v1/status, the metrics and the MQTT status show it.
// The typed part of its kind (Uplink, Peer, Workload) is set for checks of
// that kind and nil otherwise.
type Check struct {
	Kind       string    `json:"kind"`   // KindUplink, KindPeer, KindWorkload, KindClock, KindComponent
	Target     string    `json:"target"` // link name, "wg0/<key prefix>", workload name, component name
	State      string    `json:"state"`  // ok, suspect, down, healing, degraded, ...
	Healthy    bool      `json:"healthy"`
	Detail     string    `json:"detail,omitempty"`
	LastAction string    `json:"last_action,omitempty"`
	Since      time.Time `json:"since,omitzero"`

	Uplink   *UplinkInfo   `json:"uplink,omitempty"`
	Peer     *PeerInfo     `json:"peer,omitempty"`
	Workload *WorkloadInfo `json:"workload,omitempty"`
}

// The kinds of checks.
const (
	KindUplink    = "uplink"
	KindPeer      = "peer"
	KindWorkload  = "workload"
	KindClock     = "clock"
	KindComponent = "component"
)

// UplinkInfo is what an uplink check shows of the link.
type UplinkInfo struct {
	SelectedBy        []string          `json:"selected_by"`
	TxChecksumGuarded bool              `json:"tx_checksum_guarded"`
	Features          map[string]string `json:"features,omitempty"` // guarded features and their state
}

// PeerInfo is what a peer check shows of a WireGuard peer. It carries no
// key but the peer's public key.
type PeerInfo struct {
	Interface     string    `json:"interface"`
	PublicKey     string    `json:"public_key"`
	Endpoint      string    `json:"endpoint,omitempty"`
	LastHandshake time.Time `json:"last_handshake,omitzero"` // zero: none since the peer was (re-)added
	// HandshakeAgeSeconds is the age of the session as the detector counts
	// it (see peerSignals.handshakeAge), when the check was made.
	HandshakeAgeSeconds float64 `json:"handshake_age_seconds"`
	RxBytes             int64   `json:"rx_bytes"`
	TxBytes             int64   `json:"tx_bytes"`
	RxDeltaBytes        int64   `json:"rx_delta_bytes"` // since the previous round (0 in a one-shot check)
	TxDeltaBytes        int64   `json:"tx_delta_bytes"`
	KeepaliveSeconds    float64 `json:"keepalive_seconds"`
	Probe               string  `json:"probe,omitempty"` // the last probe through the tunnel: "ok", "miss: timeout", ...
}

// WorkloadInfo is what a workload check shows: where its network namespace
// is, the probes from the pod and from the host, and the diagnosis.
type WorkloadInfo struct {
	Diagnosis WorkloadDiagnosis `json:"diagnosis,omitempty"`
	// Netns is the namespace found; nil when none is (then NetnsSource says
	// where it was looked for).
	Netns       *probes.Target `json:"netns,omitempty"`
	NetnsSource string         `json:"netns_source,omitempty"`
	PodProbe    *probes.Result `json:"pod_probe,omitempty"`
	HostProbe   *probes.Result `json:"host_probe,omitempty"`
	// HostProbeConfigured is false without mqtt.host_broker: overlay cannot
	// be told from broker then.
	HostProbeConfigured bool   `json:"host_probe_configured"`
	FailedRounds        int    `json:"failed_rounds,omitempty"`
	Tunnel              string `json:"tunnel,omitempty"`
}

// Node states, from the checks.
const (
	StateOnline   = "online"   // every check healthy
	StateDegraded = "degraded" // at least one check unhealthy
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
