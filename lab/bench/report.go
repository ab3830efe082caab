package bench

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// Report is a whole benchmark run.
type Report struct {
	Machine    Machine           `json:"machine"`
	Started    time.Time         `json:"started"`
	Finished   time.Time         `json:"finished"`
	Short      bool              `json:"short"`
	Parallel   bool              `json:"parallel"`
	Settings   map[string]string `json:"settings"`
	WorkDir    string            `json:"work_dir"` // configs, logs and agent state of every lab
	Results    []Result          `json:"results"`
	Footprints []Footprint       `json:"footprints,omitempty"`
	Goals      []Goal            `json:"goals"`
}

func settingsOf(o Options) map[string]string {
	return map[string]string{
		"s1_window":       o.S1Window.String(),
		"replugs":         fmt.Sprint(o.Replugs),
		"replug_every":    o.ReplugEvery.String(),
		"long_blackhole":  o.LongBlackhole.String(),
		"s4_window":       o.S4Window.String(),
		"broker_outage":   o.BrokerOutage.String(),
		"tail":            o.Tail.String(),
		"footprint":       o.Footprint.String(),
		"reresolve_every": o.ReresolveEvery.String(),
		"telemetry":       "20 msg/s QoS 0 from the pod through the tunnel; delivered = arrived within 1 s",
	}
}

// sort orders results by scenario, then contender, in report order.
func (r *Report) sort() {
	idx := func(list []string, s string) int {
		if i := slices.Index(list, s); i >= 0 {
			return i
		}
		return len(list)
	}
	slices.SortStableFunc(r.Results, func(a, b Result) int {
		if d := idx(Scenarios, a.Scenario) - idx(Scenarios, b.Scenario); d != 0 {
			return d
		}
		return idx(Contenders, a.Contender) - idx(Contenders, b.Contender)
	})
	slices.SortStableFunc(r.Footprints, func(a, b Footprint) int {
		return idx(Contenders, a.Contender) - idx(Contenders, b.Contender)
	})
}

// Find returns the result of a contender in a scenario.
func (r *Report) Find(scenario, contender string) (Result, bool) {
	for _, x := range r.Results {
		if x.Scenario == scenario && x.Contender == contender {
			return x, true
		}
	}
	return Result{}, false
}

// Goal is one of issue 9's targets, checked against edgeheal's figures.
type Goal struct {
	Scenario string `json:"scenario"`
	What     string `json:"what"`
	Target   string `json:"target"`
	Measured string `json:"measured"`
	Met      bool   `json:"met"`
}

// CheckGoals compares edgeheal's results with the goals of issue 9. A
// scenario that was not run has no goal line.
func CheckGoals(rep *Report) []Goal {
	var gs []Goal
	add := func(sc, what, target, measured string, met bool) {
		gs = append(gs, Goal{Scenario: sc, What: what, Target: target, Measured: measured, Met: met})
	}
	if r, ok := rep.Find(S1, Edgeheal); ok && r.Error == "" {
		add(S1, "outage after the agent starts", "< 2 s", fmtOutage(r), !r.OutageOngoing && r.OutageSeconds < 2)
	}
	if r, ok := rep.Find(S2, Edgeheal); ok && r.Error == "" {
		add(S2, "telemetry loss", "≤ 0.1 %", fmt.Sprintf("%.3f %%", r.LossPct), r.LossPct <= 0.1)
		p99 := Percentile(r.ExposureMs, 99)
		m := fmt.Sprintf("%.1f ms", p99)
		if r.ExposureUnfixed > 0 || math.IsNaN(p99) {
			m = fmt.Sprintf("%s, %d re-plugs not fixed", m, r.ExposureUnfixed)
		}
		add(S2, "offload exposure p99", "< 50 ms", m, r.ExposureUnfixed == 0 && !math.IsNaN(p99) && p99 < 50)
	}
	for _, sc := range []string{S3a, S3b} {
		r, ok := rep.Find(sc, Edgeheal)
		if !ok || r.Error != "" {
			continue
		}
		det := "not detected"
		if r.DetectSeconds != nil {
			det = fmt.Sprintf("%.2f s", *r.DetectSeconds)
		}
		add(sc, "detection", "≤ 5 s", det, r.DetectSeconds != nil && *r.DetectSeconds <= 5)
		block := r.RestoreAt.Sub(r.FaultAt).Seconds()
		add(sc, "outage", fmt.Sprintf("≤ block + 2 s (%.0f s)", block+2), fmtOutage(r), !r.OutageOngoing && r.OutageSeconds <= block+2)
	}
	if r, ok := rep.Find(S4, Edgeheal); ok && r.Error == "" {
		m := "not back"
		if r.RecoverSeconds != nil {
			m = fmt.Sprintf("%.2f s", *r.RecoverSeconds)
		}
		add(S4, "tunnel back after the DNS change", "≤ 10 s", m, r.RecoverSeconds != nil && *r.RecoverSeconds <= 10)
	}
	if r, ok := rep.Find(S5, Edgeheal); ok && r.Error == "" {
		add(S5, "tunnel actions", "0", fmt.Sprint(r.NeedlessActions), r.NeedlessActions == 0)
	}
	for _, f := range rep.Footprints {
		if f.Contender != Edgeheal || f.Error != "" {
			continue
		}
		add("footprint", "RSS", "< 20 MiB", fmt.Sprintf("%.1f MiB", f.RSSMiB), f.RSSMiB < 20)
		add("footprint", "idle CPU", "< 1 % of a core", fmt.Sprintf("%.2f %%", f.CPUPct), f.CPUPct < 1)
	}
	return gs
}

