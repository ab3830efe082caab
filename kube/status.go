package kube

import "github.com/edgeheal/edgeheal/wire"

// Status is the agent's local status, /v1/status (package wire); the
// reporter reads its readiness, progress and checks.
type Status = wire.LocalStatus

// Check is one of the agent's checks.
type Check = wire.Check
