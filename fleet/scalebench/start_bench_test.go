package scalebench

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/edgeheal/edgeheal/fleet"
	"github.com/edgeheal/edgeheal/internal/testsupport/mosquitto"
)

var (
	views  = flag.String("views", "", "BenchmarkFleetStart: built edgeheal-fleet binaries, comma-separated, started in turn (default: -fleet-bin's)")
	rounds = flag.Int("rounds", 4, "BenchmarkFleetStart: how many times each view starts")
)

// BenchmarkFleetStart is the views' start side by side: one broker, one
// fleet published once, and each view started on it in turn, -rounds
// times, until it has every status (every node's state known) and until
// it has every status and every history. A machine shared
// with others changes speed within minutes, so two builds compare only
// in one run, taking turns:
//
//	go test -run '^$' -bench FleetStart -benchtime 1x ./fleet/scalebench/ \
//	  -args -nodes 100000 -views /tmp/before,/tmp/after -rounds 4
//
// It prints each start and the medians, with each view's ratio to the
// first; with -results it writes them to fleet-start-<nodes>.md.
func BenchmarkFleetStart(b *testing.B) {
	bins := []string{viewBinary(b)}
	if *views != "" {
		bins = strings.Split(*views, ",")
	}
	n := *numNodes
	broker := mosquitto.Start(b, mosquitto.Options{Extra: *brokerConf})
	nodes := simulate(b, broker.PlainAddr, n)
	defer closeAll(nodes)
	publishFleet(b, broker, nodes)
	known, complete, cpu, brokerCPU := make([][]float64, len(bins)), make([][]float64, len(bins)), make([][]float64, len(bins)), make([][]float64, len(bins))
	var out strings.Builder
	fmt.Fprintf(&out, "# The fleet view's start, side by side at %d nodes\n\n%s, %s, %s. Each view was started on one broker and one fleet, in turn, %d rounds; the time from its start until it has every node's status (every state known), and until it has every status and every history (complete), its CPU (user + system) by then, and mosquitto's over the same time.\n\n",
		n, time.Now().UTC().Format(time.RFC3339), machine(), mosquittoVersion(), *rounds)
	out.WriteString("| round | view | every state known | complete | CPU | mosquitto's CPU |\n|---|---|---|---|---|---|\n")
	for round := range *rounds {
		for i, bin := range bins {
			v := startView(b, bin, broker.PlainURL(), fmt.Sprintf("start-%d-%d", round, i))
			start, b0 := time.Now(), cpuOf(broker.PID())
			statuses := func(h fleet.Health) bool { return h.Messages["status/applied"]+h.Messages["will/applied"] >= uint64(n) }
			v.waitFor(b, 120*time.Second, "the view has every node's status", statuses)
			known[i] = append(known[i], time.Since(start).Seconds())
			v.waitFor(b, 120*time.Second, "the view has every node's status and history", func(h fleet.Health) bool {
				return statuses(h) && h.Messages["history/applied"] >= uint64(n)
			})
			complete[i] = append(complete[i], time.Since(start).Seconds())
			cpu[i], brokerCPU[i] = append(cpu[i], v.cpu()), append(brokerCPU[i], cpuOf(broker.PID())-b0)
			v.stop()
			fmt.Fprintf(&out, "| %d | %s | %.2f s | %.2f s | %.2f s | %.2f s |\n", round+1, bin, known[i][round], complete[i][round], cpu[i][round], brokerCPU[i][round])
		}
	}
	out.WriteString("\n| view | every state known, median | complete, median | CPU, median | mosquitto's CPU, median | ratio to the first (known, complete, CPU) |\n|---|---|---|---|---|---|\n")
	for i, bin := range bins {
		k, c, u := median(known[i]), median(complete[i]), median(cpu[i])
		fmt.Fprintf(&out, "| %s | %.2f s | %.2f s | %.2f s | %.2f s | %.2f, %.2f, %.2f |\n", bin, k, c, u, median(brokerCPU[i]), k/median(known[0]), c/median(complete[0]), u/median(cpu[0]))
		b.ReportMetric(c, fmt.Sprintf("complete-s/view-%d", i))
	}
	fmt.Print(out.String())
	if *resultsDir != "" {
		if err := os.WriteFile(filepath.Join(*resultsDir, fmt.Sprintf("fleet-start-%d.md", n)), []byte(out.String()), 0o644); err != nil {
			b.Fatal(err)
		}
	}
}

func median(xs []float64) float64 {
	s := slices.Sorted(slices.Values(xs))
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}