func fmtOutage(r Result) string {
	if r.OutageOngoing {
		return fmt.Sprintf("> %.1f s (not recovered)", r.OutageSeconds)
	}
	if r.Outages == 0 {
		return "0 s"
	}
	return fmt.Sprintf("%.2f s", r.OutageSeconds)
}

func fmtPtr(p *float64, unit string) string {
	if p == nil {
		return "—"
	}
	return fmt.Sprintf("%.2f%s", *p, unit)
}

func fmtRatio(p *float64) string {
	if p == nil {
		return "—"
	}
	return fmt.Sprintf("×%.3g", *p)
}

// Markdown renders the report: machine, goals, the table per scenario
// with ratios against the no-agent contender, footprints, and the chart.
func (rep *Report) Markdown(chartFile string) string {
	var b strings.Builder
	m := rep.Machine
	fmt.Fprintf(&b, "# edgeheal lab benchmark\n\n")
	mode := "full"
	if rep.Short {
		mode = "short (`--short`: fewer re-plugs, shorter S4 and footprint windows)"
	}
	par := "one after another"
	if rep.Parallel {
		par = "at the same time (`--parallel`), each on its own labs"
	}
	fmt.Fprintf(&b, "Run %s → %s (%s), %s; contenders ran %s. Every contender got a fresh lab for every scenario.\n\n",
		rep.Started.Format(time.RFC3339), rep.Finished.Format(time.RFC3339), rep.Finished.Sub(rep.Started).Round(time.Second), mode, par)
	fmt.Fprintf(&b, "**Machine:** %s; %s; %d CPUs (%s); %s RAM; kernel %s; %s; load at start %s. %s (commit %s), binary %.1f MiB.\n\n",
		m.Hostname, m.OS, m.CPUs, m.CPUModel, m.Memory, m.Kernel, m.GoVersion, m.LoadAvg, m.EdgehealVersion, m.Commit,
		float64(m.EdgehealBinaryBytes)/(1<<20))
	b.WriteString("**Contenders:** `none` = WireGuard alone, keepalive 0 (Flannel's default); `keepalive-25s` = PersistentKeepalive 25 s only (K3s wireguard-native); `reresolve-dns` = wireguard-tools' `reresolve-dns.sh` every 30 s + keepalive 25 s; `edgeheal` = the daemon with its default policy (keepalive 20 s, probe every 1 s, 3 misses).\n\n")
	b.WriteString("**Columns:** detect = fault to the contender's first sign of noticing (event or first action); outage = longest run of lost telemetry from the fault on (first lost sent → first delivered received); recover = fault (or end of the fault) → first delivered; loss = lost / judged telemetry from the fault to the end; ratios are against `none` in the same run (lower is better).\n\n")

	if len(rep.Goals) > 0 {
		b.WriteString("## Goals (issue 9)\n\n| scenario | goal | target | measured | met |\n|---|---|---|---|---|\n")
		for _, g := range rep.Goals {
			met := "yes"
			if !g.Met {
				met = "**no**"
			}
			fmt.Fprintf(&b, "| %s | %s | %s | %s | %s |\n", g.Scenario, g.What, g.Target, g.Measured, met)
		}
		b.WriteString("\n")
	}

	b.WriteString("## Results\n\n")
	b.WriteString("| scenario | contender | detect | outage | recover | loss | outage vs none | loss vs none | actions | needless | notes |\n")
	b.WriteString("|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, r := range rep.Results {
		base, _ := rep.Find(r.Scenario, None)
		notes := append([]string(nil), r.Notes...)
		if r.Error != "" {
			notes = append(notes, "error: "+r.Error)
		}
		switch r.Scenario {
		case S2:
			if len(r.ExposureMs) > 0 {
				notes = append(notes, fmt.Sprintf("exposure p50 %.1f ms, p99 %.1f ms", Percentile(r.ExposureMs, 50), Percentile(r.ExposureMs, 99)))
			}
			if r.ExposureUnfixed > 0 {
				notes = append(notes, fmt.Sprintf("offload left on after %d of %d re-plugs", r.ExposureUnfixed, r.ExposureUnfixed+len(r.ExposureMs)))
			}
		case S3a, S3b:
			if r.HandshakeAfterRestoreSeconds != nil {
				notes = append(notes, fmt.Sprintf("new handshake %.2f s after the path returned", *r.HandshakeAfterRestoreSeconds))
			}
		case S5:
			if r.EventsQueued > 0 {
				notes = append(notes, fmt.Sprintf("%d events queued during the outage, the last delivered %.1f s after the broker's return", r.EventsQueued, r.QueuedDeliveredSeconds))
			}
		}
		recover := fmtPtr(r.RecoverSeconds, " s")
		if r.Scenario == S2 {
			recover = "—" // many faults: the outage column says it
		}
		outRatio, lossRatio := "—", "—"
		if r.Contender != None && base.Error == "" {
			outRatio = fmtRatio(Ratio(r.TotalOutageSeconds, base.TotalOutageSeconds))
			lossRatio = fmtRatio(Ratio(r.LossPct, base.LossPct))
		}
		fmt.Fprintf(&b, "| %s %s | %s | %s | %s | %s | %s | %s | %s | %s | %d | %s |\n",
			r.Scenario, Titles[r.Scenario], r.Contender, fmtPtr(r.DetectSeconds, " s"), fmtOutage(r),
			recover, lossText(r.LossPct), outRatio, lossRatio, actionsText(r.Actions), r.NeedlessActions,
			strings.Join(notes, "; "))
	}
	b.WriteString("\nOutage ratios compare the total outage time in the scenario.\n")

	if len(rep.Footprints) > 0 {
		b.WriteString("\n## Footprint at steady state\n\n| contender | RSS | peak RSS | CPU (% of a core) | size | window | note |\n|---|---|---|---|---|---|---|\n")
		for _, f := range rep.Footprints {
			note := f.Note
			if f.Error != "" {
				note = "error: " + f.Error
			}
			if f.Runs > 0 {
				note = fmt.Sprintf("%d runs; %s", f.Runs, note)
			}
			fmt.Fprintf(&b, "| %s | %.1f MiB | %.1f MiB | %.2f %% | %s | %.0f s | %s |\n",
				f.Contender, f.RSSMiB, f.PeakRSSMiB, f.CPUPct, sizeText(f.Bytes), f.Seconds, note)
		}
	}
	if chartFile != "" {
		fmt.Fprintf(&b, "\n## Telemetry delivered over time\n\n![telemetry delivered per second, per scenario and contender](%s)\n", chartFile)
	}
	b.WriteString("\nReproduce: `sudo make bench-lab` (or `go build -o bin/edgeheal ./cmd/edgeheal && sudo go run ./cmd/edgeheal-lab bench`; `--short` for a quick run, `--parallel` to run the contenders side by side).\n")
	return b.String()
}

