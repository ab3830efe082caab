package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	typedrbacv1 "k8s.io/client-go/kubernetes/typed/rbac/v1"
	"sigs.k8s.io/yaml"

	"github.com/edgeheal/edgeheal/internal/testsupport"
	"github.com/edgeheal/edgeheal/internal/testsupport/kubelab"
	"github.com/edgeheal/edgeheal/internal/testsupport/labtest"
	"github.com/edgeheal/edgeheal/kube"
	"github.com/edgeheal/edgeheal/lab"
)

// TestLabKubeReporterWithARealAPIServer runs the agent and edgeheal-kube in
// the lab's edge namespace, next to a real kube-apiserver on the edge's
// loopback (where a K3s agent's kubeconfig points: its local load
// balancer), with
// a token of the ServiceAccount of packaging/kubernetes/rbac.yaml and
// nothing else:
//
//   - offload off, the tunnel works: EdgeOverlayHealthy True, the
//     kubelet's own Ready condition kept;
//   - offload on with the uplink not guarded (the tunnel dark, as before
//     edgeheal): False with the reason, a Warning event, the taint after
//     the grace;
//   - the API server stopped for 30 s, and meanwhile the guard configured
//     (SIGHUP): the agent heals the tunnel while the API server is gone;
//   - the API server back: True again, a recovery event, the taint gone.
func TestLabKubeReporterWithARealAPIServer(t *testing.T) {
	testsupport.RequireRoot(t, "the lab: network namespaces, TUN, AF_PACKET")
	if _, err := os.Stat(kubelab.Binary()); err != nil {
		t.Skipf("kube-apiserver %s is not built: run `%s`: %v", kubelab.Version, kubelab.BuildCommand, err)
	}
	l := labtest.New(t, lab.Options{})
	k := kubelab.StartWith(t, kubelab.Options{Netns: l.NetnsName(lab.Edge)})
	ctx := context.Background()
	core, err := typedcorev1.NewForConfig(k.AdminConfig())
	if err != nil {
		t.Fatal(err)
	}
	node := "lab-" + l.Prefix()
	createNode(t, core, node)
	token := applyRBAC(t, k, core)
	kubeconfig := k.Kubeconfig("edgeheal", token)
	if _, err := core.Pods("default").List(ctx, metav1.ListOptions{}); err != nil {
		t.Fatalf("the admin cannot list pods (the check below of the edgeheal token would prove nothing): %v", err)
	}
	edgeCore := tokenClient(t, k, token)
	if _, err := edgeCore.Pods("default").List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("the edgeheal token lists pods: %v, want forbidden (it is bound only to rbac.yaml)", err)
	}

	if err := l.SetUplinkTxChecksum(false); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	cfg := filepath.Join(dir, "config.yaml")
	writeFile(t, cfg, fmt.Sprintf(`version: 1
node: {name: %s, site: lab}
tunnels:
  - interface: %s
    endpoint_host: %s
    probe: {target: "tcp://%s"}
report:
  http: {listen: "127.0.0.1:9469", socket: %s}
  state_dir: %s
kubernetes: {kubeconfig: %s, taint: true, grace: 3s, heartbeat: 10s}
`, node, l.EdgeWG(), lab.CloudHost, l.BrokerTunnelAddr(), filepath.Join(dir, "edgeheal.sock"), filepath.Join(dir, "state"), kubeconfig))
	agentBin, kubeBin := build(t, "../edgeheal"), build(t, ".")
	agent := startIn(t, l, "agent", dir, agentBin, "run", "--config", cfg)
	startIn(t, l, "edgeheal-kube", dir, kubeBin, "run", "--config", cfg)

	cond := func() *corev1.NodeCondition {
		n, err := core.Nodes().Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			return nil
		}
		for i, c := range n.Status.Conditions {
			if c.Type == kube.ConditionType {
				return &n.Status.Conditions[i]
			}
		}
		return nil
	}
	tainted := func() bool {
		n, err := core.Nodes().Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			return false
		}
		for _, ta := range n.Spec.Taints {
			if ta.Key == kube.TaintKey {
				if ta.Effect != corev1.TaintEffectNoSchedule {
					t.Errorf("taint %+v, want NoSchedule", ta)
				}
				return true
			}
		}
		return false
	}
	testsupport.WaitFor(t, 30*time.Second, "EdgeOverlayHealthy True", func() bool {
		c := cond()
		return c != nil && c.Status == corev1.ConditionTrue && c.Reason == kube.ReasonHealthy
	})
	if n, _ := core.Nodes().Get(ctx, node, metav1.GetOptions{}); !hasCondition(n, corev1.NodeReady) {
		t.Errorf("the kubelet's Ready condition is gone: %+v", n.Status.Conditions)
	}
	t.Logf("healthy:\n%s", describe(t, core, node))

	// The fault, unguarded: the tunnel goes dark.
	if err := l.SetUplinkTxChecksum(true); err != nil {
		t.Fatal(err)
	}
	darkAt := time.Now()
	took := testsupport.WaitFor(t, 60*time.Second, "EdgeOverlayHealthy False", func() bool {
		c := cond()
		return c != nil && c.Status == corev1.ConditionFalse
	})
	c := cond()
	if c.Reason != kube.ReasonTunnelDark && c.Reason != kube.ReasonGaveUp {
		t.Errorf("dark tunnel: reason %s (%s), want TunnelDark or GaveUp", c.Reason, c.Message)
	}
	t.Logf("condition False (%s) %v after the offload was turned on", c.Reason, took.Round(time.Millisecond))
	testsupport.WaitFor(t, 30*time.Second, "a Warning event on the node", func() bool {
		return hasEvent(t, core, node, corev1.EventTypeWarning, c.Reason)
	})
	testsupport.WaitFor(t, 30*time.Second, "the taint", tainted)
	t.Logf("taint on %v after the offload was turned on (grace 3 s)", time.Since(darkAt).Round(time.Millisecond))
	t.Logf("dark:\n%s", describe(t, core, node))

	// The API server goes away; meanwhile the guard is configured and the
	// agent heals the tunnel.
	k.StopAPIServer()
	stoppedAt := time.Now()
	writeFile(t, filepath.Join(dir, "config.d", "50-guard.yaml"), fmt.Sprintf("uplinks: [{name: %s}]\n", l.EdgeUplink()))
	if err := agent.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	testsupport.WaitFor(t, 20*time.Second, "offload off with the API server down", func() bool {
		on, err := l.UplinkTxChecksumOn()
		return err == nil && !on
	})
	testsupport.WaitFor(t, 25*time.Second, "telemetry through the tunnel with the API server down", func() bool {
		return l.StatsSince(time.Now().Add(-2*time.Second)).Received > 0
	})
	t.Logf("healed %v after the API server stopped", time.Since(stoppedAt).Round(time.Millisecond))
	time.Sleep(time.Until(stoppedAt.Add(30 * time.Second)))
	if err := k.StartAPIServer(); err != nil {
		t.Fatal(err)
	}
	back := time.Now()
	testsupport.WaitFor(t, 60*time.Second, "EdgeOverlayHealthy True after the API server's return", func() bool {
		c := cond()
		return c != nil && c.Status == corev1.ConditionTrue
	})
	t.Logf("condition True %v after the API server was back", time.Since(back).Round(time.Millisecond))
	testsupport.WaitFor(t, 30*time.Second, "the taint removed", func() bool { return !tainted() })
	testsupport.WaitFor(t, 30*time.Second, "a recovery event", func() bool {
		return hasEvent(t, core, node, corev1.EventTypeNormal, kube.ReasonRecovered)
	})
	t.Logf("healed:\n%s", describe(t, core, node))
}

