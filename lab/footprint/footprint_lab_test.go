package footprint

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"golang.zx2c4.com/wireguard/wgctrl"
	"golang.zx2c4.com/wireguard/wgctrl/wgtypes"

	"github.com/edgeheal/edgeheal/internal/testsupport"
	"github.com/edgeheal/edgeheal/internal/testsupport/mosquitto"
	"github.com/edgeheal/edgeheal/internal/testsupport/wgpair"
	"github.com/edgeheal/edgeheal/lab/bench"
	"github.com/edgeheal/edgeheal/localapi"
)

var (
	edgehealBin = flag.String("footprint.edgeheal", "", "the built edgeheal (default: bin/edgeheal in the repository)")
	nodeExpBin  = flag.String("footprint.node-exporter", "/usr/bin/prometheus-node-exporter", "Debian's prometheus-node-exporter")
	resultsDir  = flag.String("footprint.results", "", "write footprint-<date>.{json,md} into this directory (bench/results)")
	idle        = flag.Duration("footprint.idle", 60*time.Second, "the idle window after the scrapes")
	hubPeers    = flag.Int("footprint.hub-peers", 5000, "peers of the hub's WireGuard interface")
	agentEnv    = flag.String("footprint.env", "", "space-separated NAME=VALUE pairs added to both agents' environment (e.g. GOGC=25), to compare settings")
	profileDir  = flag.String("footprint.profile", "", "with a daemon built with -tags profile: write each agent's heap and goroutine profiles at the end into DIR/leaf and DIR/hub")
)

const scrapes = 3

// BenchmarkLabFootprint runs the three processes at once and reports
// them side by side (see the package doc). Run it with `make footprint`,
// or:
//
//	sudo env PATH=$PATH go test -run '^$' -bench LabFootprint -benchtime 1x ./lab/footprint/ -args -footprint.results $PWD/bench/results
func BenchmarkLabFootprint(b *testing.B) {
	testsupport.RequireRoot(b, "network namespaces, WireGuard devices, brokers")
	bin := *edgehealBin
	if bin == "" {
		bin = filepath.Join(testsupport.PackageDir(), "..", "..", "bin", "edgeheal")
	}
	if _, err := os.Stat(bin); err != nil {
		b.Skipf("no edgeheal binary (%v): build it with `make build`", err)
	}
	if _, err := os.Stat(*nodeExpBin); err != nil {
		b.Skipf("no node_exporter (%v): apt-get install --no-install-recommends prometheus-node-exporter (make test-deps)", err)
	}
	for b.Loop() {
		r := run(b, bin)
		fmt.Print(r.Markdown()) // b.Log would cut the tables short
		if *resultsDir != "" {
			if err := r.write(*resultsDir); err != nil {
				b.Fatal(err)
			}
		}
	}
}

// proc is one measured process.
type proc struct {
	id           string // node_exporter, leaf or hub: names its files
	name, config string
	ns           *wgpair.NS
	metrics      string // the /metrics URL inside ns
	socket       string // the agent's local API, for its status
	bin          string
	cmd          *exec.Cmd
	log          *bytes.Buffer
	cpu0         time.Duration
	row          Row
	env          []string
}

