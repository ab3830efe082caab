package scalebench

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/edgeheal/edgeheal/fleet"
	"github.com/edgeheal/edgeheal/internal/testsupport"
	"github.com/edgeheal/edgeheal/internal/testsupport/mosquitto"
)

var (
	fleetBin   = flag.String("fleet-bin", "", "the built edgeheal-fleet (default: bin/edgeheal-fleet in the repository)")
	resultsDir = flag.String("results", "", "write fleet-scale-<nodes>.json and .md into this directory (bench/results)")
	numNodes   = flag.Int("nodes", 10000, "simulated nodes")
	// max_queued_messages: mosquitto's default (1000) drops what does not
	// fit in the view's queue, retained statuses at subscribe among them
	// (docs/fleet.md, "The broker"); -broker "" shows it.
	brokerConf = flag.String("broker", "max_queued_messages 1000000\n", "lines added to mosquitto.conf")
)

const (
	sites       = 10
	burstSite   = "site-00"
	steadyFor   = 10 * time.Second
	statusEvery = 5 * time.Minute // the agent's heartbeat
	eventsPerS  = 10              // fleet-wide: an incident, an action or a recovery every 100 ms
	pollEvery   = 50 * time.Millisecond
)

// BenchmarkFleetScale: `make bench-fleet`, or
//
//	go test -run '^$' -bench FleetScale -benchtime 1x ./fleet/scalebench/ -args -results $PWD/bench/results
//
// One run is the whole scenario (about a minute); run it with -benchtime 1x.
func BenchmarkFleetScale(b *testing.B) {
	bin := viewBinary(b)
	var r Result
	for range b.N {
		r = runScale(b, bin, *numNodes)
	}
	b.ReportMetric(r.CompleteSeconds, "complete-s")
	b.ReportMetric(r.BurstLostSeconds, "burst-lost-s")
	b.ReportMetric(r.LagMaxSeconds, "lag-max-s")
	b.ReportMetric(r.RSSPeakMiB, "rss-peak-MiB")
	b.ReportMetric(r.CPUSeconds, "cpu-s")
	if *resultsDir != "" {
		if err := r.write(*resultsDir); err != nil {
			b.Fatal(err)
		}
	}
	b.Logf("%s", r.markdown())
}

func viewBinary(b testing.TB) string {
	b.Helper()
	bin := *fleetBin
	if bin == "" {
		bin = filepath.Join("..", "..", "bin", "edgeheal-fleet")
	}
	abs, _ := filepath.Abs(bin)
	testsupport.RequireBinaryFor(b, abs, "go build -o bin/edgeheal-fleet ./cmd/edgeheal-fleet")
	return abs
}

// TestFleetViewAtSmallScale runs the benchmark's scenario with 1,000
// nodes as a test: the built view gets complete, sees the burst lost and
// back, and absorbs every node's history. It asserts what happened, not
// how fast (the benchmark measures that).
func TestFleetViewAtSmallScale(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the built view against 1,000 simulated nodes: run without -short")
	}
	r := runScale(t, viewBinary(t), 1000)
	if r.BurstNodes != 100 || r.HistoryEvents != 1000*historyPerNode {
		t.Errorf("burst of %d nodes, %d history events; want 100 and %d", r.BurstNodes, r.HistoryEvents, 1000*historyPerNode)
	}
	if r.Messages["will/applied"] != 100 || r.Messages["history/applied"] != 1000 || r.Messages["status/invalid"]+r.Messages["event/invalid"]+r.Messages["history/invalid"] != 0 {
		t.Errorf("messages %v: want 100 Wills and 1,000 histories applied, none invalid", r.Messages)
	}
	if r.PageBytes == 0 || r.PageBytes > 100_000 {
		t.Errorf("the first screen: %d bytes, want some and at most 100 KB", r.PageBytes)
	}
}

