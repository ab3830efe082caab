// Package netfix owns the actions that change the system: the offload
// reconciler (PlanOffload computes the desired state of a link's features
// once, EnsureOffload applies it and reads it back), WireGuard keepalive,
// forced handshake and endpoint, link bounce, systemd unit restart.
//
// Each action is named EnsureX or ForceX, reads before it writes, is safe to
// run twice with the same input, and returns what it changed. netfix holds no
// thresholds, retries or sleeps (deciding is the agent's job), never imports
// probes or agent, returns errors and does not log.
package netfix
