package lab

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"

	"golang.zx2c4.com/wireguard/wgctrl/wgtypes"
)

// EdgeUplink is the edge's uplink link name (the modem's veth).
func (l *Lab) EdgeUplink() string { return l.link("up") }

// EdgeWG is the edge's WireGuard interface name.
func (l *Lab) EdgeWG() string { return l.link("wg") }

// CloudWG is the cloud's WireGuard interface name.
func (l *Lab) CloudWG() string { return l.link("cwg") }

// EdgePodLink is the edge's side of the pod veth.
func (l *Lab) EdgePodLink() string { return l.link("pe") }

// CloudPublicKey is the cloud's WireGuard public key (the edge's peer).
func (l *Lab) CloudPublicKey() wgtypes.Key { return l.cloudKey.PublicKey() }

// EdgePublicKey is the edge's WireGuard public key (the cloud's peer).
func (l *Lab) EdgePublicKey() wgtypes.Key { return l.edgeKey.PublicKey() }

// EdgeTunnelAddr is the edge's address on its WireGuard interface.
func (l *Lab) EdgeTunnelAddr() netip.Addr { return edgeTunnelAddr.Addr() }

// CloudTunnelAddr is the cloud's address on its WireGuard interface; the
// pod reaches it only through the tunnel.
func (l *Lab) CloudTunnelAddr() netip.Addr { return cloudTunnelAddr.Addr() }

// PodAddr is the pod's address.
func (l *Lab) PodAddr() netip.Addr { return podAddr.Addr() }

// EdgeUplinkAddr is the edge's address on its uplink.
func (l *Lab) EdgeUplinkAddr() netip.Addr { return l.edgeUplinkPrefix().Addr() }

// CloudPublicAddr is the cloud's current public (uplink side) address; the
// edge host reaches it directly over the uplink. MoveCloudEndpoint changes it.
func (l *Lab) CloudPublicAddr() netip.Addr {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.cloudPublic.Addr()
}

// CloudEndpoint is the cloud's WireGuard endpoint at its current address.
func (l *Lab) CloudEndpoint() netip.AddrPort {
	return netip.AddrPortFrom(l.CloudPublicAddr(), WireGuardPort)
}

// BrokerTunnelAddr is the broker as pods reach it, through the tunnel.
func (l *Lab) BrokerTunnelAddr() netip.AddrPort {
	return netip.AddrPortFrom(l.CloudTunnelAddr(), BrokerPort)
}

// BrokerPublicAddr is the broker as agents reach it, over the uplink. The
// broker listens on every cloud address, so this follows MoveCloudEndpoint.
func (l *Lab) BrokerPublicAddr() netip.AddrPort {
	return netip.AddrPortFrom(l.CloudPublicAddr(), BrokerPort)
}

// HostsFile is the edge namespace's hosts file, which `ip netns exec`
// (and Command) mounts over /etc/hosts. It maps CloudHost to the cloud's
// current public address and is rewritten in place by MoveCloudEndpoint.
// Next to it, resolv.conf points at the edge's own loopback, where nothing
// answers: names not in the hosts file fail at once.
func (l *Lab) HostsFile() string {
	return filepath.Join(etcNetnsDir, l.NetnsName(Edge), "hosts")
}

// writeHosts points CloudHost at the cloud's current public address in
// HostsFile, and gives the edge a resolv.conf that fails lookups at once.
func (l *Lab) writeHosts() error {
	p := l.HostsFile()
	if err := mkdirAll(filepath.Dir(p)); err != nil {
		return fmt.Errorf("creating %s: %w", filepath.Dir(p), err)
	}
	content := fmt.Sprintf("127.0.0.1\tlocalhost\n::1\tlocalhost\n%s\t%s\n", l.CloudPublicAddr(), CloudHost)
	// In place (same inode): a running `ip netns exec` bind mount sees it.
	f, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return fmt.Errorf("writing %s: %w", p, err)
	}
	_, err = f.WriteString(content)
	if err := errors.Join(err, f.Close()); err != nil {
		return err
	}
	// No DNS server in the lab: lookups that miss the hosts file fail at
	// once on the edge's loopback instead of timing out toward the
	// machine's own resolver.
	rc := filepath.Join(filepath.Dir(p), "resolv.conf")
	if _, err := os.Stat(rc); err == nil {
		return nil
	}
	return os.WriteFile(rc, []byte("nameserver 127.0.0.1\noptions timeout:1 attempts:1\n"), 0o644)
}

// Info is the lab's names and addresses, as written to <RunDir>/lab.json
// for scripts and separate CLI invocations.
type Info struct {
	Prefix          string          `json:"prefix"`
	RunDir          string          `json:"run_dir"`
	Broker          BrokerKind      `json:"broker"`
	Netns           map[Node]string `json:"netns"` // paths
	EdgeUplink      string          `json:"edge_uplink"`
	EdgeWG          string          `json:"edge_wg"`
	CloudWG         string          `json:"cloud_wg"`
	EdgePublicKey   string          `json:"edge_public_key"`
	CloudPublicKey  string          `json:"cloud_public_key"`
	PodAddr         string          `json:"pod_addr"`
	EdgeTunnelAddr  string          `json:"edge_tunnel_addr"`
	CloudTunnelAddr string          `json:"cloud_tunnel_addr"`
	EdgeUplinkAddr  string          `json:"edge_uplink_addr"`
	CloudPublicAddr string          `json:"cloud_public_addr"`
	CloudEndpoint   string          `json:"cloud_endpoint"`
	CloudHost       string          `json:"cloud_host"`
	HostsFile       string          `json:"hosts_file"`
	EdgeWGConfig    string          `json:"edge_wg_config"`
	BrokerTunnel    string          `json:"broker_tunnel"`
	BrokerPublic    string          `json:"broker_public"`
	NAT             bool            `json:"nat,omitempty"` // the carrier NAT hop is there
}

// Info returns the lab's names and addresses.
func (l *Lab) Info() Info {
	in := Info{
		Prefix:          l.prefix,
		RunDir:          l.runDir,
		Broker:          l.opts.Broker,
		Netns:           map[Node]string{},
		EdgeUplink:      l.EdgeUplink(),
		EdgeWG:          l.EdgeWG(),
		CloudWG:         l.CloudWG(),
		EdgePublicKey:   l.EdgePublicKey().String(),
		CloudPublicKey:  l.CloudPublicKey().String(),
		PodAddr:         l.PodAddr().String(),
		EdgeTunnelAddr:  l.EdgeTunnelAddr().String(),
		CloudTunnelAddr: l.CloudTunnelAddr().String(),
		EdgeUplinkAddr:  l.EdgeUplinkAddr().String(),
		CloudPublicAddr: l.CloudPublicAddr().String(),
		CloudEndpoint:   l.CloudEndpoint().String(),
		CloudHost:       CloudHost,
		HostsFile:       l.HostsFile(),
		EdgeWGConfig:    l.EdgeWGConfig(),
		BrokerTunnel:    l.BrokerTunnelAddr().String(),
		BrokerPublic:    l.BrokerPublicAddr().String(),
		NAT:             l.opts.NAT,
	}
	for _, n := range l.nodes() {
		in.Netns[n] = l.NetnsPath(n)
	}
	return in
}
