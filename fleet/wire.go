package fleet

import "github.com/edgeheal/edgeheal/wire"

// The states a node can be in: the ones its status carries (package wire)
// and unknown, a node whose events were seen before any status.
const (
	StateOnline   = wire.StateOnline   // connected, every check healthy
	StateDegraded = wire.StateDegraded // connected, a check unhealthy
	StateOffline  = wire.StateOffline  // stopped cleanly
	StateLost     = wire.StateLost     // the Last Will: the connection died
	StateUnknown  = "unknown"          // events seen, no status yet
)

// States are the node states in the order the page and metrics list them.
var States = []string{StateOnline, StateDegraded, StateLost, StateOffline, StateUnknown}

// knownState reports whether a status's state is one of the wire's.
func knownState(s string) bool {
	return s == StateOnline || s == StateDegraded || s == StateOffline || s == StateLost
}
