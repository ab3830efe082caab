// Package scalebench holds the fleet view's scale benchmark (its test
// files only): 10,000 simulated nodes, each on its own MQTT connection
// with its own Last Will, through a real mosquitto on loopback, read by the
// built edgeheal-fleet binary in a process of its own so that its memory
// and CPU are its own. docs/performance.md, "The fleet view at 10,000
// nodes", describes what it measures and shows the results.
package scalebench
