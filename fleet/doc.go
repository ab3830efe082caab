// Package fleet is the cloud side's model of a fleet of edgeheal agents:
// what each node's retained status and events say, kept per node (state
// and since when, last seen, session, checks, open incidents, recent
// events and actions, counts by kind over 24 h), with stale and duplicated
// messages ignored.
//
// It owns the reading of the wire format (wire.go): the JSON the agents
// publish on <prefix>/<node>/status and <prefix>/<node>/event
// (docs/operations/reporting.md, "MQTT"). It never imports the agent: the JSON is
// the contract, and a test holds the two sides to it. It does no I/O:
// fleet/source feeds it from the broker and fleet/web serves it.
package fleet
