package pkgtest

import (
	"context"
	"encoding/base64"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"

	"github.com/edgeheal/edgeheal/internal/testsupport"
	"github.com/edgeheal/edgeheal/internal/testsupport/kubelab"
	"github.com/edgeheal/edgeheal/internal/testsupport/systemdlab"
	"github.com/edgeheal/edgeheal/kube"
)

// kubeMounts makes the reporter's package look installed
// (payloadMounts), with /etc/edgeheal (the agent's configuration, which
// the reporter reads) and /var/lib/rancher/k3s/agent (where a K3s agent
// keeps its kubeconfig) the test's own directories.
const kubeMounts = payloadMounts + `mount --bind "$T/etc-edgeheal" /etc/edgeheal
mount -t overlay edgeheal-pkgtest-varlib -o "lowerdir=$T/varlib-extra:/var/lib" /var/lib
mount --bind "$T/k3s-agent" /var/lib/rancher/k3s/agent
`

// TestLabKubeUnitUnderRealSystemd runs the packaged edgeheal-kube.service
// under a confined systemd as PID 1, with a real etcd and kube-apiserver
// (kubelab) on the lab's own loopback, where a K3s agent's kubeconfig
// points:
//
//   - without kubernetes.kubeconfig the reporter exits 0 and the unit
//     stays stopped (Restart=on-failure; with Restart=always it would be
//     back in auto-restart, never inactive);
//   - with a drop-in naming a root-only kubeconfig (mode 0600, as K3s
//     keeps its own) the sandboxed reporter, root with no capability,
//     reads it and writes the Node's condition: Unknown with
//     AgentUnreachable, since no agent runs in the lab.
//
// The kubeconfig holds the lab's admin token: what the least RBAC allows
// is shown by TestLabKubeReporterWithARealAPIServer (cmd/edgeheal-kube);
// here it is the sandbox that is under test.
func TestLabKubeUnitUnderRealSystemd(t *testing.T) {
	built(t)
	testsupport.RequireRoot(t, "systemd as PID 1 in its own namespaces")
	payload := extractDeb(t, kubeDebPath(runtime.GOARCH))
	dir := t.TempDir()
	for _, d := range []string{"etc-extra/edgeheal", "etc-edgeheal/config.d", "varlib-extra/rancher/k3s/agent", "k3s-agent"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	const node = "pkg-node"
	writeConfig(t, filepath.Join(dir, "etc-edgeheal/config.yaml"), "version: 1\nnode: {name: "+node+"}\n")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var k *kubelab.Lab
	s, conn := bootWithUnit(ctx, t, payload, dir, kubeMounts, "edgeheal-kube.service", "[Unit]\nDefaultDependencies=no\n",
		func(sd *systemdlab.Systemd) {
			k = kubelab.StartWith(t, kubelab.Options{Netns: fmt.Sprintf("/proc/%d/ns/net", sd.PID)})
		})
	defer conn.Close()
	start := func() {
		t.Helper()
		if res := job(ctx, t, "start", func(ch chan<- string) (int, error) {
			return conn.StartUnitContext(ctx, "edgeheal-kube.service", "replace", ch)
		}); res != "done" {
			t.Fatalf("start job: %s; service: %+v", res, unitState(ctx, t, conn, "edgeheal-kube.service"))
		}
	}

	start()
	off := waitUnit(ctx, t, conn, "edgeheal-kube.service", "the reporter without a kubeconfig exited and stays stopped", func(st state) bool {
		if st.sub == "auto-restart" {
			t.Fatalf("the reporter without a kubeconfig is being restarted: %+v; want it stopped (Restart=on-failure)", st)
		}
		return st.active == "inactive" && st.sub == "dead"
	})
	if off.result != "success" || off.restarts != 0 {
		t.Errorf("without a kubeconfig: %+v, want Result success and no restart", off)
	}

	core, err := typedcorev1.NewForConfig(k.AdminConfig())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := core.Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	ca, err := os.ReadFile(k.CAFile)
	if err != nil {
		t.Fatal(err)
	}
	// The CA inline: the unit's PrivateTmp= hides kubelab's directory.
	kubeconfig := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: lab
  cluster: {server: %q, certificate-authority-data: %s}
users:
- name: lab
  user: {token: %q}
contexts:
- name: lab
  context: {cluster: lab, user: lab}
current-context: lab
`, k.URL, base64.StdEncoding.EncodeToString(ca), kubelab.AdminToken)
	if err := os.WriteFile(filepath.Join(dir, "k3s-agent/kubelet.kubeconfig"), []byte(kubeconfig), 0o600); err != nil {
		t.Fatal(err)
	}
	writeConfig(t, filepath.Join(dir, "etc-edgeheal/config.d/60-kubernetes.yaml"),
		"kubernetes: {kubeconfig: /var/lib/rancher/k3s/agent/kubelet.kubeconfig}\n")

	start()
	st := waitUnit(ctx, t, conn, "edgeheal-kube.service", "the reporter is running", func(st state) bool {
		return st.active == "active" && st.sub == "running" && st.mainPID != 0
	})
	got := procStatus(t, s, st.mainPID)
	t.Logf("the reporter: Uid %s, CapBnd %s, CapEff %s, NoNewPrivs %s, Seccomp %s", got["Uid"], got["CapBnd"], got["CapEff"], got["NoNewPrivs"], got["Seccomp"])
	if got["CapBnd"] != "0000000000000000" || got["CapEff"] != "0000000000000000" || got["NoNewPrivs"] != "1" || got["Seccomp"] != "2" {
		t.Errorf("the reporter runs with CapBnd %q CapEff %q NoNewPrivs %q Seccomp %q; want no capability, no new privileges, a syscall filter",
			got["CapBnd"], got["CapEff"], got["NoNewPrivs"], got["Seccomp"])
	}

	var c corev1.NodeCondition
	testsupport.WaitFor(t, 60*time.Second, "the sandboxed reporter's condition on the Node", func() bool {
		n, err := core.Nodes().Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			return false
		}
		for _, nc := range n.Status.Conditions {
			if nc.Type == kube.ConditionType {
				c = nc
				return true
			}
		}
		return false
	})
	t.Logf("%s %s %s: %s", c.Type, c.Status, c.Reason, c.Message)
	if c.Status != corev1.ConditionUnknown || c.Reason != kube.ReasonAgentUnreachable || !strings.Contains(c.Message, "reading the agent's status") {
		t.Errorf("condition %s %s (%s), want Unknown AgentUnreachable: no agent runs in the lab", c.Status, c.Reason, c.Message)
	}
}
