// Package lab builds edgeheal's test network on one machine: network
// namespaces pod — edge — modem — cloud linked by veth pairs, wireguard-go
// on edge and cloud driven through wgctrl, a frame relay in the modem that
// reproduces a NIC mishandling offloaded checksums, an MQTT broker at the
// cloud and telemetry through the tunnel.
//
//	[pod] 10.77.1.2 ── 10.77.1.1 [edge] 192.0.2.2 ── [modem] ── 192.0.2.1 [cloud]
//	                          wg 10.77.0.2 ═══════ tunnel ═══════ wg 10.77.0.1
//
// The pod routes only 10.77.0.0/24, through the edge and the tunnel; the
// edge reaches the cloud's public address directly over its uplink (the
// path the agent reports over). The modem copies frames verbatim between
// its two veths on AF_PACKET sockets and never completes a checksum the
// sender left to offload: while the edge uplink has TX checksum offload on
// (the veth default), UDP from the edge reaches the cloud with a bad
// checksum and is dropped there (UdpInCsumErrors rises). The cloud's own
// uplink has offload off, so only edge → cloud traffic carries the fault.
// The modem also behaves as a carrier NAT for UDP: the edge receives UDP
// only from addresses and ports it has sent to. On request it drops
// (blackhole, loss) or delays frames. With Options.NAT a carrier namespace
// between the modem and the cloud masquerades the edge with nftables and
// real conntrack, and can pin or flush its mappings (carrier.go).
//
// Everything is named with a per-run prefix (namespaces
// /var/run/netns/<prefix>-<node>, links <prefix>-up, <prefix>-wg, ...;
// link names stay within 15 characters because wireguard-go's UAPI sockets
// in /var/run/wireguard are shared by the whole machine). The lab only ever
// touches namespaces, links, processes and files it created, and Close
// removes all of them, also after a failed start; Leftovers and Sweep find
// and remove what a killed process left behind.
//
// The lab needs root. cmd/edgeheal-lab uses Start and Close; tests use
// internal/testsupport/labtest, which skips without root and closes the
// lab in t.Cleanup.
package lab
