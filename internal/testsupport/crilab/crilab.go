// Package crilab starts a private containerd with its CRI plugin for tests
// that need real pod sandboxes: its own socket, root and state directories
// under a temporary directory, a private runc root, a CNI bridge with
// host-local IPAM on a private subnet, and a pause image built from
// ./pause as a static Go binary, packed with go-containerregistry and
// imported with ctr.
//
// crilab only touches what it created: its directory, its containerd and
// shim processes (ended by PID), its bridge, the network namespaces and
// mounts of its own sandboxes. Everything is removed in t.Cleanup, also
// after a failure. Measured on Debian 12 with containerd 1.6.20 and runc
// 1.1.5 (2026-11): start to CRI ready ~0.2 s, RunPodSandbox ~0.5 s.
package crilab

import (
	"archive/tar"
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/edgeheal/edgeheal/internal/testsupport"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/vishvananda/netlink"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/credentials/insecure"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// PauseImage is the name the pause image is imported under and the CRI
// plugin's sandbox_image. It must match exactly, or containerd tries to
// pull it.
const PauseImage = "edgeheal.local/crilab/pause:1"

// Lab is a running private containerd.
type Lab struct {
	Dir     string // everything of the lab's lives here
	Socket  string // the CRI (containerd gRPC) socket
	Bridge  string // the CNI bridge (in the host namespace, created by the bridge plugin)
	Subnet  string // the pod subnet, e.g. 10.233.17.0/24
	Runtime runtimeapi.RuntimeServiceClient

	t       testing.TB
	cmd     *exec.Cmd
	conn    *grpc.ClientConn
	netName string
	mu      sync.Mutex
	boxes   map[string]bool // sandboxes created and not yet removed
	waited  chan struct{}
	cgroups []string // cgroup parents (k8s.io) that did not exist before the lab
}

// Need is what the lab runs; Start skips the test when one is missing.
var Need = []string{"containerd", "runc", "ctr", "/usr/lib/cni/bridge", "/usr/lib/cni/host-local", "/usr/lib/cni/loopback"}

// Start starts containerd and waits until its CRI answers. It skips the
// test when not root or when containerd, runc or the CNI plugins are not
// installed (saying which), and fails it on any other problem.
func Start(t testing.TB) *Lab {
	t.Helper()
	testsupport.RequireRoot(t, "containerd with its CRI plugin")
	for _, n := range Need {
		if _, err := exec.LookPath(n); err != nil {
			t.Skipf("%s is not installed (apt-get install -y --no-install-recommends containerd runc containernetworking-plugins): %v", n, err)
		}
	}
	suffix := randomHex(3)
	// A short directory: the socket path must stay under 108 bytes.
	dir, err := os.MkdirTemp("", "crilab-")
	if err != nil {
		t.Fatal(err)
	}
	l := &Lab{
		Dir:     dir,
		Socket:  filepath.Join(dir, "containerd.sock"),
		Bridge:  "ehcri" + suffix,
		Subnet:  fmt.Sprintf("10.233.%d.0/24", 1+randomByte()%250),
		netName: "edgeheal-crilab-" + suffix,
		t:       t,
		boxes:   map[string]bool{},
		waited:  make(chan struct{}),
	}
	t.Cleanup(l.cleanup)
	// runc (cgroupfs) puts sandboxes under <controller>/k8s.io; note which
	// of those parents the lab will create, so that cleanup removes them.
	parents, _ := filepath.Glob("/sys/fs/cgroup/*")
	for _, p := range parents {
		k := filepath.Join(p, "k8s.io")
		if _, err := os.Stat(k); errors.Is(err, os.ErrNotExist) {
			l.cgroups = append(l.cgroups, k)
		}
	}

	start := time.Now()
	pause := l.buildPause()
	t.Logf("crilab: pause image built in %v", time.Since(start).Round(time.Millisecond))
	if err := l.writeConfig(); err != nil {
		t.Fatal(err)
	}
	if err := l.startContainerd(); err != nil {
		t.Fatal(err)
	}
	t.Logf("crilab: containerd ready at %v", time.Since(start).Round(time.Millisecond))
	if err := l.importImage(pause); err != nil {
		t.Fatal(err)
	}
	t.Logf("crilab: pause image imported at %v", time.Since(start).Round(time.Millisecond))
	return l
}

// buildPause builds ./pause static and packs it as an image tarball.
func (l *Lab) buildPause() string {
	l.t.Helper()
	bin := filepath.Join(l.Dir, "pause")
	goTool, err := exec.LookPath("go")
	if err != nil {
		goTool = "/usr/local/go/bin/go" // where the project installs Go
	}
	cmd := exec.Command(goTool, "build", "-trimpath", "-ldflags=-s -w", "-o", bin, "github.com/edgeheal/edgeheal/internal/testsupport/crilab/pause")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux")
	if out, err := cmd.CombinedOutput(); err != nil {
		l.t.Fatalf("building the pause binary: %v: %s", err, out)
	}
	exe, err := os.ReadFile(bin)
	if err != nil {
		l.t.Fatal(err)
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	if err := tw.WriteHeader(&tar.Header{Name: "pause", Mode: 0o755, Size: int64(len(exe)), Typeflag: tar.TypeReg, ModTime: time.Unix(0, 0)}); err != nil {
		l.t.Fatal(err)
	}
	if _, err := tw.Write(exe); err != nil {
		l.t.Fatal(err)
	}
	if err := tw.Close(); err != nil {
		l.t.Fatal(err)
	}
	layerBytes := buf.Bytes()
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(layerBytes)), nil })
	if err != nil {
		l.t.Fatal(err)
	}
	img, err := mutate.AppendLayers(empty.Image, layer)
	if err != nil {
		l.t.Fatal(err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		l.t.Fatal(err)
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = "linux", runtime.GOARCH
	cf.Config = v1.Config{Entrypoint: []string{"/pause"}}
	if img, err = mutate.ConfigFile(img, cf); err != nil {
		l.t.Fatal(err)
	}
	ref, err := name.NewTag(PauseImage)
	if err != nil {
		l.t.Fatal(err)
	}
	path := filepath.Join(l.Dir, "pause.tar")
	if err := tarball.WriteToFile(path, ref, img); err != nil {
		l.t.Fatalf("writing the pause image: %v", err)
	}
	return path
}

func (l *Lab) writeConfig() error {
	cni := filepath.Join(l.Dir, "cni")
	if err := os.MkdirAll(cni, 0o755); err != nil {
		return err
	}
	// isGateway stays off: it would turn on the host's ip_forward.
	conflist := fmt.Sprintf(`{
  "cniVersion": "0.4.0",
  "name": %q,
  "plugins": [{
    "type": "bridge",
    "bridge": %q,
    "isGateway": false,
    "ipMasq": false,
    "ipam": {"type": "host-local", "ranges": [[{"subnet": %q}]], "dataDir": %q}
  }]
}`, l.netName, l.Bridge, l.Subnet, filepath.Join(l.Dir, "ipam"))
	if err := os.WriteFile(filepath.Join(cni, "10-crilab.conflist"), []byte(conflist), 0o644); err != nil {
		return err
	}
	// restrict_oom_score_adj: root here lacks CAP_SYS_RESOURCE.
	conf := fmt.Sprintf(`version = 2
root = %[1]q
state = %[2]q
disabled_plugins = ["io.containerd.internal.v1.opt", "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.aufs"]

[grpc]
  address = %[3]q

[ttrpc]
  address = %[4]q

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = %[5]q
  restrict_oom_score_adj = true
  disable_apparmor = true
  enable_selinux = false
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "native"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
        Root = %[6]q
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = %[7]q
    max_conf_num = 1
`, filepath.Join(l.Dir, "root"), filepath.Join(l.Dir, "state"), l.Socket, l.Socket+".ttrpc",
		PauseImage, filepath.Join(l.Dir, "runc"), cni)
	return os.WriteFile(filepath.Join(l.Dir, "config.toml"), []byte(conf), 0o644)
}

func (l *Lab) startContainerd() error {
	logf, err := os.Create(filepath.Join(l.Dir, "containerd.log"))
	if err != nil {
		return err
	}
	l.cmd = exec.Command("containerd", "--config", filepath.Join(l.Dir, "config.toml"))
	l.cmd.Stdout, l.cmd.Stderr = logf, logf
	l.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := l.cmd.Start(); err != nil {
		logf.Close()
		return fmt.Errorf("starting containerd: %w", err)
	}
	go func() { _ = l.cmd.Wait(); logf.Close(); close(l.waited) }()

	conn, err := grpc.NewClient("unix://"+l.Socket,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithConnectParams(grpc.ConnectParams{Backoff: backoff.Config{BaseDelay: 20 * time.Millisecond, Multiplier: 1.5, MaxDelay: 200 * time.Millisecond}, MinConnectTimeout: time.Second}))
	if err != nil {
		return err
	}
	l.conn = conn
	l.Runtime = runtimeapi.NewRuntimeServiceClient(conn)
	deadline := time.Now().Add(20 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		st, err := l.Runtime.Status(ctx, &runtimeapi.StatusRequest{})
		cancel()
		if err == nil && runtimeReady(st) {
			return nil
		}
		select {
		case <-l.waited:
			return fmt.Errorf("containerd exited at start; log:\n%s", l.Log())
		default:
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("containerd's cri not ready after 20 s (last: %v, %v); log:\n%s", st, err, l.Log())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func runtimeReady(st *runtimeapi.StatusResponse) bool {
	if st == nil || st.Status == nil {
		return false
	}
	for _, c := range st.Status.Conditions {
		if c.Type == runtimeapi.RuntimeReady && !c.Status {
			return false
		}
	}
	return true
}

func (l *Lab) importImage(path string) error {
	out, err := exec.Command("ctr", "-a", l.Socket, "-n", "k8s.io", "images", "import", "--snapshotter", "native", path).CombinedOutput()
	if err != nil {
		return fmt.Errorf("ctr images import: %w: %s", err, out)
	}
	return nil
}

// Log returns containerd's log so far.
func (l *Lab) Log() string {
	b, _ := os.ReadFile(filepath.Join(l.Dir, "containerd.log"))
	return string(b)
}

// RunSandbox runs a pod sandbox with the metadata, labels and DNS servers,
// and records it for cleanup.
func (l *Lab) RunSandbox(ctx context.Context, podName, namespace string, labels map[string]string, dnsServers []string) (string, error) {
	uid := randomHex(8)
	cfg := &runtimeapi.PodSandboxConfig{
		Metadata:     &runtimeapi.PodSandboxMetadata{Name: podName, Namespace: namespace, Uid: uid},
		Hostname:     podName,
		LogDirectory: filepath.Join(l.Dir, "pods", uid),
		Labels:       labels,
		DnsConfig:    &runtimeapi.DNSConfig{Servers: dnsServers},
		Linux:        &runtimeapi.LinuxPodSandboxConfig{},
	}
	if err := os.MkdirAll(cfg.LogDirectory, 0o755); err != nil {
		return "", err
	}
	resp, err := l.Runtime.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: cfg})
	if err != nil {
		return "", fmt.Errorf("running pod sandbox %s/%s: %w", namespace, podName, err)
	}
	l.mu.Lock()
	l.boxes[resp.PodSandboxId] = true
	l.mu.Unlock()
	return resp.PodSandboxId, nil
}

// StopSandbox stops the sandbox; it stays listed as NOTREADY.
func (l *Lab) StopSandbox(ctx context.Context, id string) error {
	_, err := l.Runtime.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: id})
	return err
}

