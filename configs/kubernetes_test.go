package configs

import (
	"strings"
	"testing"
)

func TestKubernetesValidation(t *testing.T) {
	cases := []struct {
		name, yaml string
		want       []string // every problem, as file: key: reason
	}{
		{"off by default, nothing to check", "version: 1\n", nil},
		{"a K3s agent's kubeconfig is enough",
			"version: 1\nkubernetes: {kubeconfig: /var/lib/rancher/k3s/agent/kubelet.kubeconfig}\n", nil},
		{"a relative kubeconfig is refused",
			"version: 1\nkubernetes: {kubeconfig: kubelet.kubeconfig}\n",
			[]string{`k.yaml: kubernetes.kubeconfig: "kubelet.kubeconfig": an absolute path is needed`}},
		{"the taint without a kubeconfig says why",
			"version: 1\nkubernetes: {taint: true}\n",
			[]string{"k.yaml: kubernetes.taint: true, but kubernetes.kubeconfig is empty"}},
		{"no local API: nothing to read the status from",
			"version: 1\nreport: {http: {socket: \"\"}}\nkubernetes: {kubeconfig: /k}\n",
			[]string{"k.yaml: kubernetes.kubeconfig: set, but report.http.socket is empty"}},
		{"a node name Kubernetes would refuse, and durations out of range",
			"version: 1\nkubernetes: {kubeconfig: /k, node_name: Edge_1, grace: 48h, heartbeat: 100ms}\n",
			[]string{
				"k.yaml: kubernetes.grace: 172800s is out of range (0..86400s)",
				"k.yaml: kubernetes.heartbeat: 100ms is out of range (1s..3600s)",
				`k.yaml: kubernetes.node_name: "Edge_1" is not a Kubernetes node name`,
			}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := Parse("k.yaml", []byte(c.yaml))
			var got []string
			if err != nil {
				got = strings.Split(err.Error(), "\n")
			}
			if len(got) != len(c.want) {
				t.Fatalf("problems = %q, want %d like %q", got, len(c.want), c.want)
			}
			for i := range got {
				if !strings.HasPrefix(got[i], c.want[i]) {
					t.Errorf("problem %d = %q, want it to start with %q", i, got[i], c.want[i])
				}
			}
		})
	}
}