func run(b *testing.B, bin string) Result {
	dir := b.TempDir()
	leaf := newLeaf(b, dir, bin)
	hub := newHub(b, dir, bin, *hubPeers)
	ne := &proc{id: "node_exporter", name: "node_exporter", config: "Debian's defaults (`--web.listen-address` only)", ns: leaf.ns, bin: *nodeExpBin,
		metrics: "http://127.0.0.1:9100/metrics"}
	start(b, ne, "--web.listen-address=127.0.0.1:9100")
	procs := []*proc{ne, leaf, hub}
	for _, p := range []*proc{leaf, hub} {
		waitOnline(b, p, 90*time.Second)
	}
	time.Sleep(10 * time.Second) // past start-up: the first rounds, the broker's session
	for _, p := range procs {
		for range scrapes {
			body := get(b, p.ns, p.metrics)
			readScrape(b, p, body)
			if *profileDir != "" {
				_ = os.WriteFile(filepath.Join(*profileDir, p.id+".metrics"), body, 0o644)
			}
		}
		s, err := bench.SampleProc(p.cmd.Process.Pid)
		if err != nil {
			b.Fatal(err)
		}
		p.cpu0 = s.CPU
	}
	at := time.Now()
	samples := map[*proc][]Memory{}
	for time.Since(at) < *idle {
		time.Sleep(time.Second)
		for _, p := range procs {
			m, err := readMemory(p.cmd.Process.Pid)
			if err != nil {
				b.Fatalf("%s: %v", p.name, err)
			}
			samples[p] = append(samples[p], m)
		}
	}
	window := time.Since(at)
	for _, p := range procs {
		s, err := bench.SampleProc(p.cmd.Process.Pid)
		if err != nil {
			b.Fatal(err)
		}
		p.row.CPUPerMin = round3((s.CPU - p.cpu0).Seconds() / window.Minutes())
		p.row.Memory = median(samples[p])
		p.row.Threads = threads(p.cmd.Process.Pid)
		fi, err := os.Stat(p.bin)
		if err != nil {
			b.Fatal(err)
		}
		p.row.BinaryBytes = fi.Size()
		p.row.Name, p.row.Config = p.name, p.config
	}
	if *profileDir != "" {
		for _, p := range procs {
			if smaps, err := os.ReadFile(fmt.Sprintf("/proc/%d/smaps", p.cmd.Process.Pid)); err == nil {
				_ = os.WriteFile(filepath.Join(*profileDir, p.id+".smaps"), smaps, 0o644)
			}
		}
		for _, p := range []*proc{leaf, hub} {
			_ = p.cmd.Process.Signal(syscall.SIGUSR1) // a daemon built without -tags profile ignores it
		}
		time.Sleep(2 * time.Second)
	}
	for _, p := range []*proc{leaf, hub} {
		if st := status(b, p); st != "online" {
			p.row.Note = "state " + st + " at the end, not online: the figures are not of a healthy steady state"
		}
	}
	m := bench.DescribeMachine()
	r := Result{Date: time.Now().UTC().Format(time.RFC3339), Commit: m.Commit, IdleSeconds: round3(window.Seconds()), Scrapes: scrapes,
		Machine:    fmt.Sprintf("%s, %s, %d CPUs, %s, %s", m.OS, m.CPUModel, m.CPUs, m.Memory, m.GoVersion),
		NodeExpVer: nodeExporterVersion(), AgentEnv: *agentEnv, Edgeheal: edgehealVersion(bin)}
	for _, p := range procs {
		r.Rows = append(r.Rows, p.row)
	}
	return r
}

func round3(f float64) float64 { return float64(int64(f*1000+0.5)) / 1000 }

// newLeaf is a node as edgeheal's design describes it, in a namespace of
// its own: an uplink (a veth to the "cloud" namespace) whose TX checksum
// offload is kept off, a WireGuard interface with three peers (three
// devices in the cloud namespace) and keepalive 20 s, the tunnel probed
// by ICMP to the first peer's tunnel address, one workload whose broker
// is probed from the workload's own namespace and from the host, MQTT
// reporting over TLS, and the HTTP endpoints. The brokers listen on
// loopback of their namespaces (the test PKI's certificate is for
// 127.0.0.1): the daemon's cost is the same wherever the broker is.
func newLeaf(b *testing.B, dir, bin string) *proc {
	edge, cloud, pod := wgpair.NewNS(b), wgpair.NewNS(b), wgpair.NewNS(b)
	up, _ := wgpair.Veth(b, edge, "192.168.88.1/24", cloud, "192.168.88.2/24")
	wc, err := wgctrl.New()
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { wc.Close() })
	ew := wgpair.NewDevice(b, edge, wgpair.Name("fpe"), 51830)
	wgpair.AddAddr(b, edge, ew.Name, "10.99.0.1/24")
	var peers []wgtypes.PeerConfig
	for i := range 3 {
		cw := wgpair.NewDevice(b, cloud, wgpair.Name("fpc"), 51820+i)
		addr := fmt.Sprintf("10.99.0.%d", 11+i)
		if i == 0 {
			wgpair.AddAddr(b, cloud, cw.Name, addr+"/24") // replies to the probe go back this way
		} else {
			wgpair.AddAddr(b, cloud, cw.Name, addr+"/32")
		}
		if err := wc.ConfigureDevice(cw.Name, wgtypes.Config{Peers: []wgtypes.PeerConfig{{
			PublicKey: ew.Key.PublicKey(), Endpoint: &net.UDPAddr{IP: net.IPv4(192, 168, 88, 1), Port: 51830},
			ReplaceAllowedIPs: true, AllowedIPs: []net.IPNet{cidr("10.99.0.1/32")},
		}}}); err != nil {
			b.Fatal(err)
		}
		peers = append(peers, wgtypes.PeerConfig{PublicKey: cw.Key.PublicKey(), Endpoint: &net.UDPAddr{IP: net.IPv4(192, 168, 88, 2), Port: 51820 + i},
			ReplaceAllowedIPs: true, AllowedIPs: []net.IPNet{cidr(addr + "/32")}})
	}
	if err := wc.ConfigureDevice(ew.Name, wgtypes.Config{Peers: peers}); err != nil {
		b.Fatal(err)
	}
	host := broker(b, edge, true)
	podBroker := broker(b, pod, false)
	p := &proc{id: "leaf", name: "edgeheal (leaf)", ns: edge, bin: bin, metrics: "http://127.0.0.1:9469/metrics",
		socket: filepath.Join(dir, "leaf-state", "edgeheal.sock"),
		config: "one uplink, one tunnel with 3 peers and an ICMP probe, one workload (pod and host MQTT probes), MQTT over TLS, HTTP on"}
	cfg := fmt.Sprintf(`version: 1
node: {name: footprint-leaf, site: lab}
uplinks:
  - name: %s
    tx_checksum: "off"
tunnels:
  - interface: %s
    peers: all
    persistent_keepalive: 20s
    probe: {target: "icmp://10.99.0.11"}
    unit: ""
workloads:
  - name: telemetry
    netns: %s
    tunnel: %s
    mqtt: {broker: %q, host_broker: %q}
report:
  mqtt: {broker: %q, tls: {ca: %q}}
  http: {listen: "127.0.0.1:9469", socket: %s/edgeheal.sock}
  state_dir: %s
`, up, ew.Name, nsPath(pod), ew.Name, podBroker.PlainURL(), host.PlainURL(), host.TLSURL(), host.PKI.CAFile, filepath.Join(dir, "leaf-state"), filepath.Join(dir, "leaf-state"))
	startAgent(b, p, dir, "leaf", cfg)
	return p
}

