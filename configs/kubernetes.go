package configs

import (
	"path/filepath"
	"strings"
	"time"
)

// Kubernetes configures edgeheal-kube, the optional reporter that tells
// the node's Kubernetes API server what edgeheal sees: the node condition
// EdgeOverlayHealthy, events on the Node and, with Taint, the taint
// edgeheal.io/overlay-dark:NoSchedule. The agent itself never talks to the
// API server (docs/performance.md, "What client-go costs"); edgeheal-kube
// reads the agent's /v1/status at report.http.listen. An empty Kubeconfig
// turns it off.
type Kubernetes struct {
	// Kubeconfig is the credentials file, e.g. a K3s agent's
	// /var/lib/rancher/k3s/agent/kubelet.kubeconfig (no taint: the
	// NodeRestriction admission refuses a node's own taint changes), or one
	// of the ServiceAccount of packaging/kubernetes/rbac.yaml.
	Kubeconfig string `yaml:"kubeconfig"`
	// NodeName is the Node object's name; "" means node.name.
	NodeName string `yaml:"node_name"`
	// Taint turns on the NoSchedule taint while the overlay stays dark
	// longer than Grace.
	Taint bool     `yaml:"taint"`
	Grace Duration `yaml:"grace"`
	// Heartbeat is how often the condition is written when nothing changed.
	Heartbeat Duration `yaml:"heartbeat"`
}

// Enabled reports whether edgeheal-kube has anything to do.
func (k Kubernetes) Enabled() bool { return k.Kubeconfig != "" }

// KubeNode is the Node object's name: kubernetes.node_name, else node.name.
func (c *Config) KubeNode() string {
	if c.Kubernetes.NodeName != "" {
		return c.Kubernetes.NodeName
	}
	return c.Node.Name
}

func (v *validator) kubernetes(p string, k Kubernetes) {
	v.durRange(p+".grace", k.Grace, 0, 24*time.Hour)
	v.durRange(p+".heartbeat", k.Heartbeat, time.Second, time.Hour)
	if !k.Enabled() {
		if k.Taint {
			v.add(p+".taint", "true, but kubernetes.kubeconfig is empty: the taint needs the API server")
		}
		return
	}
	if !filepath.IsAbs(k.Kubeconfig) {
		v.add(p+".kubeconfig", "%q: an absolute path is needed, e.g. /var/lib/rancher/k3s/agent/kubelet.kubeconfig", k.Kubeconfig)
	}
	if k.NodeName != "" && !dns1123Subdomain(k.NodeName) {
		v.add(p+".node_name", "%q is not a Kubernetes node name (lowercase letters, digits, '-' and '.', at most 253)", k.NodeName)
	}
	if v.c.Report.HTTP.Socket == "" {
		v.add(p+".kubeconfig", "set, but report.http.socket is empty: edgeheal-kube reads the agent's /v1/status there")
	}
}

// dns1123Subdomain is Kubernetes' rule for object names such as a Node's.
func dns1123Subdomain(s string) bool {
	if len(s) == 0 || len(s) > 253 {
		return false
	}
	for _, label := range strings.Split(s, ".") {
		if label == "" || label[0] == '-' || label[len(label)-1] == '-' {
			return false
		}
		for _, r := range label {
			if (r < 'a' || r > 'z') && (r < '0' || r > '9') && r != '-' {
				return false
			}
		}
	}
	return true
}
