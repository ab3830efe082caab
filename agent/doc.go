// Package agent is edgeheal's supervisor: the control loop, the per-target
// health state machines, diagnosis, the remediation ladder with its
// cooldowns and budgets, the event log and the outbox.
//
// agent decides; it never touches the OS itself. Observations come from
// probes and changes go through netfix, both behind small interfaces so that
// every decision is unit-tested with fakes and a fake clock. agent must never
// act on an observation it could not make: a probe that errored leaves the
// state unchanged.
package agent