// runScale is the scenario: a fleet's retained statuses and histories,
// the view started on them, steady heartbeats and events, a site whose
// nodes all go lost at once and come back, every node's events full.
func runScale(b testing.TB, bin string, n int) Result {
	b.Helper()
	broker := mosquitto.Start(b, mosquitto.Options{Extra: *brokerConf})
	r := Result{Nodes: n, Sites: sites, Date: time.Now().UTC().Format(time.RFC3339), Machine: machine(), Mosquitto: mosquittoVersion()}
	nodes := simulate(b, broker.PlainAddr, n)
	defer closeAll(nodes)
	setup, floor := publishFleet(b, broker, nodes)
	r.SetupSeconds, r.BrokerFloorSeconds = setup.Seconds(), floor.Seconds()

	v := startView(b, bin, broker.PlainURL(), "scale-view")
	start, brokerCPU, ownCPU := time.Now(), cpuOf(broker.PID()), cpuOf(os.Getpid())
	// Every node's status, not every node: a node's history makes it
	// known too, and the histories come on a connection of their own.
	statuses := func(h fleet.Health) bool { return h.Messages["status/applied"]+h.Messages["will/applied"] >= uint64(n) }
	v.waitFor(b, 120*time.Second, "the view has every node's status", statuses)
	r.StatusesSeconds = time.Since(start).Seconds()
	v.waitFor(b, 120*time.Second, "the view has every node's status and history", func(h fleet.Health) bool {
		return statuses(h) && h.Messages["history/applied"] >= uint64(n)
	})
	r.CompleteSeconds = time.Since(start).Seconds()
	r.CPUCompleteSeconds, r.BrokerCPUCompleteSeconds, r.BenchCPUCompleteSeconds = v.cpu(), cpuOf(broker.PID())-brokerCPU, cpuOf(os.Getpid())-ownCPU
	_, r.RSSCompleteMiB = v.rss(b)

	stop := steadyTraffic(nodes)
	lag := v.watchLag()
	time.Sleep(steadyFor)
	r.SteadyMessagesPerSecond = v.health(b).MessageRate
	r.SteadyLagMaxSeconds = lag()
	r.burst(b, v, broker.PlainAddr, nodes)
	stop()
	r.LagMaxSeconds = max(r.SteadyLagMaxSeconds, r.BurstLagMaxSeconds)

	r.HistoryEvents, r.HistorySeconds = fillHistory(b, v, nodes)
	r.MetricsSeries, r.MetricsBytes, r.MetricsScrapeSeconds = v.scrape(b)
	r.PageBytes, r.PageSeconds = v.page(b, "/")
	r.NodePageBytes, _ = v.page(b, "/node/"+nodes[1].name)
	r.RSSMiB, r.RSSPeakMiB = v.rss(b)
	r.CPUSeconds = v.cpu()
	h := v.health(b)
	r.Messages = h.Messages
	r.judge()
	return r
}

// publishFleet publishes every node's retained status and history and
// says how long that took, and how long a bare client then takes to read
// them all (the broker's floor).
func publishFleet(b testing.TB, broker *mosquitto.Broker, nodes []*simNode) (setup, floor time.Duration) {
	b.Helper()
	start := time.Now()
	if err := parallel(nodes, 100, func(nd *simNode) error {
		if err := nd.status(); err != nil {
			return err
		}
		return nd.history()
	}); err != nil {
		b.Fatalf("publishing the fleet's statuses and histories: %v", err)
	}
	setup = time.Since(start)
	floor, err := drain(broker.PlainAddr, 2*len(nodes))
	if err != nil {
		b.Fatalf("draining the retained messages: %v", err)
	}
	atRest(b, broker.PID())
	return setup, floor
}

// atRest waits until the broker is at rest: a view restarts on a broker
// that has held its fleet's retained messages for a while, not on one
// still tidying up after the drain's 200,000 messages (at 100,000 nodes
// 1.5 s of its CPU, which a view started at once shared the cores with).
// At rest is under 5 % of a core over half a second; at most 30 s.
func atRest(b testing.TB, pid int) {
	b.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		c0 := cpuOf(pid)
		time.Sleep(500 * time.Millisecond)
		if cpuOf(pid)-c0 < 0.025 {
			return
		}
		if time.Now().After(deadline) {
			b.Fatalf("mosquitto (pid %d) still busy 30 s after the fleet was published and drained", pid)
		}
	}
}

