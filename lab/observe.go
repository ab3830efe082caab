package lab

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/vishvananda/netlink"
)

// UplinkPluggedAt is when the edge uplink was last created: at start or by
// the last Replug, once it had its address and route.
func (l *Lab) UplinkPluggedAt() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.pluggedAt
}

// UplinkRequestedAt is when the lab last asked the kernel to create the
// edge uplink (at start or in Replug), by the monotonic clock that
// ktrace's events carry: the start of a re-plug's offload exposure.
func (l *Lab) UplinkRequestedAt() time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.plugAsked
}

// WaitUplinkTxChecksumOff blocks until every TX checksum feature of the
// edge uplink is off and returns when it saw that, or ctx's error. It
// watches link notifications in the edge namespace and also polls every
// 5 ms; each look reads the features (about 4 ms), so the time it returns
// is at most about 10 ms late.
func (l *Lab) WaitUplinkTxChecksumOff(ctx context.Context) (time.Time, error) {
	updates := make(chan netlink.LinkUpdate, 64)
	done := make(chan struct{})
	defer close(done)
	ns := l.ns[Edge]
	err := netlink.LinkSubscribeWithOptions(updates, done, netlink.LinkSubscribeOptions{Namespace: &ns})
	if err != nil {
		return time.Time{}, fmt.Errorf("watching edge links: %w", err)
	}
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for {
		on, err := l.UplinkTxChecksumOn()
		now := time.Now()
		if err == nil && !on {
			return now, nil
		}
		select {
		case <-ctx.Done():
			return time.Time{}, ctx.Err()
		case <-updates:
		case <-tick.C:
		}
	}
}

// Sample is one telemetry message: when the pod sent it and when the cloud
// received it (zero: not received).
type Sample struct {
	Seq      int       `json:"seq"`
	Sent     time.Time `json:"sent"`
	Received time.Time `json:"received,omitzero"`
}

// Samples returns every telemetry message sent at or after from, for
// charts of delivery over time.
func (l *Lab) Samples(from time.Time) []Sample {
	l.mu.Lock()
	t := l.tel
	l.mu.Unlock()
	if t == nil {
		return nil
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	var out []Sample
	for i, s := range t.sent {
		if s.Before(from) {
			continue
		}
		out = append(out, Sample{Seq: i, Sent: s, Received: t.recv[i]})
	}
	return out
}

// EdgeWGConfig is a wg-quick style configuration of the edge's tunnel,
// with the cloud's endpoint given by name (CloudHost), in the run
// directory. It is what wireguard-tools' reresolve-dns.sh reads:
//
//	ip netns exec <edge ns> reresolve-dns.sh <EdgeWGConfig()>
func (l *Lab) EdgeWGConfig() string {
	return filepath.Join(l.runDir, l.EdgeWG()+".conf")
}

func (l *Lab) writeEdgeWGConfig() error {
	ka := ""
	if l.opts.Keepalive > 0 {
		ka = fmt.Sprintf("PersistentKeepalive = %d\n", int(l.opts.Keepalive.Seconds()))
	}
	conf := fmt.Sprintf(`# edgeheal lab %s: the edge's tunnel (generated; for reresolve-dns.sh and wg)
[Interface]
PrivateKey = %s
Address = %s

[Peer]
PublicKey = %s
Endpoint = %s:%d
AllowedIPs = %s
%s`, l.prefix, l.edgeKey, edgeTunnelAddr, l.CloudPublicKey(), CloudHost, WireGuardPort, cloudTunnelAddr.Masked(), ka)
	if err := os.WriteFile(l.EdgeWGConfig(), []byte(conf), 0o600); err != nil {
		return fmt.Errorf("writing %s: %w", l.EdgeWGConfig(), err)
	}
	return nil
}
