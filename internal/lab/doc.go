// Package lab builds edgeheal's test network on one machine: network
// namespaces pod — edge — modem — cloud linked by veth pairs, wireguard-go
// on edge and cloud driven through wgctrl, a frame relay in the modem that
// reproduces a NIC mishandling offloaded checksums, an MQTT broker at the
// cloud and telemetry through the tunnel.
//
// The lab only ever touches namespaces, links, processes and files it
// created itself, and removes all of them on Close, also after a failure.
package lab
