// Package bench runs edgeheal and the tools it is compared with against the
// lab (package lab), side by side in one run: every contender gets a fresh
// lab per scenario, the same faults at the same moments, and the results
// are reported as absolute figures and as ratios against the contender
// without any agent from the same run, because the machines this runs on
// are shared and noisy.
//
// It also holds the pieces the demo shares with the benchmark: the edgeheal
// config for a lab, the daemon as a child process inside the edge
// namespace, and a cloud-side MQTT subscriber that records what edgeheal
// reported.
//
// Everything here needs root except the result tables, ratios and the
// chart, which are plain functions of recorded samples.
package bench

import (
	"bytes"
	"fmt"
	"path/filepath"
	"text/template"
	"time"

	"github.com/edgeheal/edgeheal/lab"
)

// ConfigParams are the names and knobs an edgeheal config for a lab needs.
type ConfigParams struct {
	Prefix     string        // the lab's prefix: links and namespaces are named after it
	Node       string        // node.name, part of every MQTT topic
	StateDir   string        // report.state_dir
	HTTPListen string        // report.http.listen, inside the edge namespace
	Socket     string        // report.http.socket; default edgeheal.sock in StateDir
	Cooldown   time.Duration // policy.cooldown; 0 keeps the package default (30s)
	Keepalive  time.Duration // tunnels[0].persistent_keepalive; 0 means edgeheal's default 20s
	RelaxAfter time.Duration // tunnels[0].path_mtu.relax_after; 0 keeps the package default (2m)
}

var configTmpl = template.Must(template.New("config").Parse(`# edgeheal config for the lab (edgeheal-lab demo / bench), generated for
# the lab prefix "{{.Prefix}}": run the lab with ` + "`edgeheal-lab up --prefix {{.Prefix}}`" + ` and
# the agent inside its edge namespace:
#
#   ip netns exec {{.Prefix}}-edge edgeheal run --config THIS_FILE --log-format json
#
# ip netns exec mounts /etc/netns/{{.Prefix}}-edge/hosts over /etc/hosts, so the
# cloud's name resolves, and follows the cloud when it moves.
version: 1
node: {name: {{.Node}}, site: lab}
interval: 1s

# The modem's uplink: the lab creates it with TX checksum offload on.
uplinks:
  - name: {{.Prefix}}-up
    tx_checksum: "off"

tunnels:
  - interface: {{.Prefix}}-wg
    peers: all
    persistent_keepalive: {{.Keepalive}}
    endpoint_host: {{.CloudHost}}
    probe:
      target: tcp://{{.CloudTunnel}}:{{.BrokerPort}}   # the broker port through the tunnel: a RST still proves the path
      interval: 1s
      misses: 3
    heal: [reassert, reresolve, handshake, rebind, bounce]
    unit: ""
{{- if .RelaxAfter}}
    path_mtu: {relax_after: {{.RelaxAfter}}}
{{- end}}

# The pod's MQTT path, probed from inside its network namespace and
# compared with the host's path to the same broker.
workloads:
  - name: telemetry
    netns: /var/run/netns/{{.Prefix}}-pod
    tunnel: {{.Prefix}}-wg
    interval: 2s
    misses: 2
    mqtt:
      broker: tcp://{{.CloudTunnel}}:{{.BrokerPort}}
      host_broker: tcp://{{.CloudHost}}:{{.BrokerPort}}
      timeout: 1s

# Reports go to the cloud's broker over the uplink, not through the tunnel.
report:
  mqtt:
    broker: tcp://{{.CloudHost}}:{{.BrokerPort}}
  http: {listen: "{{.HTTPListen}}", socket: {{.Socket}}}
  state_dir: {{.StateDir}}
{{- if .Cooldown}}

policy:
  cooldown: {{.Cooldown}}
{{- end}}
`))

// Config renders the edgeheal config for a lab with prefix p.Prefix.
func Config(p ConfigParams) ([]byte, error) {
	if p.Node == "" {
		p.Node = p.Prefix
	}
	if p.HTTPListen == "" {
		p.HTTPListen = "127.0.0.1:9469"
	}
	if p.StateDir == "" {
		p.StateDir = "/var/lib/edgeheal"
	}
	if p.Socket == "" {
		p.Socket = filepath.Join(p.StateDir, "edgeheal.sock")
	}
	ka := p.Keepalive
	if ka == 0 {
		ka = 20 * time.Second
	}
	data := map[string]any{
		"Prefix":      p.Prefix,
		"Node":        p.Node,
		"StateDir":    p.StateDir,
		"HTTPListen":  p.HTTPListen,
		"Socket":      p.Socket,
		"Keepalive":   durationString(ka),
		"CloudHost":   lab.CloudHost,
		"CloudTunnel": "10.77.0.1",
		"BrokerPort":  lab.BrokerPort,
		"Cooldown":    "",
		"RelaxAfter":  "",
	}
	if p.RelaxAfter > 0 {
		data["RelaxAfter"] = durationString(p.RelaxAfter)
	}
	if p.Cooldown > 0 {
		data["Cooldown"] = durationString(p.Cooldown)
	}
	var b bytes.Buffer
	if err := configTmpl.Execute(&b, data); err != nil {
		return nil, fmt.Errorf("rendering edgeheal config: %w", err)
	}
	return b.Bytes(), nil
}

// durationString writes whole seconds as "20s", the way configs expect.
func durationString(d time.Duration) string {
	if d%time.Second == 0 {
		return fmt.Sprintf("%ds", d/time.Second)
	}
	return d.String()
}

// DemoParams are the parameters of configs/examples/demo.yaml: the lab run
// with --prefix demo.
func DemoParams() ConfigParams {
	return ConfigParams{
		Prefix:     "demo",
		Node:       "demo-edge",
		StateDir:   "/run/edgeheal-lab/demo-agent/state",
		HTTPListen: "127.0.0.1:9469",
		Cooldown:   5 * time.Second,
	}
}
