// Package probes owns read-only observations of the node: NIC features,
// WireGuard peers, network namespace resolution, MQTT/TCP/DNS probes run
// inside a pod's network namespace, and clock sanity.
//
// probes must never change the system and never import netfix or agent.
// "Unsupported here" (EOPNOTSUPP from ethtool on a veth) is data, not an
// error. Functions return errors and do not log.
package probes
