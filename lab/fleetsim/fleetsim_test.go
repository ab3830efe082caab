package fleetsim

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/edgeheal/edgeheal/configs"
	"github.com/edgeheal/edgeheal/internal/testsupport/mosquitto"
)

var (
	fleetNodes   = flag.Int("fleet.nodes", 2000, "publishers in the fleet simulation (10000 for the large fleet)")
	fleetResults = flag.String("fleet.results", "", "write the report to this directory (bench/results) as fleet-<nodes>-<time>.{json,md} and fleet-<nodes>.{json,md}")
	fleetJitter  = flag.Duration("fleet.connect-jitter", 12*time.Second, "report.mqtt.reconnect.connect_jitter of the fleet setting")
	fleetRender  = flag.String("fleet.render", "", "only rewrite the markdown of this fleet-*.json (next to it), then stop")
)

// mosquittoBroker is the Broker of the simulation: Debian's mosquitto.
type mosquittoBroker struct{ b *mosquitto.Broker }

func (m mosquittoBroker) URL() string  { return m.b.PlainURL() }
func (m mosquittoBroker) Start() error { m.b.Start(); return nil }
func (m mosquittoBroker) Stop() error  { m.b.Stop(); return nil }
func (m mosquittoBroker) Log() string  { return m.b.Log() }

func newBroker(tb testing.TB, nodes int) mosquittoBroker {
	return mosquittoBroker{mosquitto.New(tb, mosquitto.Options{
		Plain: true, Persistence: true, OpenFiles: 2*nodes + 1000,
		// The cloud's subscriber may be a moment behind the broker's
		// return: keep everything for it.
		Extra: "max_queued_messages 0\n",
	})}
}

// BenchmarkFleetBrokerOutage is the fleet simulation: -fleet.nodes
// publishers (2,000 by default) with events queued through a 30 s outage
// of one mosquitto, once with the shipped reconnect defaults and once with
// a fleet's connect_jitter (-fleet.connect-jitter, 12 s), side by side.
// With -fleet.results DIR it writes the report there. About three minutes
// at 2,000 nodes; no root.
//
//	go test -run '^$' -bench FleetBrokerOutage -benchtime 1x -timeout 30m ./lab/fleetsim/ -args -fleet.results $PWD/bench/results
func BenchmarkFleetBrokerOutage(b *testing.B) {
	if *fleetRender != "" {
		if err := renderMarkdown(*fleetRender); err != nil {
			b.Fatal(err)
		}
		return
	}
	if testing.Short() {
		b.Skip("thousands of publishers and a 30 s outage: skipped with -short")
	}
	fleet := Defaults
	fleet.ConnectJitter = configs.Duration(*fleetJitter)
	settings := []struct {
		name string
		r    configs.Reconnect
	}{{"defaults", Defaults}, {fmt.Sprintf("fleet (connect_jitter %s)", configs.Duration(*fleetJitter)), fleet}}
	for b.Loop() {
		rep := Report{Date: time.Now(), Commit: gitCommit(), Machine: fmt.Sprintf("%s, %d cores", runtime.GOARCH, runtime.NumCPU()),
			Broker: "Debian's mosquitto on loopback, plain TCP, anonymous, persistence on; the cloud a QoS 1 subscriber with a persistent session"}
		for _, s := range settings {
			r, err := Run(context.Background(), newBroker(b, *fleetNodes), Options{
				Nodes: *fleetNodes, Reconnect: s.r, Name: s.name, StateDir: b.TempDir(), Progress: os.Stderr,
			})
			if err != nil {
				b.Fatal(err)
			}
			rep.Results = append(rep.Results, r)
			tag := strings.Fields(s.name)[0]
			b.ReportMetric(float64(r.PeakConnectsPerSecond), tag+"-peak-connects/s")
			b.ReportMetric(r.AllEventsSeconds, tag+"-all-events-s")
			b.ReportMetric(float64(r.Lost), tag+"-lost")
		}
		b.Log("\n" + rep.Markdown())
		if *fleetResults != "" {
			if err := rep.Write(*fleetResults); err != nil {
				b.Fatal(err)
			}
		}
	}
}

// renderMarkdown rewrites the markdown beside a report's JSON.
func renderMarkdown(path string) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	var rep Report
	if err := json.Unmarshal(b, &rep); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return os.WriteFile(strings.TrimSuffix(path, ".json")+".md", []byte(rep.Markdown()), 0o644)
}

func gitCommit() string {
	out, err := exec.Command("git", "describe", "--always", "--dirty", "--abbrev=7").Output()
	if err != nil {
		return "unknown"
	}
	return strings.TrimSpace(string(out))
}

// A small fleet through a short outage: the simulation counts every event,
// every connect and nothing twice. It tests the harness, not the targets.
func TestFleetSimulationCountsASmallFleet(t *testing.T) {
	if testing.Short() {
		t.Skip("a broker outage: skipped with -short")
	}
	quick := Defaults
	quick.StartJitter = configs.Duration(500 * time.Millisecond)
	br := newBroker(t, 20)
	r, err := Run(context.Background(), br, Options{
		Nodes: 20, EventsPerNode: 2, Outage: 4 * time.Second, Reconnect: quick, StateDir: t.TempDir(),
	})
	if err != nil {
		t.Fatal(err)
	}
	if r.Events != 40 || r.Delivered != 40 || r.Lost != 0 || r.OutOfOrder != 0 {
		t.Errorf("events %d delivered %d lost %d out of order %d, want 40, 40, 0, 0", r.Events, r.Delivered, r.Lost, r.OutOfOrder)
	}
	if r.ConnectsAfterReturn < 20 || r.PeakConnectsPerSecond < 1 || r.DialsAfterReturn < 20 {
		t.Errorf("connects %d (peak %d/s), dials %d: want every node counted\n%s", r.ConnectsAfterReturn, r.PeakConnectsPerSecond, r.DialsAfterReturn, br.Log()[:min(3000, len(br.Log()))])
	}
	if r.AllEventsSeconds <= 0 || r.NodeP95Seconds > r.NodeMaxSeconds || r.NodeP50Seconds > r.NodeP95Seconds {
		t.Errorf("times all %.2f p50 %.2f p95 %.2f max %.2f", r.AllEventsSeconds, r.NodeP50Seconds, r.NodeP95Seconds, r.NodeMaxSeconds)
	}
	md := Report{Results: []Result{r}}.Markdown()
	if !strings.Contains(md, "| defaults | 500ms |") {
		t.Errorf("markdown:\n%s", md)
	}
}

func TestConnectsPerSecondReadsTheBrokersLog(t *testing.T) {
	log := `1764600000: New connection from 127.0.0.1:1 on port 1883.
1764600000: New client connected from 127.0.0.1:1 as edgeheal-fleet-00001 (p2, c1, k30).
1764600001: New client connected from 127.0.0.1:2 as edgeheal-fleet-00002 (p2, c1, k30).
1764600001: New client connected from 127.0.0.1:3 as edgeheal-fleet-00003 (p2, c1, k30).
1764600001: New client connected from 127.0.0.1:4 as fleetsim-cloud-1 (p2, c0, k60).
1764600002: New client connected from 127.0.0.1:5 as edgeheal-fleet-00004 (p2, c1, k30).
`
	peak, total := connectsPerSecond(log, time.Unix(1764600001, 0))
	if peak != 2 || total != 3 {
		t.Errorf("peak %d total %d, want 2 and 3 (the cloud and the lines before the return not counted)", peak, total)
	}
}
