package kube

import "time"

// Status is the part of the agent's /v1/status (agent/httpapi's
// StatusResponse) the reporter reads.
type Status struct {
	Node         string    `json:"node"`
	Ready        bool      `json:"ready"`
	ReadyDetail  string    `json:"ready_detail"`
	LastProgress time.Time `json:"last_progress"`
	Checks       []Check   `json:"checks"`
}

// Check is one of the agent's checks (agent.Check), as far as read here.
type Check struct {
	Kind       string         `json:"kind"`
	Target     string         `json:"target"`
	State      string         `json:"state"`
	Healthy    bool           `json:"healthy"`
	Detail     string         `json:"detail"`
	LastAction string         `json:"last_action"`
	Since      time.Time      `json:"since"`
	Workload   *WorkloadCheck `json:"workload"`
}

// WorkloadCheck is a workload check's diagnosis (agent.WorkloadInfo).
type WorkloadCheck struct {
	Diagnosis string `json:"diagnosis"`
}

// The agent's names this package reads (agent/check.go, tunnel_state.go,
// workload_diagnosis.go, offload_fight.go); kube_test.go holds them equal.
const (
	kindUplink   = "uplink"
	kindPeer     = "peer"
	kindWorkload = "workload"

	peerDown     = "down"
	peerHealing  = "healing"
	peerDegraded = "degraded"

	workloadDown = "down"

	diagOverlay = "overlay"
	diagBroker  = "broker"
	diagUplink  = "uplink"

	// fightDetail starts the part of an uplink check's detail that says
	// something keeps turning the offload back on.
	fightDetail = "fighting: "
)
