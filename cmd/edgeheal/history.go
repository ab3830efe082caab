package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/edgeheal/edgeheal/agent/history"
	"github.com/edgeheal/edgeheal/configs"
	"github.com/edgeheal/edgeheal/localapi"
	"github.com/edgeheal/edgeheal/wire"
)

func cmdHistory(args []string, stdout, stderr io.Writer) error {
	fs := newFlags("history", "history [--json] [--days N] [--config FILE | --socket PATH]",
		"Show the node's own account of its availability: per UTC day, the share of the time every\n"+
			"target was healthy, the seconds dark and degraded, the incidents, their outage p50, p95\n"+
			"and longest, the mean time to repair, what healed them and the gave-ups; then every\n"+
			"target's totals and the newest incidents. It is asked of the running agent over its local\n"+
			"socket; when none answers, the history saved in report.state_dir is read instead (it is\n"+
			"written at least once a minute). docs/operations/reporting.md says what each figure means.", stderr)
	path := fs.String("config", configs.DefaultPath, "config file whose report.http.socket and report.state_dir say where to look")
	socket := fs.String("socket", "", "the agent's local API socket (default: report.http.socket from the config)")
	asJSON := fs.Bool("json", false, "print the history as JSON (wire.History, every incident the node keeps)")
	days := fs.Int("days", 14, "show the last N days (at most 90)")
	if err := parse(fs, args, 0); err != nil {
		return err
	}
	if *days < 1 || *days > 90 {
		fmt.Fprintf(stderr, "edgeheal history: --days %d: want 1 to 90\n", *days)
		return errUsage
	}
	h, from, err := fetchHistory(*path, *socket)
	if err != nil {
		return err
	}
	if from != "" {
		fmt.Fprintf(stderr, "edgeheal: %s\n", from)
	}
	if *asJSON {
		var b bytes.Buffer
		enc := json.NewEncoder(&b)
		enc.SetIndent("", "  ")
		if err := enc.Encode(h); err != nil {
			return err
		}
		_, err := stdout.Write(safeJSON(b.Bytes()))
		return err
	}
	return writeHistory(stdout, h, *days)
}

// fetchHistory asks the agent for its history; with no --socket and no
// agent answering on the config's socket, it reads the history saved in
// the config's state directory, and from says so.
func fetchHistory(path, socket string) (h wire.History, from string, err error) {
	var cfg *configs.Config
	if socket == "" {
		if cfg, err = loadConfig(path); err != nil {
			return h, "", err
		}
		socket = cfg.Report.HTTP.Socket
	}
	var asked error
	if socket != "" {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if h, asked = localapi.New(socket).History(ctx); asked == nil {
			return h, "", nil
		}
		if cfg == nil || !errors.Is(asked, localapi.ErrNoAgent) {
			return h, "", fail(exitCantRun, asked)
		}
	}
	if cfg.Report.StateDir == "" {
		if asked != nil {
			return h, "", fail(exitCantRun, fmt.Errorf("%w; report.state_dir is empty in %s, so no history was saved", asked, path))
		}
		return h, "", fail(exitCantRun, fmt.Errorf("report.http.socket and report.state_dir are empty in %s: the agent serves no local API and keeps no history", path))
	}
	b, err := history.Read(cfg.Report.StateDir, cfg.Node.Name, cfg.Node.Site, time.Minute)
	if err != nil {
		return h, "", fail(exitCantRun, err)
	}
	why := "no agent serves a local API"
	if asked != nil {
		why = "no agent answers on " + socket
	}
	return b.Snapshot(time.Now(), true), fmt.Sprintf("%s; this is the history saved in %s (written at least once a minute while the agent ran)", why, cfg.Report.StateDir), nil
}

// dayFigures are one day's incident figures, from the incidents kept in
// full that opened that day.
type dayFigures struct {
	durations []float64 // of the closed ones, sorted
	healedBy  map[string]int
	gaveUps   int
	kept      int // incidents kept that opened that day, open ones too
}

