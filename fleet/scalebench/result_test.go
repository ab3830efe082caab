package scalebench

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
)

// Result is one run of the scale scenario, as committed in bench/results.
type Result struct {
	Date      string `json:"date"`
	Commit    string `json:"commit"`
	Machine   string `json:"machine"`
	Mosquitto string `json:"mosquitto"`

	Nodes      int `json:"nodes"`
	Sites      int `json:"sites"`
	BurstNodes int `json:"burst_nodes"`

	SetupSeconds       float64 `json:"setup_seconds"`        // the simulator publishing every retained status and history
	BrokerFloorSeconds float64 `json:"broker_floor_seconds"` // a bare client's subscribe until it has every retained message
	StatusesSeconds    float64 `json:"statuses_seconds"`     // the view's start until it has every node's status
	CompleteSeconds    float64 `json:"complete_seconds"`     // the view's start until it has every node's status and history
	CPUCompleteSeconds float64 `json:"cpu_complete_seconds"`
	// BrokerCPUCompleteSeconds is mosquitto's CPU over the same time:
	// on two cores the start takes at least half the sum of both.
	BrokerCPUCompleteSeconds float64 `json:"broker_cpu_complete_seconds"`
	// BenchCPUCompleteSeconds is this benchmark's own (the simulated
	// nodes, the polling) over the same time.
	BenchCPUCompleteSeconds float64 `json:"bench_cpu_complete_seconds"`
	RSSCompleteMiB          float64 `json:"rss_complete_mib"` // peak RSS by then
	SteadyMessagesPerSecond float64 `json:"steady_messages_per_second"`
	SteadyLagMaxSeconds     float64 `json:"steady_lag_max_seconds"`
	BurstLostSeconds        float64 `json:"burst_lost_seconds"` // connections cut until the view shows every one lost
	BurstBackSeconds        float64 `json:"burst_back_seconds"` // reconnects started until the view shows every one online
	BurstLagMaxSeconds      float64 `json:"burst_lag_max_seconds"`
	LagMaxSeconds           float64 `json:"lag_max_seconds"`
	HistoryEvents           int     `json:"history_events"`  // every node's history filled, as fast as the simulator sends
	HistorySeconds          float64 `json:"history_seconds"` // until the view applied them all
	RSSMiB                  float64 `json:"rss_mib"`
	RSSPeakMiB              float64 `json:"rss_peak_mib"`
	CPUSeconds              float64 `json:"cpu_seconds"`
	MetricsSeries           int     `json:"metrics_series"`
	MetricsBytes            int     `json:"metrics_bytes"`
	MetricsScrapeSeconds    float64 `json:"metrics_scrape_seconds"`
	PageBytes               int     `json:"page_bytes"` // the console's first screen, /
	PageSeconds             float64 `json:"page_seconds"`
	NodePageBytes           int     `json:"node_page_bytes"`

	Messages map[string]uint64 `json:"messages"`
	Goals    []Goal            `json:"goals"`
}

// Goal is one design target and whether the run met it.
type Goal struct {
	Name   string  `json:"name"`
	Target float64 `json:"target"`
	Got    float64 `json:"got"`
	Met    bool    `json:"met"`
}

func (r *Result) judge() {
	complete, rss := 5.0, 150.0
	if r.Nodes > 10000 {
		complete, rss = 10, 1536
	}
	r.Goals = []Goal{
		{Name: fmt.Sprintf("complete (every status and history) within %g s of the view's start", complete), Target: complete, Got: r.CompleteSeconds},
		{Name: "lag under 2 s during the burst (the view's own, ts to arrival)", Target: 2, Got: r.BurstLagMaxSeconds},
		{Name: "burst of Wills shown within 2 s (cut to all lost)", Target: 2, Got: r.BurstLostSeconds},
		{Name: fmt.Sprintf("RSS at most %g MiB (peak, every node's history and events full)", rss), Target: rss, Got: r.RSSPeakMiB},
		{Name: "the first screen at most 100 KB", Target: 100, Got: float64(r.PageBytes) / 1000},
	}
	for i := range r.Goals {
		r.Goals[i].Met = r.Goals[i].Got <= r.Goals[i].Target
	}
}