// simulate connects the fleet: every node on its own connection with
// its Will, or beyond ownConnections only the burst site's nodes, the
// others on shared connections of 1,000 nodes each.
func simulate(b testing.TB, addr string, n int) []*simNode {
	b.Helper()
	nodes := make([]*simNode, n)
	var shared *simConn
	for i := range nodes {
		nodes[i] = &simNode{name: fmt.Sprintf("node-%06d", i), site: fmt.Sprintf("site-%02d", i%sites), session: 1}
		if n > ownConnections && nodes[i].site != burstSite {
			if shared == nil || i%1000 == 0 {
				var err error
				if shared, err = dial(addr, fmt.Sprintf("sim-shared-%d", i), "", nil); err != nil {
					b.Fatalf("simulating the fleet: %v", err)
				}
			}
			nodes[i].shared = shared
		}
	}
	if err := parallel(nodes, 100, func(nd *simNode) error {
		if nd.shared != nil {
			return nil
		}
		return nd.connect(addr)
	}); err != nil {
		b.Fatalf("simulating the fleet: %v", err)
	}
	return nodes
}

func closeAll(nodes []*simNode) {
	_ = parallel(nodes, 200, func(nd *simNode) error {
		nd.drop()
		if nd.shared != nil {
			nd.shared.close()
		}
		return nil
	})
}

// burst cuts the connections of one site at once (the broker speaks
// their Wills) and brings them back with a higher session.
func (r *Result) burst(b testing.TB, v *view, addr string, nodes []*simNode) {
	burst := burstNodes(nodes)
	r.BurstNodes = len(burst)
	lag := v.watchLag()
	start := time.Now()
	_ = parallel(burst, len(burst), func(nd *simNode) error { nd.drop(); return nil })
	v.waitFor(b, 60*time.Second, "the burst's nodes are lost", func(h fleet.Health) bool { return h.ByState[fleet.StateLost] == len(burst) })
	r.BurstLostSeconds = time.Since(start).Seconds()
	start = time.Now()
	if err := parallel(burst, 100, func(nd *simNode) error {
		nd.session++
		if err := nd.connect(addr); err != nil {
			return err
		}
		return nd.status()
	}); err != nil {
		b.Fatalf("bringing the burst back: %v", err)
	}
	v.waitFor(b, 60*time.Second, "the burst's nodes are back", func(h fleet.Health) bool {
		return h.ByState[fleet.StateLost] == 0 && h.ByState[fleet.StateOnline] == len(nodes)
	})
	r.BurstBackSeconds = time.Since(start).Seconds()
	r.BurstLagMaxSeconds = lag()
}

// historyPerNode is more events than a node's history keeps (20 events,
// 5 actions): after it, every node's history is full, the view's memory
// at its worst.
const historyPerNode = 26

// fillHistory makes every node send historyPerNode events as fast as the
// simulator can, and waits until the view applied them all: its
// throughput, and the memory of a fleet whose every history is full.
func fillHistory(b testing.TB, v *view, nodes []*simNode) (events int, took float64) {
	b.Helper()
	applied := func(h fleet.Health) (n uint64) {
		for _, c := range h.Events {
			n += c
		}
		return n
	}
	before := applied(v.health(b))
	start := time.Now()
	if err := parallel(nodes, 200, func(nd *simNode) error {
		for range historyPerNode {
			if err := nd.event("action"); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		b.Fatalf("filling the history: %v", err)
	}
	want := before + uint64(len(nodes)*historyPerNode)
	v.waitFor(b, 5*time.Minute, "the view applied every history event", func(h fleet.Health) bool { return applied(h) >= want })
	return len(nodes) * historyPerNode, time.Since(start).Seconds()
}

// steadyTraffic publishes, until stopped, what a quiet fleet sends: each
// node's heartbeat every 5 minutes and eventsPerS events, from random
// nodes that are connected.
func steadyTraffic(nodes []*simNode) (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		statuses := float64(len(nodes)) / statusEvery.Seconds() / 10 // per tick
		var owed float64
		for {
			select {
			case <-done:
				return
			case <-tick.C:
			}
			for owed += statuses; owed >= 1; owed-- {
				_ = nodes[rand.N(len(nodes))].status()
			}
			for range eventsPerS / 10 {
				_ = nodes[rand.N(len(nodes))].event("action")
			}
		}
	})
	return func() { close(done); wg.Wait() }
}

func burstNodes(nodes []*simNode) []*simNode {
	var out []*simNode
	for _, nd := range nodes {
		if nd.site == burstSite {
			out = append(out, nd)
		}
	}
	return out
}

// view is the edgeheal-fleet process under test.
type view struct {
	cmd  *exec.Cmd
	base string
}