// RemoveSandbox stops and removes the sandbox.
func (l *Lab) RemoveSandbox(ctx context.Context, id string) error {
	if err := l.StopSandbox(ctx, id); err != nil {
		return fmt.Errorf("stopping sandbox: %w", err)
	}
	if _, err := l.Runtime.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: id}); err != nil {
		return fmt.Errorf("removing sandbox: %w", err)
	}
	l.mu.Lock()
	delete(l.boxes, id)
	l.mu.Unlock()
	return nil
}

// cleanup removes everything, reporting (not hiding) what it could not.
func (l *Lab) cleanup() {
	start := time.Now()
	defer func() { l.t.Logf("crilab: cleaned up in %v", time.Since(start).Round(time.Millisecond)) }()
	var errs []error
	var netnsPaths []string
	l.mu.Lock()
	ids := make([]string, 0, len(l.boxes))
	for id := range l.boxes {
		ids = append(ids, id)
	}
	l.mu.Unlock()
	if l.Runtime != nil {
		for _, id := range ids {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			if st, err := l.Runtime.PodSandboxStatus(ctx, &runtimeapi.PodSandboxStatusRequest{PodSandboxId: id, Verbose: true}); err == nil {
				if p := netnsFromInfo(st.Info["info"]); p != "" {
					netnsPaths = append(netnsPaths, p)
				}
			}
			if err := l.RemoveSandbox(ctx, id); err != nil {
				errs = append(errs, fmt.Errorf("sandbox %s: %w", id, err))
			}
			cancel()
		}
	}
	if l.conn != nil {
		l.conn.Close()
	}
	if l.cmd != nil && l.cmd.Process != nil {
		_ = l.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-l.waited:
		case <-time.After(10 * time.Second):
			_ = l.cmd.Process.Kill()
			<-l.waited
		}
	}
	// Shims outlive containerd by design; ours carry our socket address.
	for _, pid := range shimPIDs(l.Socket) {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	for _, p := range netnsPaths {
		if _, err := os.Stat(p); err == nil {
			_ = syscall.Unmount(p, syscall.MNT_DETACH)
			_ = os.Remove(p)
		}
	}
	for _, m := range mountsUnder(l.Dir) {
		if err := syscall.Unmount(m, syscall.MNT_DETACH); err != nil {
			errs = append(errs, fmt.Errorf("unmounting %s: %w", m, err))
		}
	}
	if link, err := netlink.LinkByName(l.Bridge); err == nil {
		if err := netlink.LinkDel(link); err != nil {
			errs = append(errs, fmt.Errorf("deleting bridge %s: %w", l.Bridge, err))
		}
	}
	// libcni's result cache (go-cni 2026: /var/lib/cni/results/<net>-<id>-<if>).
	if cached, _ := filepath.Glob(filepath.Join("/var/lib/cni/results", l.netName+"-*")); len(cached) > 0 {
		for _, c := range cached {
			_ = os.Remove(c)
		}
	}
	// Empty cgroup directories are removed with rmdir; one that another
	// lab still uses is busy and stays.
	for _, cg := range l.cgroups {
		_ = syscall.Rmdir(cg)
	}
	if err := os.RemoveAll(l.Dir); err != nil {
		errs = append(errs, err)
	}
	if err := errors.Join(errs...); err != nil {
		l.t.Errorf("crilab cleanup: %v", err)
	}
}

