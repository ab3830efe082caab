package netfix

// Result says what one action did. Changed is false when the system was
// already as wanted (the action is idempotent) or when DryRun was set.
type Result struct {
	Action  string   // "offload-off", "keepalive", "handshake", "rebind", "endpoint", "bounce", "restart-unit"
	Target  string   // link, "iface/peer-key-prefix", unit
	Changed bool     // the system was changed
	DryRun  bool     // a change was needed but not made
	Changes []string // what changed (or would have), e.g. "tx-checksum-ip-generic: on -> off"
	Fixed   []string // wanted changes the driver or kernel does not allow (reported, not errors)
}