// writeHistory writes h for a human: a header, a table of the last days
// (newest first), every target's totals and the newest incidents.
func writeHistory(w io.Writer, h wire.History, days int) error {
	h = printableHistory(h)
	var b strings.Builder
	fmt.Fprintf(&b, "node %s", orDash(h.Node))
	if h.Site != "" {
		fmt.Fprintf(&b, " (site %s)", h.Site)
	}
	if !h.Since.IsZero() {
		fmt.Fprintf(&b, "  kept since %s", h.Since.UTC().Format("2006-01-02 15:04 MST"))
	}
	if a, ok := h.Days.Availability(); ok {
		fmt.Fprintf(&b, "  availability %s over the days kept", percent(a))
	}
	b.WriteString("\n\n")
	if _, err := io.WriteString(w, b.String()); err != nil {
		return err
	}
	if err := writeDays(w, h, days); err != nil {
		return err
	}
	fmt.Fprintln(w, "\nTargets, over the days kept:")
	if err := writeTargets(w, h); err != nil {
		return err
	}
	fmt.Fprintf(w, "\nIncidents, newest first (%d kept in full):\n", len(h.Incidents))
	return writeIncidents(w, h.Incidents)
}

// incidentsByDay are the figures of the incidents kept in full, by the
// UTC day they opened.
func incidentsByDay(incidents []wire.Incident) map[string]*dayFigures {
	perDay := map[string]*dayFigures{}
	for _, in := range incidents {
		day := in.Start.UTC().Format(time.DateOnly)
		f := perDay[day]
		if f == nil {
			f = &dayFigures{healedBy: map[string]int{}}
			perDay[day] = f
		}
		f.kept++
		if in.GaveUp {
			f.gaveUps++
		}
		if !in.End.IsZero() {
			f.durations = append(f.durations, in.DurationSeconds)
			f.healedBy[orItself(in.HealedBy)]++
		}
	}
	return perDay
}

// writeDays writes the last days of the node as a whole, newest first.
func writeDays(w io.Writer, h wire.History, days int) error {
	perDay := incidentsByDay(h.Incidents)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "DAY (UTC)\tAVAILABILITY\tDARK\tDEGRADED\tINCIDENTS\tOUTAGE P50\tP95\tMAX\tMTTR\tHEALED BY\tGAVE UP")
	d := h.Days
	shown := 0
	for i := len(d.Healthy) - 1; i >= 0 && shown < days; i-- {
		shown++
		day := d.Start.Add(time.Duration(i*d.Step) * time.Second).UTC().Format(time.DateOnly)
		one := wire.Series{Healthy: d.Healthy[i : i+1], Dark: d.Dark[i : i+1], Degraded: d.Degraded[i : i+1]}
		a, observed := one.Availability()
		if !observed {
			fmt.Fprintf(tw, "%s\tnot observed\t-\t-\t-\t-\t-\t-\t-\t-\t-\n", day)
			continue
		}
		p50, p95, longest, mttr, healed, gaveUps := "-", "-", "-", "-", "-", "-"
		// The per-day outage figures need every incident of the day in
		// full; a day older than the incidents kept shows its count only.
		if f := perDay[day]; f != nil && f.kept == d.Incidents[i] {
			if len(f.durations) > 0 {
				sort.Float64s(f.durations)
				p50 = seconds(history.Percentile(f.durations, 0.50))
				p95 = seconds(history.Percentile(f.durations, 0.95))
				longest = seconds(f.durations[len(f.durations)-1])
				mttr = seconds(mean(f.durations))
			}
			healed = rungs(f.healedBy)
			gaveUps = fmt.Sprint(f.gaveUps)
		} else if d.Incidents[i] == 0 {
			gaveUps = "0"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%s\t%s\t%s\t%s\t%s\t%s\n", day, percent(a), age(time.Duration(d.Dark[i])*time.Second),
			age(time.Duration(d.Degraded[i])*time.Second), d.Incidents[i], p50, p95, longest, mttr, healed, gaveUps)
	}
	if shown == 0 {
		fmt.Fprintln(tw, "(nothing observed yet)\t\t\t\t\t\t\t\t\t\t")
	}
	return tw.Flush()
}