func (r *Result) markdown() string {
	var b strings.Builder
	fmt.Fprintf(&b, "# The fleet view at %d nodes\n\n", r.Nodes)
	fmt.Fprintf(&b, "%s, commit %s, %s, %s. %d simulated nodes in %d sites, each on its own MQTT connection with its own Last Will, "+
		"through a real mosquitto on loopback; the view is the built edgeheal-fleet in a process of its own.%s\n\n",
		r.Date, r.Commit, r.Machine, r.Mosquitto, r.Nodes, r.Sites, sharedNote(r.Nodes))
	b.WriteString("| goal | target | measured | met |\n|---|---|---|---|\n")
	for _, g := range r.Goals {
		fmt.Fprintf(&b, "| %s | %g | %.3g | %s |\n", g.Name, g.Target, g.Got, map[bool]string{true: "yes", false: "**no**"}[g.Met])
	}
	fmt.Fprintf(&b, "\n| measure | value |\n|---|---|\n")
	for _, row := range [][2]string{
		{"simulator: publish every retained status and full history", fmt.Sprintf("%.2f s", r.SetupSeconds)},
		{"the broker alone: a bare client that only acknowledges, subscribe → every retained status and history", fmt.Sprintf("%.2f s", r.BrokerFloorSeconds)},
		{"view start → every node's status applied", fmt.Sprintf("%.2f s", r.StatusesSeconds)},
		{"view start → every status and history applied", fmt.Sprintf("%.2f s (CPU %.2f s, RSS peak by then %.1f MiB)", r.CompleteSeconds, r.CPUCompleteSeconds, r.RSSCompleteMiB)},
		{"mosquitto's CPU meanwhile; the two cores' floor for the start, (the view's CPU + mosquitto's) / 2; the benchmark's own CPU meanwhile (simulated nodes, polling)",
			fmt.Sprintf("%.2f s; %.2f s; %.2f s", r.BrokerCPUCompleteSeconds, (r.CPUCompleteSeconds+r.BrokerCPUCompleteSeconds)/2, r.BenchCPUCompleteSeconds)},
		{"steady traffic (heartbeats every 5 min, 10 events/s)", fmt.Sprintf("%.1f messages/s, lag at most %.3f s", r.SteadyMessagesPerSecond, r.SteadyLagMaxSeconds)},
		{fmt.Sprintf("burst: %d connections of %s cut → all lost", r.BurstNodes, burstSite), fmt.Sprintf("%.2f s", r.BurstLostSeconds)},
		{"burst: reconnects with a higher session → all online", fmt.Sprintf("%.2f s, lag at most %.3f s", r.BurstBackSeconds, r.BurstLagMaxSeconds)},
		{"every node's history filled", fmt.Sprintf("%d events in %.1f s: %.0f events/s applied", r.HistoryEvents, r.HistorySeconds, float64(r.HistoryEvents)/r.HistorySeconds)},
		{"RSS now / peak (after the history)", fmt.Sprintf("%.1f / %.1f MiB", r.RSSMiB, r.RSSPeakMiB)},
		{"CPU over the whole run", fmt.Sprintf("%.2f s", r.CPUSeconds)},
		{"/metrics", fmt.Sprintf("%d series, %d KiB, scraped in %.3f s", r.MetricsSeries, r.MetricsBytes/1024, r.MetricsScrapeSeconds)},
		{"the console's first screen (/)", fmt.Sprintf("%d bytes, served in %.3f s; a node's page %d bytes", r.PageBytes, r.PageSeconds, r.NodePageBytes)},
	} {
		fmt.Fprintf(&b, "| %s | %s |\n", row[0], row[1])
	}
	return b.String()
}

func (r *Result) write(dir string) error {
	if out, err := exec.Command("git", "rev-parse", "--short", "HEAD").Output(); err == nil {
		r.Commit = strings.TrimSpace(string(out))
	}
	j, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	name := fmt.Sprintf("fleet-scale-%d", r.Nodes)
	if err := os.WriteFile(filepath.Join(dir, name+".json"), append(j, '\n'), 0o644); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, name+".md"), []byte(r.markdown()), 0o644)
}

func sharedNote(n int) string {
	if n <= ownConnections {
		return ""
	}
	return fmt.Sprintf(" Beyond %d connections a machine's open files and loopback ports run out: the %d nodes of the site that goes lost have "+
		"their own connection and Will, the others publish through shared connections of 1,000 nodes each (the view cannot tell).", ownConnections, n/sites)
}

func machine() string {
	kernel, _ := os.ReadFile("/proc/sys/kernel/osrelease")
	return fmt.Sprintf("%d cores, kernel %s, %s", runtime.NumCPU(), strings.TrimSpace(string(kernel)), runtime.Version())
}

func mosquittoVersion() string {
	out, _ := exec.Command("dpkg-query", "-W", "-f=${Version}", "mosquitto").Output()
	return "mosquitto " + strings.TrimSpace(string(out))
}