// newHub is a hub's WireGuard interface with n peers, each with its own
// key and tunnel address and no endpoint (so no handshake and no
// traffic, and none of them goes stale: the hub does not set keepalive),
// watched by a second edgeheal that reports over TLS and serves HTTP.
// It is the hub's steady state: n checks, n series of each check metric,
// nothing to repair.
func newHub(b *testing.B, dir, bin string, n int) *proc {
	ns := wgpair.NewNS(b)
	wc, err := wgctrl.New()
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { wc.Close() })
	hw := wgpair.NewDevice(b, ns, wgpair.Name("fph"), 51840)
	wgpair.AddAddr(b, ns, hw.Name, "10.100.0.1/16")
	peers := make([]wgtypes.PeerConfig, n)
	for i := range peers {
		k, err := wgtypes.GeneratePrivateKey()
		if err != nil {
			b.Fatal(err)
		}
		peers[i] = wgtypes.PeerConfig{PublicKey: k.PublicKey(), ReplaceAllowedIPs: true,
			AllowedIPs: []net.IPNet{cidr(fmt.Sprintf("10.100.%d.%d/32", 1+i/250, 1+i%250))}}
	}
	if err := wc.ConfigureDevice(hw.Name, wgtypes.Config{Peers: peers}); err != nil {
		b.Fatal(err)
	}
	br := broker(b, ns, true)
	p := &proc{id: "hub", name: fmt.Sprintf("edgeheal (hub, %d peers)", n), ns: ns, bin: bin, metrics: "http://127.0.0.1:9469/metrics",
		socket: filepath.Join(dir, "hub-state", "edgeheal.sock"),
		config: fmt.Sprintf("one tunnel with %d peers (keepalive left alone), MQTT over TLS, HTTP on", n)}
	cfg := fmt.Sprintf(`version: 1
node: {name: footprint-hub, site: lab}
uplinks: []
tunnels:
  - interface: %s
    peers: all
    persistent_keepalive: 0s
    unit: ""
report:
  mqtt: {broker: %q, tls: {ca: %q}}
  http: {listen: "127.0.0.1:9469", socket: %s/edgeheal.sock}
  state_dir: %s
`, hw.Name, br.TLSURL(), br.PKI.CAFile, filepath.Join(dir, "hub-state"), filepath.Join(dir, "hub-state"))
	startAgent(b, p, dir, "hub", cfg)
	return p
}

func cidr(s string) net.IPNet {
	_, n, err := net.ParseCIDR(s)
	if err != nil {
		panic(err)
	}
	return *n
}

// nsPath names ns for other processes: this process's descriptor of it.
func nsPath(ns *wgpair.NS) string { return fmt.Sprintf("/proc/%d/fd/%d", os.Getpid(), ns.NsHandle()) }

// broker is a mosquitto on ns's loopback, plain and, with tls, TLS too.
func broker(b *testing.B, ns *wgpair.NS, tls bool) *mosquitto.Broker {
	return mosquitto.Start(b, mosquitto.Options{Plain: true, TLS: tls, Netns: nsPath(ns)})
}

func startAgent(b *testing.B, p *proc, dir, name, cfg string) {
	path := filepath.Join(dir, name+".yaml")
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		b.Fatal(err)
	}
	if out, err := exec.Command(p.bin, "config", "check", "--config", path).CombinedOutput(); err != nil {
		b.Fatalf("edgeheal config check %s: %v\n%s", path, err, out)
	}
	p.env = strings.Fields(*agentEnv)
	if *profileDir != "" {
		pd := filepath.Join(*profileDir, name)
		if err := os.MkdirAll(pd, 0o755); err != nil {
			b.Fatal(err)
		}
		p.env = append(p.env, "EDGEHEAL_PROFILE_DIR="+pd)
	}
	start(b, p, "run", "--config", path, "--log-format", "json")
}

