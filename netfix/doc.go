// Package netfix owns the actions that change the system: TX checksum
// offload off, WireGuard keepalive, forced handshake, link bounce, systemd
// unit restart.
//
// Each action is named EnsureX or ForceX, reads before it writes, is safe to
// run twice with the same input, and returns what it changed. netfix holds no
// thresholds, retries or sleeps (deciding is the agent's job), never imports
// probes or agent, returns errors and does not log.
package netfix
