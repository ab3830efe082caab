package agent

import (
	"time"

	"github.com/edgeheal/edgeheal/probes"
)

// EvidenceSources are where an incident's evidence bundle is read from.
// A nil field leaves its section out. Collecting only reads.
type EvidenceSources struct {
	WG      probes.WireGuardReader // WireGuard peers of Tunnels
	Tunnels []string
	Net     interface {
		Routes() ([]probes.RouteInfo, error)
		LinkStats() ([]probes.LinkStat, error)
	}
	SNMPPath string         // /proc/net/snmp of the agent's namespace; "" leaves the udp section out
	Checks   func() []Check // the last probe results and uplink features, as the checks hold them
	Now      func() time.Time
}

// evidencePeer is a WireGuard peer as evidence: no keys beyond an 8-character
// public key prefix.
type evidencePeer struct {
	Peer             string  `json:"peer"`
	Endpoint         string  `json:"endpoint,omitempty"`
	HandshakeAgeSecs float64 `json:"handshake_age_seconds,omitempty"`
	NoHandshake      bool    `json:"no_handshake,omitempty"`
	RxBytes          int64   `json:"rx_bytes"`
	TxBytes          int64   `json:"tx_bytes"`
	KeepaliveSecs    float64 `json:"keepalive_seconds"`
}

// Collect reads every section it has a source for. A section that could
// not be read holds {"error": "..."} instead: evidence is best effort and
// never stops an event.
func (s EvidenceSources) Collect() map[string]any {
	now := time.Now
	if s.Now != nil {
		now = s.Now
	}
	out := map[string]any{}
	if s.WG != nil && len(s.Tunnels) > 0 {
		peers := map[string]any{}
		for _, iface := range s.Tunnels {
			ps, err := probes.ReadPeers(s.WG, iface)
			if err != nil {
				peers[iface] = errSection(err)
				continue
			}
			list := make([]evidencePeer, 0, len(ps))
			for _, p := range ps {
				ep := evidencePeer{Peer: p.PublicKey.String()[:8], RxBytes: p.RxBytes, TxBytes: p.TxBytes, KeepaliveSecs: p.Keepalive.Seconds()}
				if p.Endpoint != nil {
					ep.Endpoint = p.Endpoint.String()
				}
				if p.LastHandshake.IsZero() {
					ep.NoHandshake = true
				} else {
					ep.HandshakeAgeSecs = now().Sub(p.LastHandshake).Seconds()
				}
				list = append(list, ep)
			}
			peers[iface] = list
		}
		out["wireguard_peers"] = peers
	}
	if s.Net != nil {
		if rs, err := s.Net.Routes(); err != nil {
			out["routes"] = errSection(err)
		} else {
			out["routes"] = rs
		}
		if ls, err := s.Net.LinkStats(); err != nil {
			out["links"] = errSection(err)
		} else {
			out["links"] = ls
		}
	}
	if s.SNMPPath != "" {
		if c, err := probes.ReadUDPCounters(s.SNMPPath); err != nil {
			out["udp"] = errSection(err)
		} else {
			out["udp"] = c
		}
	}
	if s.Checks != nil {
		var uplinks, probesSec []Check
		for _, c := range s.Checks() {
			if c.Kind == KindUplink {
				uplinks = append(uplinks, c)
			} else {
				probesSec = append(probesSec, c)
			}
		}
		out["uplinks"] = uplinks
		out["probes"] = probesSec
	}
	return out
}

func errSection(err error) map[string]any { return map[string]any{"error": err.Error()} }

// OpensIncident reports whether e opens an incident, the moment an evidence
// bundle is worth taking.
func OpensIncident(e Event) bool {
	return e.Kind == "incident" || e.Kind == EventOffloadDrift
}
