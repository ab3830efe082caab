// Package kube tells a node's Kubernetes API server what edgeheal sees:
// the node condition EdgeOverlayHealthy (condition.go), events on the Node
// for incidents, actions and recoveries, aggregated and rate-limited the
// way kubelet's recorder does it (events.go), and the optional taint
// edgeheal.io/overlay-dark:NoSchedule (taint.go). The decisions are pure
// functions of the agent's /v1/status (status.go); client.go is the one
// place that talks to the API server, with client-go's clientcmd and rest
// and its own small JSON (docs/performance.md, "What client-go costs");
// reporter.go runs it all, never waiting on the API server in its polls.
//
// It reads the agent's JSON, not its code: nothing of agent, probes or
// netfix is linked (a test holds the state names in step with agent's).
// It never sets a NoExecute taint, and touches no Node but its own.
package kube