func sizeText(n int64) string {
	if n >= 1<<20 {
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	}
	return fmt.Sprintf("%.1f KiB", float64(n)/1024)
}

// actionsText is "3: reassert, handshake ×2" style.
func actionsText(as []Action) string {
	if len(as) == 0 {
		return "0"
	}
	var order []string
	count := map[string]int{}
	for _, a := range as {
		if count[a.What] == 0 {
			order = append(order, a.What)
		}
		count[a.What]++
	}
	parts := make([]string, len(order))
	for i, w := range order {
		parts[i] = w
		if count[w] > 1 {
			parts[i] = fmt.Sprintf("%s ×%d", w, count[w])
		}
	}
	return fmt.Sprintf("%d: %s", len(as), strings.Join(parts, ", "))
}

// ReadReport loads a report written by Write (results.json).
func ReadReport(path string) (*Report, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var rep Report
	if err := json.Unmarshal(b, &rep); err != nil {
		return nil, fmt.Errorf("reading %s: %w", path, err)
	}
	return &rep, nil
}

// Write stores the report as results.json, results.md and chart.svg in
// dir, and also under a timestamped name so earlier runs are kept.
func (rep *Report) Write(dir string) (mdPath string, err error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	stamp := rep.Started.Format("20060102T150405Z")
	svg := Chart(rep)
	j, err := json.MarshalIndent(rep, "", "  ")
	if err != nil {
		return "", err
	}
	files := map[string][]byte{
		"results.json":           append(j, '\n'),
		"chart.svg":              svg,
		"results.md":             []byte(rep.Markdown("chart.svg")),
		"run-" + stamp + ".json": append(j, '\n'),
		"run-" + stamp + ".md":   []byte(rep.Markdown("run-" + stamp + ".svg")),
		"run-" + stamp + ".svg":  svg,
	}
	for name, b := range files {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			return "", err
		}
	}
	return filepath.Join(dir, "results.md"), nil
}

// lossText keeps small losses visible: 0.008 % is not 0.00 %.
func lossText(p float64) string {
	if p > 0 && p < 0.1 {
		return fmt.Sprintf("%.3f %%", p)
	}
	return fmt.Sprintf("%.2f %%", p)
}