// netnsFromInfo pulls runtimeSpec.linux.namespaces[type=network].path out
// of a verbose info document without a full parse.
func netnsFromInfo(info string) string {
	i := strings.Index(info, `"type": "network"`)
	if i < 0 {
		i = strings.Index(info, `"type":"network"`)
	}
	if i < 0 {
		return ""
	}
	rest := info[i:]
	j := strings.Index(rest, `/var/run/netns/`)
	if j < 0 {
		return ""
	}
	end := strings.IndexByte(rest[j:], '"')
	if end < 0 {
		return ""
	}
	return rest[j : j+end]
}

// shimPIDs finds containerd-shim processes started for our socket.
func shimPIDs(socket string) []int {
	ents, _ := os.ReadDir("/proc")
	var pids []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil {
			continue
		}
		args := strings.Split(string(b), "\x00")
		if len(args) == 0 || !strings.Contains(filepath.Base(args[0]), "containerd-shim") {
			continue
		}
		for i, a := range args {
			if a == "-address" && i+1 < len(args) && args[i+1] == socket {
				pids = append(pids, pid)
			}
		}
	}
	return pids
}

// mountsUnder lists mount points under dir, deepest first.
func mountsUnder(dir string) []string {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil
	}
	defer f.Close()
	var ms []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) > 4 && (fields[4] == dir || strings.HasPrefix(fields[4], dir+"/")) {
			ms = append(ms, fields[4])
		}
	}
	sort.Slice(ms, func(i, j int) bool { return len(ms[i]) > len(ms[j]) })
	return ms
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

func randomByte() int {
	var b [1]byte
	_, _ = rand.Read(b[:])
	return int(b[0])
}
