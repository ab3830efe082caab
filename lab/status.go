package lab

import (
	"errors"
	"fmt"
	"time"
)

// Status is a snapshot of the lab for `edgeheal-lab status`.
type Status struct {
	Prefix     string    `json:"prefix"`
	Fault      Fault     `json:"fault"`
	FaultUntil time.Time `json:"fault_until,omitzero"`
	// UplinkTxChecksum is the edge uplink's changeable TX checksum
	// features and whether each is on (on: the fault is active).
	Uplink           string          `json:"uplink"`
	UplinkTxChecksum map[string]bool `json:"uplink_tx_checksum"`
	Tunnels          []TunnelStatus  `json:"tunnels"`
	// CloudUDPInCsumErrors counts datagrams the cloud dropped for a bad checksum.
	CloudUDPInCsumErrors uint64     `json:"cloud_udp_in_csum_errors"`
	Broker               BrokerKind `json:"broker"`
	BrokerRunning        bool       `json:"broker_running"`
	CloudPublicAddr      string     `json:"cloud_public_addr"`
	Telemetry            *Stats     `json:"telemetry,omitempty"`
	// Carrier is the carrier NAT's public side, stuck mappings and the
	// edge's UDP mappings; nil without Options.NAT.
	Carrier *NATStatus `json:"carrier,omitempty"`
}

// TunnelStatus is one WireGuard device.
type TunnelStatus struct {
	Node      Node         `json:"node"`
	Interface string       `json:"interface"`
	Peers     []PeerStatus `json:"peers"`
}

// PeerStatus is one WireGuard peer as wgctrl reports it.
type PeerStatus struct {
	PublicKey string    `json:"public_key"`
	Endpoint  string    `json:"endpoint,omitempty"`
	Handshake time.Time `json:"last_handshake,omitzero"`
	// HandshakeAgeSeconds is -1 when there never was a handshake.
	HandshakeAgeSeconds float64 `json:"handshake_age_seconds"`
	RxBytes             int64   `json:"rx_bytes"`
	TxBytes             int64   `json:"tx_bytes"`
	KeepaliveSeconds    float64 `json:"keepalive_seconds"`
}

// Status reads the current state of the lab. Parts it could not read are
// left empty and their errors joined.
func (l *Lab) Status() (Status, error) {
	now := time.Now()
	f, until := l.Fault()
	s := Status{
		Prefix:          l.prefix,
		Fault:           f,
		FaultUntil:      until,
		Uplink:          l.EdgeUplink(),
		Broker:          l.opts.Broker,
		BrokerRunning:   l.BrokerRunning(),
		CloudPublicAddr: l.CloudPublicAddr().String(),
	}
	var errs []error
	var err error
	if s.UplinkTxChecksum, err = l.UplinkTxChecksum(); err != nil {
		errs = append(errs, err)
	}
	if s.CloudUDPInCsumErrors, err = l.CloudUDPInCsumErrors(); err != nil {
		errs = append(errs, fmt.Errorf("reading cloud snmp: %w", err))
	}
	for _, d := range []struct {
		n    Node
		name string
	}{{Edge, l.EdgeWG()}, {Cloud, l.CloudWG()}} {
		dev, err := l.wg.Device(d.name)
		if err != nil {
			errs = append(errs, fmt.Errorf("reading %s: %w", d.name, err))
			continue
		}
		ts := TunnelStatus{Node: d.n, Interface: d.name}
		for _, p := range dev.Peers {
			ps := PeerStatus{
				PublicKey:           p.PublicKey.String(),
				Handshake:           p.LastHandshakeTime,
				HandshakeAgeSeconds: -1,
				RxBytes:             p.ReceiveBytes,
				TxBytes:             p.TransmitBytes,
				KeepaliveSeconds:    p.PersistentKeepaliveInterval.Seconds(),
			}
			if p.Endpoint != nil {
				ps.Endpoint = p.Endpoint.String()
			}
			if !p.LastHandshakeTime.IsZero() {
				ps.HandshakeAgeSeconds = now.Sub(p.LastHandshakeTime).Seconds()
			}
			ts.Peers = append(ts.Peers, ps)
		}
		s.Tunnels = append(s.Tunnels, ts)
	}
	if s.Carrier, err = l.natStatus(); err != nil {
		errs = append(errs, fmt.Errorf("reading the carrier: %w", err))
	}
	if !l.opts.NoTelemetry {
		st := l.Stats()
		s.Telemetry = &st
	}
	return s, errors.Join(errs...)
}

// EdgeHandshake is the edge peer's last handshake with the cloud (zero:
// never).
func (l *Lab) EdgeHandshake() (time.Time, error) {
	dev, err := l.wg.Device(l.EdgeWG())
	if err != nil {
		return time.Time{}, fmt.Errorf("reading %s: %w", l.EdgeWG(), err)
	}
	for _, p := range dev.Peers {
		if p.PublicKey == l.CloudPublicKey() {
			return p.LastHandshakeTime, nil
		}
	}
	return time.Time{}, fmt.Errorf("%s has no peer %s", l.EdgeWG(), l.CloudPublicKey())
}
