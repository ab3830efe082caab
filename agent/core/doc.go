// Package core is the small contract every part of the agent depends on:
// what a supervised component is and how it reports its health (Component,
// Health, Checker), the event type and how events leave a component
// (Emit), and the agent's seam to the system (OS: a small interface for
// each kind of handle). The components (agent/offload, agent/tunnel,
// agent/workload, agent/clock) and the reporting parts (agent/recorder,
// agent/outbox, agent/mqtt, agent/httpapi, agent/metrics) import core and
// never each other; agent wires them together.
//
// core decides nothing and opens nothing: it holds types, and the one
// helper every goroutine owner needs (Recovered).
package core