// createNode registers the Node as a kubelet would, with a Ready condition.
func createNode(t *testing.T, core typedcorev1.CoreV1Interface, node string) {
	t.Helper()
	ctx := context.Background()
	if _, err := core.Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	now := metav1.Now()
	patch := fmt.Sprintf(`{"status":{"conditions":[{"type":"Ready","status":"True","reason":"KubeletReady","message":"kubelet is posting ready status","lastHeartbeatTime":%q,"lastTransitionTime":%q}]}}`,
		now.UTC().Format(time.RFC3339), now.UTC().Format(time.RFC3339))
	if _, err := core.Nodes().Patch(ctx, node, types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{}, "status"); err != nil {
		t.Fatal(err)
	}
}

// applyRBAC creates the objects of packaging/kubernetes/rbac.yaml and
// returns a token of its ServiceAccount.
func applyRBAC(t *testing.T, k *kubelab.Lab, core typedcorev1.CoreV1Interface) string {
	t.Helper()
	ctx := context.Background()
	rb, err := typedrbacv1.NewForConfig(k.AdminConfig())
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile("../../packaging/kubernetes/rbac.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var sa *corev1.ServiceAccount
	for _, doc := range strings.Split(string(data), "\n---\n") {
		var meta metav1.TypeMeta
		if err := yaml.Unmarshal([]byte(doc), &meta); err != nil {
			t.Fatalf("rbac.yaml: %v", err)
		}
		switch meta.Kind {
		case "ServiceAccount":
			sa = &corev1.ServiceAccount{}
			mustDecode(t, doc, sa)
			_, err = core.ServiceAccounts(sa.Namespace).Create(ctx, sa, metav1.CreateOptions{})
		case "ClusterRole":
			var o rbacv1.ClusterRole
			mustDecode(t, doc, &o)
			_, err = rb.ClusterRoles().Create(ctx, &o, metav1.CreateOptions{})
		case "ClusterRoleBinding":
			var o rbacv1.ClusterRoleBinding
			mustDecode(t, doc, &o)
			_, err = rb.ClusterRoleBindings().Create(ctx, &o, metav1.CreateOptions{})
		case "Role":
			var o rbacv1.Role
			mustDecode(t, doc, &o)
			_, err = rb.Roles(o.Namespace).Create(ctx, &o, metav1.CreateOptions{})
		case "RoleBinding":
			var o rbacv1.RoleBinding
			mustDecode(t, doc, &o)
			_, err = rb.RoleBindings(o.Namespace).Create(ctx, &o, metav1.CreateOptions{})
		default:
			t.Fatalf("rbac.yaml: unexpected kind %q", meta.Kind)
		}
		if err != nil {
			t.Fatalf("applying rbac.yaml (%s): %v", meta.Kind, err)
		}
	}
	if sa == nil {
		t.Fatal("rbac.yaml has no ServiceAccount")
	}
	tr, err := core.ServiceAccounts(sa.Namespace).CreateToken(ctx, sa.Name, &authenticationv1.TokenRequest{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("a token for %s/%s: %v", sa.Namespace, sa.Name, err)
	}
	return tr.Status.Token
}

func mustDecode(t *testing.T, doc string, into any) {
	t.Helper()
	if err := yaml.UnmarshalStrict([]byte(doc), into); err != nil {
		t.Fatalf("rbac.yaml: %v", err)
	}
}

func tokenClient(t *testing.T, k *kubelab.Lab, token string) typedcorev1.CoreV1Interface {
	t.Helper()
	cfg := k.AdminConfig()
	cfg.BearerToken = token
	c, err := typedcorev1.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func hasCondition(n *corev1.Node, typ corev1.NodeConditionType) bool {
	if n == nil {
		return false
	}
	for _, c := range n.Status.Conditions {
		if c.Type == typ {
			return true
		}
	}
	return false
}

func nodeEvents(t *testing.T, core typedcorev1.CoreV1Interface, node string) []corev1.Event {
	list, err := core.Events(kube.EventNamespace).List(context.Background(), metav1.ListOptions{
		FieldSelector: "involvedObject.kind=Node,involvedObject.name=" + node})
	if err != nil {
		return nil
	}
	sort.Slice(list.Items, func(i, j int) bool { return list.Items[i].FirstTimestamp.Before(&list.Items[j].FirstTimestamp) })
	return list.Items
}

func hasEvent(t *testing.T, core typedcorev1.CoreV1Interface, node, typ, reason string) bool {
	for _, e := range nodeEvents(t, core, node) {
		if e.Type == typ && e.Reason == reason && e.Source.Component == kube.Component {
			return true
		}
	}
	return false
}

// describe prints the node as `kubectl get nodes` and the conditions and
// events of `kubectl describe node` would (Debian's kubectl is too old
// for this API server), for docs/operations/kubernetes.md.
func describe(t *testing.T, core typedcorev1.CoreV1Interface, node string) string {
	n, err := core.Nodes().Get(context.Background(), node, metav1.GetOptions{})
	if err != nil {
		return err.Error()
	}
	var b bytes.Buffer
	fmt.Fprintf(&b, "$ kubectl get node %s\nNAME\tSTATUS\n%s\tReady\n", node, node)
	fmt.Fprintf(&b, "$ kubectl describe node %s\nTaints:", node)
	if len(n.Spec.Taints) == 0 {
		b.WriteString(" <none>")
	}
	for _, ta := range n.Spec.Taints {
		fmt.Fprintf(&b, " %s:%s", ta.Key, ta.Effect)
	}
	b.WriteString("\nConditions:\n  Type\tStatus\tReason\tMessage\n")
	for _, c := range n.Status.Conditions {
		fmt.Fprintf(&b, "  %s\t%s\t%s\t%s\n", c.Type, c.Status, c.Reason, c.Message)
	}
	b.WriteString("Events:\n  Type\tReason\tCount\tFrom\tMessage\n")
	for _, e := range nodeEvents(t, core, node) {
		fmt.Fprintf(&b, "  %s\t%s\t%d\t%s\t%s\n", e.Type, e.Reason, e.Count, e.Source.Component, e.Message)
	}
	return b.String()
}

func build(t *testing.T, pkg string) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), filepath.Base(pkg))
	if pkg == "." {
		bin = filepath.Join(filepath.Dir(bin), "edgeheal-kube")
	}
	cmd := exec.Command("go", "build", "-o", bin, pkg)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build %s: %v\n%s", pkg, err, out)
	}
	return bin
}

// startIn runs bin in the lab's edge namespace, logging to dir/name.log,
// and ends it by PID when the test ends.
func startIn(t *testing.T, l *lab.Lab, name, dir, bin string, args ...string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command("ip", append([]string{"netns", "exec", l.NetnsName(lab.Edge), bin}, args...)...)
	testsupport.StartLogged(t, name, filepath.Join(dir, name+".log"), cmd)
	return cmd
}

func writeFile(t *testing.T, path, data string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
}
