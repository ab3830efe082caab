// Package wire declares the JSON that edgeheal's programs exchange: the
// checks, the node's status (the retained MQTT status topic and the
// agent's local /v1/status), events and the event topic's payload. The
// agent writes it; edgeheal-kube, edgeheal-fleet, the lab and the CLI read
// it. It is the one place these shapes are written down, so that the
// programs cannot disagree about them; a golden test holds the bytes
// (testdata/*.json), and the other packages' tests compare what they
// write and read against the same files (wire/wiretest).
//
// wire imports the standard library only: every program links it, and a
// consumer of the format needs nothing of edgeheal's to read it. It
// decides nothing beyond what a payload must hold to be read.
package wire

// Version is the "v" of every payload. A reader refuses another version
// rather than guess at it.
const Version = 1