// start runs p's binary with args inside p's namespace (nsenter execs it,
// so the PID is the program's own) and ends it by its PID at cleanup.
func start(b *testing.B, p *proc, args ...string) {
	p.log = &bytes.Buffer{}
	p.cmd = exec.Command("nsenter", append([]string{"--net=" + nsPath(p.ns), "--", p.bin}, args...)...)
	p.cmd.Stdout, p.cmd.Stderr = p.log, p.log
	p.cmd.Env = append(os.Environ(), p.env...)
	if err := p.cmd.Start(); err != nil {
		b.Fatalf("starting %s: %v", p.name, err)
	}
	b.Cleanup(func() {
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { _ = p.cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(20 * time.Second):
			_ = p.cmd.Process.Kill()
			<-done
		}
		if b.Failed() {
			b.Logf("%s output:\n%s", p.name, tailOf(p.log.String(), 4000))
		}
	})
}

func tailOf(s string, n int) string {
	if len(s) > n {
		return "..." + s[len(s)-n:]
	}
	return s
}

// client dials from inside ns: a socket keeps the namespace it was made in.
func client(ns *wgpair.NS) *http.Client {
	return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DisableKeepAlives: true,
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			var c net.Conn
			err := ns.Do(func() error {
				var err error
				c, err = (&net.Dialer{}).DialContext(ctx, network, addr)
				return err
			})
			return c, err
		}}}
}

func get(b *testing.B, ns *wgpair.NS, url string) []byte {
	resp, err := client(ns).Get(url)
	if err != nil {
		b.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		b.Fatalf("GET %s: %s, %v", url, resp.Status, err)
	}
	return body
}

// readScrape keeps the figures of a scrape: its size, its samples, and the
// runtime's own gauges.
func readScrape(b *testing.B, p *proc, body []byte) {
	p.row.ScrapeBytes = len(body)
	parser := expfmt.NewTextParser(model.LegacyValidation)
	mfs, err := parser.TextToMetricFamilies(bytes.NewReader(body))
	if err != nil {
		b.Fatalf("parsing %s's /metrics: %v", p.name, err)
	}
	p.row.Series = 0
	for _, mf := range mfs {
		p.row.Series += len(mf.GetMetric())
	}
	g := func(name string) float64 {
		if mf, ok := mfs[name]; ok && len(mf.GetMetric()) > 0 {
			return mf.GetMetric()[0].GetGauge().GetValue()
		}
		return 0
	}
	p.row.Goroutines = int(g("go_goroutines"))
	p.row.HeapInuse, p.row.StackInuse, p.row.GoSys = g("go_memstats_heap_inuse_bytes"), g("go_memstats_stack_inuse_bytes"), g("go_memstats_sys_bytes")
	p.row.HeapFree = g("go_memstats_heap_idle_bytes") - g("go_memstats_heap_released_bytes")
}

// status is the agent's /v1/status state (online, degraded, ...).
func status(b *testing.B, p *proc) string {
	var st struct {
		State string `json:"state"`
		Ready bool   `json:"ready"`
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := localapi.New(p.socket).Get(ctx, localapi.StatusPath, &st); err != nil {
		return "unreachable: " + err.Error()
	}
	return st.State
}

// waitOnline polls until the agent reports online (every check healthy,
// the tunnel's peers handshaken), for at most limit.
func waitOnline(b *testing.B, p *proc, limit time.Duration) {
	deadline := time.Now().Add(limit)
	st := ""
	for time.Now().Before(deadline) {
		if p.cmd.ProcessState != nil {
			break
		}
		if st = status(b, p); st == "online" {
			return
		}
		time.Sleep(500 * time.Millisecond)
	}
	b.Fatalf("%s not online within %v (last: %s); output:\n%s", p.name, limit, st, tailOf(p.log.String(), 4000))
}

func threads(pid int) int {
	st, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for l := range strings.Lines(string(st)) {
		if v, ok := strings.CutPrefix(l, "Threads:"); ok {
			var n int
			fmt.Sscan(strings.TrimSpace(v), &n)
			return n
		}
	}
	return 0
}

func edgehealVersion(bin string) string {
	out, _ := exec.Command(bin, "version").Output()
	line, _, _ := strings.Cut(string(out), "\n")
	return strings.TrimSpace(line)
}

func nodeExporterVersion() string {
	out, _ := exec.Command(*nodeExpBin, "--version").CombinedOutput()
	line, _, _ := strings.Cut(string(out), "\n")
	if f := strings.Fields(line); len(f) >= 3 {
		return f[2]
	}
	return strings.TrimSpace(line)
}
