package fleetsim

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// Report is one benchmark run: the settings simulated side by side,
// against the same broker on the same machine.
type Report struct {
	Date    time.Time `json:"date"`
	Commit  string    `json:"commit"`
	Machine string    `json:"machine"`
	Broker  string    `json:"broker"`
	Results []Result  `json:"results"`
}

// Markdown renders the report as the table performance.md shows.
func (rep Report) Markdown() string {
	var b strings.Builder
	fmt.Fprintf(&b, "# Fleet simulation: a broker outage, %s\n\n", rep.Date.UTC().Format("2006-01-02 15:04 UTC"))
	fmt.Fprintf(&b, "Commit %s on %s; %s.\n\n", rep.Commit, rep.Machine, rep.Broker)
	if len(rep.Results) > 0 {
		r := rep.Results[0]
		fmt.Fprintf(&b, "%d publishers (agent/mqtt with agent/outbox, one process), each connected, then the broker stopped for %.0f s with %d events queued on every node, then started again. Times are from the broker's return. Targets: connects under N / 10 s = %.0f per second, every event within %s, none lost.\n\n",
			r.Nodes, r.OutageSeconds, r.EventsPerNode, r.AttemptsLimitPerSecond, ArrivalTarget)
	}
	b.WriteString("| setting | connect_jitter | peak connects/s | target | TCP attempts/s after / during outage | every event after | target | node p50 / p95 | delivered / duplicates / not arrived within the wait | out of order |\n")
	b.WriteString("|---|---|---|---|---|---|---|---|---|---|\n")
	for _, r := range rep.Results {
		fmt.Fprintf(&b, "| %s | %s | %d | %s | %d / %d | %s | %s | %.1f / %.1f s | %d / %d / %d | %d |\n",
			r.Name, r.Reconnect.ConnectJitter, r.PeakConnectsPerSecond, verdict(r.AttemptsTargetMet),
			r.PeakDialsPerSecond, r.PeakDialsPerSecondDuringOutage, seconds(r.AllEventsSeconds), verdict(r.ArrivalTargetMet && r.NoLossTargetMet),
			r.NodeP50Seconds, r.NodeP95Seconds, r.Delivered, r.Duplicates, r.Lost, r.OutOfOrder)
	}
	if len(rep.Results) == 2 && rep.Results[0].PeakConnectsPerSecond > 0 && rep.Results[0].AllEventsSeconds > 0 {
		a, f := rep.Results[0], rep.Results[1]
		fmt.Fprintf(&b, "\nRatios %s / %s: peak connects per second %.2f, every event after %.2f.\n",
			f.Name, a.Name, float64(f.PeakConnectsPerSecond)/float64(a.PeakConnectsPerSecond), f.AllEventsSeconds/a.AllEventsSeconds)
	}
	for _, r := range rep.Results {
		if r.MemoryOutboxes {
			fmt.Fprintf(&b, "\n%s: the outboxes were kept in memory (the process's open-file limit does not allow a log and a socket per node).\n", r.Name)
		}
	}
	return b.String()
}

// Write saves the report as fleet-<nodes>-<time>.{json,md} in dir, and as
// fleet-<nodes>.{json,md}, the latest for that fleet size.
func (rep Report) Write(dir string) error {
	j, err := json.MarshalIndent(rep, "", "  ")
	if err != nil {
		return err
	}
	nodes := 0
	if len(rep.Results) > 0 {
		nodes = rep.Results[0].Nodes
	}
	base := fmt.Sprintf("fleet-%d", nodes)
	stamp := rep.Date.UTC().Format("20060102T150405Z")
	for _, name := range []string{base + "-" + stamp, base} {
		if err := os.WriteFile(filepath.Join(dir, name+".json"), append(j, '\n'), 0o644); err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(dir, name+".md"), []byte(rep.Markdown()), 0o644); err != nil {
			return err
		}
	}
	return nil
}
