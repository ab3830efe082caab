package probes

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"

	"github.com/edgeheal/edgeheal/internal/testsupport/crilab"
)

// TestLabCRIResolvesARealPodSandbox runs pod sandboxes in a private
// containerd (CRI plugin, CNI bridge, a locally built pause image), finds
// one by labels, probes from inside it, sees no-pod once it is gone and
// the new namespace once it runs again.
func TestLabCRIResolvesARealPodSandbox(t *testing.T) {
	lab := crilab.Start(t)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	labels := map[string]string{"app": "telemetry", "edgeheal.test/run": randomHex(4)}
	sel := PodSelector{Namespace: "factory", Labels: labels}
	cri, err := DialCRI(lab.Socket)
	if err != nil {
		t.Fatal(err)
	}
	defer cri.Close()

	// A sandbox with other labels must not be chosen.
	if _, err := lab.RunSandbox(ctx, "other", "factory", map[string]string{"app": "other"}, nil); err != nil {
		t.Fatalf("%v; containerd log:\n%s", err, lab.Log())
	}
	if _, err := ResolvePod(ctx, cri, sel); !errors.Is(err, ErrNoPod) {
		t.Fatalf("before the pod runs: %v, want no-pod", err)
	}

	id1, err := lab.RunSandbox(ctx, "telemetry-a", "factory", labels, []string{"10.43.0.10"})
	if err != nil {
		t.Fatalf("%v; containerd log:\n%s", err, lab.Log())
	}
	first, err := ResolvePod(ctx, cri, sel)
	if err != nil {
		t.Fatalf("ResolvePod: %v", err)
	}
	if first.SandboxID != id1 || first.Source != SourceCRI || first.Pod != "factory/telemetry-a" {
		t.Errorf("resolved %+v, want sandbox %s of factory/telemetry-a through cri", first, id1)
	}
	if !strings.HasPrefix(first.Path, "/var/run/netns/cni-") {
		t.Errorf("netns path %q, want /var/run/netns/cni-*", first.Path)
	}
	if len(first.Netns.DNSServers) != 1 || first.Netns.DNSServers[0] != "10.43.0.10" {
		t.Errorf("dns servers %v, want the sandbox's [10.43.0.10]", first.Netns.DNSServers)
	}
	// The runtime spec path and the sandbox pid are the same namespace.
	podIno, _ := namespaceID(first.Path)
	if pidIno, err := namespaceID(fmt.Sprintf("/proc/%d/ns/net", first.PID)); err != nil || pidIno != podIno {
		t.Errorf("namespace of pid %d: %s, %v; want %s", first.PID, pidIno, err, podIno)
	}
	if hostIno, _ := namespaceID("/proc/self/ns/net"); podIno == hostIno {
		t.Fatalf("the pod's namespace is the host's")
	}

	// The CNI bridge plugin gave the pod an eth0 with an address in the
	// lab's subnet.
	_, subnet, _ := net.ParseCIDR(lab.Subnet)
	if ip := podIPv4(t, first.Path); !subnet.Contains(ip) {
		t.Errorf("pod eth0 address %v is not in %s", ip, lab.Subnet)
	}

	// Probe from inside: a listener that exists only in the pod's
	// namespace is reached from there and refused from the host.
	var l net.Listener
	if err := first.Netns.Do(func() (err error) { l, err = net.Listen("tcp", "127.0.0.1:0"); return err }); err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if r, err := TCP(ctx, first.Netns, l.Addr().String(), time.Second); err != nil || r.Class != ClassOK {
		t.Errorf("tcp from inside the pod: %+v, %v; want ok", r, err)
	}
	if r, err := TCP(ctx, Netns{}, l.Addr().String(), time.Second); err != nil || r.Class != ClassRefused {
		t.Errorf("tcp from the host to the pod's loopback port: %+v, %v; want refused", r, err)
	}
	l.Close()

	if err := lab.RemoveSandbox(ctx, id1); err != nil {
		t.Fatal(err)
	}
	if r, err := ResolvePod(ctx, cri, sel); !errors.Is(err, ErrNoPod) || Classify(err) != ClassNoPod {
		t.Fatalf("after the pod is removed: %+v, %v; want no-pod", r, err)
	}

	id2, err := lab.RunSandbox(ctx, "telemetry-b", "factory", labels, nil)
	if err != nil {
		t.Fatal(err)
	}
	second, err := ResolvePod(ctx, cri, sel)
	if err != nil {
		t.Fatalf("ResolvePod after the pod ran again: %v", err)
	}
	if second.SandboxID != id2 || second.ID == first.ID || second.Path == first.Path {
		t.Errorf("re-resolved %+v; want sandbox %s in a new namespace (was %s at %s)", second, id2, first.ID, first.Path)
	}
	if r, err := TCP(ctx, second.Netns, "127.0.0.1:9", time.Second); err != nil || r.Class != ClassRefused {
		t.Errorf("probe in the new namespace: %+v, %v; want refused (nothing listens there)", r, err)
	}
	// containerd's answer for a sandbox it does not know is a gRPC status,
	// read from the trailers: NotFound (5).
	var st *CRIStatusError
	if _, err := cri.SandboxInfo(ctx, id1); !errors.As(err, &st) || st.Code != 5 || st.Method != "PodSandboxStatus" {
		t.Errorf("status of the removed sandbox: %v; want a CRI status error NotFound (5)", err)
	}
	if foreign := threadsInForeignNamespaces(t); len(foreign) > 0 {
		t.Errorf("threads left in a foreign namespace:\n%s", strings.Join(foreign, "\n"))
	}
}

// podIPv4 returns eth0's IPv4 address inside the namespace at path.
func podIPv4(t *testing.T, path string) net.IP {
	t.Helper()
	h, err := netns.GetFromPath(path)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	nh, err := netlink.NewHandleAt(h)
	if err != nil {
		t.Fatal(err)
	}
	defer nh.Close()
	link, err := nh.LinkByName("eth0")
	if err != nil {
		t.Fatalf("eth0 in the pod: %v", err)
	}
	addrs, err := nh.AddrList(link, netlink.FAMILY_V4)
	if err != nil || len(addrs) == 0 {
		t.Fatalf("eth0 addresses: %v, %v", addrs, err)
	}
	return addrs[0].IP
}
