// Package probes owns read-only observations of the node: WireGuard peers,
// links, default routes and their changes (rtnetlink), network namespace
// resolution through CRI, MQTT/TCP/DNS probes run inside a pod's network
// namespace, active probes through a tunnel, clock sanity and the UDP
// counters of /proc/net/snmp.
//
// probes must never change the system and never import netfix or agent.
// Broker URLs, TLS files and password files are read with configs' one
// parser. Functions return errors and do not log. (NIC features are read
// by netfix's offload reconciler, which must read before it writes.)
package probes
