package agent

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/edgeheal/edgeheal/probes"
	"github.com/edgeheal/edgeheal/wire"
)

// evidenceSources are where an incident's evidence bundle is read from.
// A nil field leaves its section out. Collecting only reads.
type evidenceSources struct {
	WG      probes.WireGuardReader // WireGuard peers of Tunnels
	Tunnels []string
	Net     interface {
		Routes() ([]probes.RouteInfo, error)
		LinkStats() ([]probes.LinkStat, error)
	}
	SNMPPath string              // /proc/net/snmp of the agent's namespace; "" leaves the udp section out
	Checks   func() []wire.Check // the last probe results and uplink features, as the checks hold them
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

// Collect reads every section it has a source for, each on a goroutine of
// its own, and returns by ctx's deadline: a section that could not be
// read holds {"error": "..."}, and one that gave no answer in time holds
// {"error": "gave no answer within ..."} while its read goes on alone.
// Evidence is best effort and never holds an event up.
func (s evidenceSources) Collect(ctx context.Context) map[string]any {
	var mu sync.Mutex
	out := map[string]any{}
	pending := map[string]bool{}
	var wg sync.WaitGroup
	section := func(name string, read func() any) {
		mu.Lock()
		pending[name] = true
		mu.Unlock()
		wg.Go(func() {
			v := read()
			mu.Lock()
			defer mu.Unlock()
			if pending[name] { // not given up on yet
				out[name] = v
				delete(pending, name)
			}
		})
	}
	if s.WG != nil && len(s.Tunnels) > 0 {
		section("wireguard_peers", s.peers)
	}
	if s.Net != nil {
		section("routes", func() any { return orError(s.Net.Routes()) })
		section("links", func() any { return orError(s.Net.LinkStats()) })
	}
	if s.SNMPPath != "" {
		section("udp", func() any { return orError(probes.ReadUDPCounters(s.SNMPPath)) })
	}
	if s.Checks != nil {
		var uplinks, probesSec []wire.Check
		for _, c := range s.Checks() {
			if c.Kind == wire.KindUplink {
				uplinks = append(uplinks, c)
			} else {
				probesSec = append(probesSec, c)
			}
		}
		out["uplinks"] = uplinks
		out["probes"] = probesSec
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
		mu.Lock()
		for name := range pending {
			out[name] = errSection(fmt.Errorf("gave no answer within the evidence deadline (%v)", ctx.Err()))
		}
		clear(pending)
		mu.Unlock()
	}
	mu.Lock()
	defer mu.Unlock()
	return out
}

// peers is the wireguard_peers section: each tunnel's peers, or why not.
func (s evidenceSources) peers() any {
	now := time.Now
	if s.Now != nil {
		now = s.Now
	}
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
	return peers
}

func orError[T any](v T, err error) any {
	if err != nil {
		return errSection(err)
	}
	return v
}

func errSection(err error) map[string]any { return map[string]any{"error": err.Error()} }
