// Package report owns how edgeheal tells the world what it sees and does:
// the durable event outbox, the MQTT publisher (retained status, Last Will,
// events), incident evidence bundles, Prometheus metrics, the local HTTP
// endpoints (/livez, /readyz, /metrics, /v1/status) and the client of
// /v1/status used by `edgeheal status`, and systemd notifications.
//
// report observes the agent through small interfaces and never decides
// anything: it must never change the system it reports on, and nothing in it
// may block the agent's control loop on the network or the broker. The only
// synchronous work the loop does here is Outbox.Append (a write and an fsync).
// agent never imports report; cmd/edgeheal wires the two together.
package report
