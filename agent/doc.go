// Package agent is edgeheal's supervisor and its components: the offload
// guard, one monitor per tunnel, the workload monitor and the clock guard,
// each a Component run under the Supervisor, which reports, backs off and
// restarts one that fails or panics while the others keep going. Around
// them: the per-target state machines, diagnosis, the remediation ladder
// with its cooldowns and budgets, events and the Recorder.
//
// agent decides; it never opens the OS itself. Every OS handle comes
// through the small interfaces of OS (os.go), which agent/system
// implements for Linux and tests fake; observations are made with probes
// and changes with netfix over those handles. agent must never act on an
// observation it could not make: a probe that errored leaves the state
// unchanged. Policy reads time from OS.Clock.
//
// The reporting parts live in packages of their own (outbox, mqtt,
// httpapi, metrics, evidence) and are Components too; cmd/edgeheal wires
// them in with Agent.Report.
package agent