func startView(b testing.TB, bin, broker, clientID string) *view {
	b.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	dir := b.TempDir()
	cfg := filepath.Join(dir, "config.yaml")
	// The door is open: the benchmark measures the view, not bcrypt.
	conf := fmt.Sprintf("mqtt: {broker: %q, client_id: %s}\nlisten: %s\nweb: {auth: {disabled: true}}\n", broker, clientID, addr)
	if err := os.WriteFile(cfg, []byte(conf), 0o600); err != nil {
		b.Fatal(err)
	}
	cmd := testsupport.Command(bin, "run", "--config", cfg)
	testsupport.StartLogged(b, "edgeheal-fleet", filepath.Join(dir, "view.log"), cmd)
	return &view{cmd: cmd, base: "http://" + addr}
}

func (v *view) health(b testing.TB) fleet.Health {
	b.Helper()
	var h fleet.Health
	resp, err := http.Get(v.base + "/v1/fleet")
	if err != nil {
		return h
	}
	defer resp.Body.Close()
	_ = json.NewDecoder(resp.Body).Decode(&h)
	return h
}

func (v *view) waitFor(b testing.TB, limit time.Duration, what string, ok func(fleet.Health) bool) {
	b.Helper()
	deadline := time.Now().Add(limit)
	for !ok(v.health(b)) {
		if time.Now().After(deadline) {
			b.Fatalf("%s: not within %s (%+v)", what, limit, v.health(b))
		}
		time.Sleep(pollEvery)
	}
}

// watchLag samples the view's own lag until the returned func is called,
// which returns the largest sample.
func (v *view) watchLag() func() float64 {
	done := make(chan struct{})
	var mu sync.Mutex
	var peak float64
	go func() {
		for {
			select {
			case <-done:
				return
			case <-time.After(pollEvery):
			}
			var h fleet.Health
			if resp, err := http.Get(v.base + "/v1/fleet"); err == nil {
				_ = json.NewDecoder(resp.Body).Decode(&h)
				resp.Body.Close()
			}
			mu.Lock()
			peak = max(peak, h.LagMaxSeconds) // the raw delay: one machine, one clock
			mu.Unlock()
		}
	}()
	return func() float64 {
		close(done)
		mu.Lock()
		defer mu.Unlock()
		return peak
	}
}

// scrape reads /metrics once: its series, its size and how long it took.
func (v *view) scrape(b testing.TB) (series, size int, took float64) {
	b.Helper()
	start := time.Now()
	resp, err := http.Get(v.base + "/metrics")
	if err != nil {
		b.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		b.Fatal(err)
	}
	took = time.Since(start).Seconds()
	for _, line := range strings.Split(string(body), "\n") {
		if line != "" && !strings.HasPrefix(line, "#") {
			series++
		}
	}
	return series, len(body), took
}

// page reads a page of the console once: its size and how long it took.
func (v *view) page(b testing.TB, path string) (size int, took float64) {
	b.Helper()
	start := time.Now()
	resp, err := http.Get(v.base + path)
	if err != nil {
		b.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != 200 {
		b.Fatalf("GET %s: %d %v", path, resp.StatusCode, err)
	}
	return len(body), time.Since(start).Seconds()
}

// stop ends the view by its PID (SIGTERM) and waits for it.
func (v *view) stop() {
	_ = v.cmd.Process.Signal(syscall.SIGTERM)
	_ = v.cmd.Wait()
}

// rss is the view's resident memory now and at its peak (VmHWM).
func (v *view) rss(b testing.TB) (now, peak float64) {
	b.Helper()
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", v.cmd.Process.Pid))
	if err != nil {
		b.Fatal(err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		var kb float64
		if _, err := fmt.Sscanf(line, "VmRSS: %f kB", &kb); err == nil {
			now = kb / 1024
		}
		if _, err := fmt.Sscanf(line, "VmHWM: %f kB", &kb); err == nil {
			peak = kb / 1024
		}
	}
	return now, peak
}

// cpu is the view's user and system time so far, in seconds.
func (v *view) cpu() float64 { return cpuOf(v.cmd.Process.Pid) }

// cpuOf is a process's CPU (user + system) so far, in seconds.
func cpuOf(pid int) float64 {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	// Fields after the command (which is in parentheses): utime is the
	// 12th, stime the 13th; in clock ticks of 1/100 s.
	f := strings.Fields(string(data[strings.LastIndexByte(string(data), ')')+1:]))
	var ut, st float64
	fmt.Sscan(f[11], &ut)
	fmt.Sscan(f[12], &st)
	return (ut + st) / 100
}
