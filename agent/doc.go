// Package agent is edgeheal's supervisor and the wiring of its parts. The
// parts live in packages of their own over a small core (agent/core: the
// component contract, health, events, the OS seam):
//
//	agent/offload   the offload guard: TX checksum offload off on the uplinks
//	agent/tunnel    one monitor per WireGuard tunnel and its repair ladder
//	agent/workload  the workloads' brokers, probed from the pods' namespaces
//	agent/clock     the clock guard the tunnels' ladders read
//	agent/recorder  where events go: a queue that never blocks, drained to
//	                the evidence store, the metrics, the log and the outbox
//
// Each runs as a core.Component under the supervisor, which reports, backs
// off and restarts one that fails or panics while the others keep going.
// The wiring is the few lines by which they reach each other (an offload
// fix nudges the tunnels, a workload suspects its tunnel, reassert runs
// the offload guard): the components never import each other.
//
// agent never opens the OS itself: every handle comes through core.OS,
// which agent/system implements for Linux and agent/core/coretest fakes.
// The reporting parts (outbox, mqtt, httpapi, metrics, evidence) are
// components too; cmd/edgeheal wires them in with Agent.Report.
package agent