// writeTargets writes every target's totals over the days kept.
func writeTargets(w io.Writer, h wire.History) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "KIND\tTARGET\tAVAILABILITY\tDARK\tDEGRADED\tINCIDENTS\tOUTAGE P50\tP95\tMAX\tMTTR\tHEALED BY\tGAVE UP")
	for _, t := range h.Targets {
		avail := "-"
		if obs := t.HealthySeconds + t.DarkSeconds + t.DegradedSeconds; obs > 0 {
			avail = percent(float64(t.HealthySeconds) / float64(obs))
		}
		p50, p95, longest, mttr := "-", "-", "-", "-"
		if t.OutageMaxSeconds > 0 || t.MTTRSeconds > 0 {
			p50, p95, longest, mttr = seconds(t.OutageP50Seconds), seconds(t.OutageP95Seconds), seconds(t.OutageMaxSeconds), seconds(t.MTTRSeconds)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\t%s\t%s\t%s\t%s\t%s\t%d\n", t.Kind, t.Target, avail,
			age(time.Duration(t.DarkSeconds)*time.Second), age(time.Duration(t.DegradedSeconds)*time.Second),
			t.Incidents, p50, p95, longest, mttr, rungs(t.Repairs), t.GaveUps)
	}
	if len(h.Targets) == 0 {
		fmt.Fprintln(tw, "(none yet)\t\t\t\t\t\t\t\t\t\t\t")
	}
	if h.TargetsOmitted > 0 {
		fmt.Fprintf(tw, "(%d more)\t\t\t\t\t\t\t\t\t\t\t\n", h.TargetsOmitted)
	}
	return tw.Flush()
}

// writeIncidents writes the incidents, newest first.
func writeIncidents(w io.Writer, incidents []wire.Incident) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "START (UTC)\tLASTED\tKIND\tTARGET\tREPAIRS TRIED\tHEALED BY\tDIAGNOSIS")
	for _, in := range incidents {
		lasted := seconds(in.DurationSeconds)
		healed := orItself(in.HealedBy)
		switch {
		case in.End.IsZero() && in.GaveUp:
			lasted, healed = lasted+" so far", "open, given up"
		case in.End.IsZero():
			lasted, healed = lasted+" so far", "open"
		case in.GaveUp:
			healed += " (after giving up)"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", in.Start.UTC().Format("2006-01-02 15:04:05"), lasted, in.Kind, in.Target,
			orDash(strings.Join(in.Repairs, ", ")), healed, orDash(oneLine(in.Diagnosis)))
	}
	if len(incidents) == 0 {
		fmt.Fprintln(tw, "(none)\t\t\t\t\t\t")
	}
	return tw.Flush()
}

// printableHistory is h with every string others could have written (a
// target is a pod's name, a diagnosis quotes a probe's error) made
// printable.
func printableHistory(h wire.History) wire.History {
	p := printable
	h.Node, h.Site = p(h.Node), p(h.Site)
	targets := make([]wire.TargetSummary, len(h.Targets))
	for i, t := range h.Targets {
		t.Kind, t.Target = p(t.Kind), p(t.Target)
		if t.Repairs != nil {
			r := make(map[string]int, len(t.Repairs))
			for k, v := range t.Repairs {
				r[p(k)] += v
			}
			t.Repairs = r
		}
		targets[i] = t
	}
	h.Targets = targets
	incidents := make([]wire.Incident, len(h.Incidents))
	for i, in := range h.Incidents {
		in.ID, in.Kind, in.Target, in.Diagnosis, in.HealedBy = p(in.ID), p(in.Kind), p(in.Target), p(in.Diagnosis), p(in.HealedBy)
		repairs := make([]string, len(in.Repairs))
		for j, r := range in.Repairs {
			repairs[j] = p(r)
		}
		in.Repairs = repairs
		incidents[i] = in
	}
	h.Incidents = incidents
	return h
}

func orItself(rung string) string {
	if rung == "" {
		return "itself"
	}
	return rung
}

// rungs is "handshake 3, itself 1": the most first, then by name.
func rungs(by map[string]int) string {
	if len(by) == 0 {
		return "-"
	}
	names := slices.Sorted(maps.Keys(by))
	slices.SortStableFunc(names, func(a, b string) int { return by[b] - by[a] })
	parts := make([]string, len(names))
	for i, n := range names {
		parts[i] = fmt.Sprintf("%s %d", n, by[n])
	}
	return strings.Join(parts, ", ")
}

// percent is a share as an operator compares them: 100 % only when it is.
func percent(a float64) string {
	if a >= 1 {
		return "100 %"
	}
	s := fmt.Sprintf("%.3f", a*100)
	if s == "100.000" {
		s = "99.999"
	}
	return s + " %"
}

// seconds is an outage's length: tenths under a minute, as age beyond.
func seconds(s float64) string {
	if s < 60 {
		return fmt.Sprintf("%.1fs", s)
	}
	return age(time.Duration(s * float64(time.Second)))
}

func mean(xs []float64) float64 {
	var sum float64
	for _, x := range xs {
		sum += x
	}
	return sum / float64(len(xs))
}
