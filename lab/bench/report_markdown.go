package bench

import (
	"fmt"
	"strings"
	"time"
)

// Markdown renders the report: machine, goals, the table per scenario
// with ratios against the no-agent contender, footprints, and the chart.
func (rep *Report) Markdown(chartFile string) string {
	var b strings.Builder
	rep.writeMarkdownIntro(&b)
	rep.writeGoalsTable(&b)
	rep.writeResultsTable(&b)
	rep.writeTransfersTable(&b)
	rep.writeFootprintTable(&b)
	if chartFile != "" {
		fmt.Fprintf(&b, "\n## Telemetry delivered over time\n\n![telemetry delivered per second, per scenario and contender](%s)\n", chartFile)
	}
	b.WriteString("\nReproduce: `sudo make bench-lab` (or `go build -o bin/edgeheal ./cmd/edgeheal && sudo go run ./cmd/edgeheal-lab bench`; `--short` for a quick run, `--parallel` to run the contenders side by side).\n")
	return b.String()
}

// writeMarkdownIntro writes the title, the run's times and mode, the
// machine, and what the contenders and the columns mean.
func (rep *Report) writeMarkdownIntro(b *strings.Builder) {
	m := rep.Machine
	fmt.Fprintf(b, "# edgeheal lab benchmark\n\n")
	mode := "full"
	if rep.Short {
		mode = "short (`--short`: fewer re-plugs, shorter S4 and footprint windows)"
	}
	par := "one after another"
	if rep.Parallel {
		par = "at the same time (`--parallel`), each on its own labs"
	}
	fmt.Fprintf(b, "Run %s → %s (%s), %s; contenders ran %s. Every contender got a fresh lab for every scenario.\n\n",
		rep.Started.Format(time.RFC3339), rep.Finished.Format(time.RFC3339), rep.Finished.Sub(rep.Started).Round(time.Second), mode, par)
	fmt.Fprintf(b, "**Machine:** %s; %s; %d CPUs (%s); %s RAM; kernel %s; %s; load at start %s. %s (commit %s), binary %.1f MiB.\n\n",
		m.Hostname, m.OS, m.CPUs, m.CPUModel, m.Memory, m.Kernel, m.GoVersion, m.LoadAvg, m.EdgehealVersion, m.Commit,
		float64(m.EdgehealBinaryBytes)/(1<<20))
	b.WriteString("**Contenders:** `none` = WireGuard alone, keepalive 0 (Flannel's default); `keepalive-25s` = PersistentKeepalive 25 s only (K3s wireguard-native); `reresolve-dns` = wireguard-tools' `reresolve-dns.sh` every 30 s + keepalive 25 s; `mtu-probing` = WireGuard alone with the kernel's `net.ipv4.tcp_mtu_probing=1` at both ends (pod, edge and cloud; S8 only); `edgeheal` = the daemon with its default policy (keepalive 20 s, probe every 1 s, 3 misses, path MTU checked every 2 s).\n\n")
	b.WriteString("**Columns:** detect = fault to the contender's first sign of noticing (event or first action); outage = longest run of lost telemetry from the fault on (first lost sent → first delivered received); recover = fault (or end of the fault) → first delivered; loss = lost / judged telemetry from the fault to the end; ratios are against `none` in the same run (lower is better).\n\n")
}

// writeGoalsTable writes the goals and whether each was met; nothing when
// the report has no goals.
func (rep *Report) writeGoalsTable(b *strings.Builder) {
	if len(rep.Goals) == 0 {
		return
	}
	b.WriteString("## Goals\n\n| scenario | goal | target | measured | met |\n|---|---|---|---|---|\n")
	for _, g := range rep.Goals {
		met := "yes"
		if !g.Met {
			met = "**no**"
		}
		fmt.Fprintf(b, "| %s | %s | %s | %s | %s |\n", g.Scenario, g.What, g.Target, g.Measured, met)
	}
	b.WriteString("\n")
}

// writeResultsTable writes a row per result, with its outage and loss
// against the no-agent contender's in the same scenario.
func (rep *Report) writeResultsTable(b *strings.Builder) {
	b.WriteString("## Results\n\n")
	b.WriteString("| scenario | contender | detect | outage | recover | loss | outage vs none | loss vs none | actions | needless | notes |\n")
	b.WriteString("|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, r := range rep.Results {
		base, _ := rep.Find(r.Scenario, None)
		recover := fmtPtr(r.RecoverSeconds, " s")
		if r.Scenario == S2 {
			recover = "—" // many faults: the outage column says it
		}
		outRatio, lossRatio := "—", "—"
		if r.Contender != None && base.Error == "" {
			outRatio = fmtRatio(Ratio(r.TotalOutageSeconds, base.TotalOutageSeconds))
			lossRatio = fmtRatio(Ratio(r.LossPct, base.LossPct))
		}
		fmt.Fprintf(b, "| %s %s | %s | %s | %s | %s | %s | %s | %s | %s | %d | %s |\n",
			r.Scenario, Titles[r.Scenario], r.Contender, fmtPtr(r.DetectSeconds, " s"), fmtOutage(r),
			recover, lossText(r.LossPct), outRatio, lossRatio, actionsText(r.Actions), r.NeedlessActions,
			strings.Join(resultNotes(r), "; "))
	}
	b.WriteString("\nOutage ratios compare the total outage time in the scenario.\n")
}

// resultNotes is a result's notes column: its own notes, its error, and
// what its scenario measures beyond the table's columns.
func resultNotes(r Result) []string {
	notes := append([]string(nil), r.Notes...)
	if r.Error != "" {
		notes = append(notes, "error: "+r.Error)
	}
	switch r.Scenario {
	case S2:
		if len(r.ExposureKernelMs) > 0 {
			notes = append(notes, fmt.Sprintf("exposure by the kernel's clock p50 %.1f ms, p99 %.1f ms, max %.1f ms",
				Percentile(r.ExposureKernelMs, 50), Percentile(r.ExposureKernelMs, 99), Percentile(r.ExposureKernelMs, 100)))
		}
		if n := len(r.ExposureSplit); n > 0 {
			making, agent := make([]float64, n), make([]float64, n)
			for i, s := range r.ExposureSplit {
				making[i], agent[i] = s.MakingMs, s.AgentMs
			}
			notes = append(notes, fmt.Sprintf("of which the link's making (kernel and lab) p50 %.1f ms, max %.1f ms; the agent's part p50 %.1f ms, max %.1f ms",
				Percentile(making, 50), Percentile(making, 100), Percentile(agent, 50), Percentile(agent, 100)))
		}
		if len(r.ExposureMs) > 0 {
			notes = append(notes, fmt.Sprintf("exposure as the bench saw it p50 %.1f ms, p99 %.1f ms", Percentile(r.ExposureMs, 50), Percentile(r.ExposureMs, 99)))
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
	return notes
}

// writeTransfersTable writes S8's bulk transfers per contender; nothing
// when S8 was not played.
func (rep *Report) writeTransfersTable(b *strings.Builder) {
	var rows []Result
	for _, r := range rep.Results {
		if r.Scenario == S8 {
			rows = append(rows, r)
		}
	}
	if len(rows) == 0 {
		return
	}
	b.WriteString("\n## S8: bulk transfers under a path-MTU blackhole\n\n")
	b.WriteString("A new 256 KiB TCP transfer, each its own connection, from the pod through the tunnel and from the edge over the uplink, ↓ from the cloud and ↑ to it. **First**: the fault to the end of the first new transfer that completed (one started every 0.5 s, each given 20 s). **Later**: the next ones, one after another. **Report**: the fault to the agent's first event at the cloud, over the same uplink.\n\n")
	b.WriteString("| contender | before | first: tunnel ↓ | tunnel ↑ | uplink ↓ | uplink ↑ | later (each) | report | actions |\n|---|---|---|---|---|---|---|---|---|\n")
	for _, r := range rows {
		first := map[string]string{}
		var before, later []float64
		failed := 0
		for _, t := range r.Transfers {
			first[t.Kind] = fmtPtr(t.FirstSeconds, " s")
			if t.FirstSeconds == nil {
				first[t.Kind] = "never"
			}
			before = append(before, t.BeforeSeconds)
			later = append(later, t.LaterSeconds...)
			failed += t.LaterFailed
		}
		laterText := "—"
		if len(later) > 0 {
			laterText = fmt.Sprintf("%d: p50 %.3f s, max %.3f s", len(later), Percentile(later, 50), Percentile(later, 100))
		}
		if failed > 0 {
			laterText += fmt.Sprintf(", %d failed", failed)
		}
		beforeText := "—"
		if len(before) > 0 {
			beforeText = fmt.Sprintf("max %.3f s", Percentile(before, 100))
		}
		if r.Error != "" {
			laterText += "; error: " + r.Error
		}
		fmt.Fprintf(b, "| %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", r.Contender, beforeText,
			orText(first["tunnel-down"], "—"), orText(first["tunnel-up"], "—"), orText(first["uplink-down"], "—"), orText(first["uplink-up"], "—"),
			laterText, fmtPtr(r.ReportSeconds, " s"), actionsText(r.Actions))
	}
}

// writeFootprintTable writes each contender's steady-state footprint;
// nothing when none was measured.
func (rep *Report) writeFootprintTable(b *strings.Builder) {
	if len(rep.Footprints) == 0 {
		return
	}
	b.WriteString("\n## Footprint at steady state\n\n| contender | RSS | peak RSS | CPU (% of a core) | size | window | note |\n|---|---|---|---|---|---|---|\n")
	for _, f := range rep.Footprints {
		note := f.Note
		if f.Error != "" {
			note = "error: " + f.Error
		}
		if f.Runs > 0 {
			note = fmt.Sprintf("%d runs; %s", f.Runs, note)
		}
		fmt.Fprintf(b, "| %s | %.2f MiB | %.2f MiB | %.2f %% | %s | %.0f s | %s |\n",
			f.Contender, f.RSSMiB, f.PeakRSSMiB, f.CPUPct, sizeText(f.Bytes), f.Seconds, note)
	}
}

// fmtPtr formats *p with unit, or "—" when there is no value.
func fmtPtr(p *float64, unit string) string {
	if p == nil {
		return "—"
	}
	return fmt.Sprintf("%.2f%s", *p, unit)
}

// fmtRatio formats a ratio as ×N, or "—" when there is none.
func fmtRatio(p *float64) string {
	if p == nil {
		return "—"
	}
	return fmt.Sprintf("×%.3g", *p)
}

// sizeText formats a size in MiB, or KiB below 1 MiB.
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

// lossText keeps small losses visible: 0.008 % is not 0.00 %.
func lossText(p float64) string {
	if p > 0 && p < 0.1 {
		return fmt.Sprintf("%.3f %%", p)
	}
	return fmt.Sprintf("%.2f %%", p)
}
