package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/edgeheal/edgeheal/lab/bench"
)

const benchUsage = `usage: edgeheal-lab bench [flags]

Plays the scenarios against every contender, each on a fresh lab, and
writes results.md, results.json and chart.svg (and timestamped copies) to
--out. Scenarios: S1 offload on at start, S2 modem re-plug every 60 s (10
times), S3a/S3b blackhole 20 s / 190 s, S4 cloud endpoint moves, S5 broker
outage 60 s, S6 carrier NAT mapping stuck (60 s), S7 carrier NAT remaps, S8 path
MTU 1,400 without ICMP (new 256 KiB transfers through the tunnel and over the
uplink). Contenders: none, keepalive-25s, reresolve-dns, mtu-probing (the
kernel's tcp_mtu_probing at both ends; S8 only), edgeheal.
The full run takes about 22 minutes per contender; --parallel runs the
contenders side by side; --short cuts S2 to 3 re-plugs 20 s apart.

flags:
`

// benchCmd runs `edgeheal-lab bench`.
func benchCmd(args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.Usage = func() { fmt.Fprint(os.Stderr, benchUsage); fs.PrintDefaults() }
	binary := fs.String("edgeheal", "bin/edgeheal", "the edgeheal binary (go build -o bin/edgeheal ./cmd/edgeheal)")
	out := fs.String("out", "bench/results", "where the results go")
	work := fs.String("work-dir", "", "per-lab configs, logs and agent state (default /run/edgeheal-lab/bench-<time>)")
	short := fs.Bool("short", false, "a quick run: S2 with 3 re-plugs 20 s apart, S4 60 s, footprint 30 s")
	parallel := fs.Bool("parallel", false, "run the contenders at the same time, each on its own labs")
	scen := fs.String("scenarios", "", "comma-separated subset of S1,S2,S3a,S3b,S4,S5,S6,S7,S8 (default all)")
	cont := fs.String("contenders", "", "comma-separated subset of none,keepalive-25s,reresolve-dns,mtu-probing,edgeheal (default all; none is always run; mtu-probing plays S8 only)")
	replugs := fs.Int("replugs", 0, "S2 re-plugs (default 10, --short 3)")
	replugEvery := fs.Duration("replug-every", 0, "S2 interval (default 60s, --short 20s)")
	longBH := fs.Duration("long-blackhole", 0, "S3b block (default 190s)")
	outage := fs.Duration("broker-outage", 0, "S5 broker outage (default 60s)")
	fp := fs.Duration("footprint", 0, "steady-state footprint window (default 60s, --short 30s; negative skips it)")
	render := fs.String("render", "", "only render results.md and chart.svg again from this results.json, into --out")
	rescore := fs.String("rescore", "", "with --render: recompute edgeheal's detection and actions from the daemon logs in this work directory")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *render != "" {
		return rerenderBench(*render, *rescore, *out, stdout)
	}
	o := bench.DefaultOptions()
	if *short {
		o = bench.ShortOptions()
	}
	o.Binary, o.WorkDir, o.Parallel = *binary, *work, *parallel
	if *scen != "" {
		o.Scenarios = strings.Split(*scen, ",")
		for _, s := range o.Scenarios {
			if bench.Titles[s] == "" {
				return fmt.Errorf("unknown scenario %q", s)
			}
		}
	}
	if *cont != "" {
		o.Contenders = strings.Split(*cont, ",")
	}
	if *replugs > 0 {
		o.Replugs = *replugs
	}
	if *replugEvery > 0 {
		o.ReplugEvery = *replugEvery
	}
	if *longBH > 0 {
		o.LongBlackhole = *longBH
	}
	if *outage > 0 {
		o.BrokerOutage = *outage
	}
	if *fp != 0 {
		o.Footprint = max(*fp, 0)
	}
	return runBench(o, *out, stdout)
}

// rerenderBench writes results.md, results.json and chart.svg again into
// out from the results.json at render, checking the goals afresh and, when
// rescore names a work directory, recomputing edgeheal's detection and
// actions from the daemon logs there first.
func rerenderBench(render, rescore, out string, stdout io.Writer) error {
	rep, err := bench.ReadReport(render)
	if err != nil {
		return err
	}
	rep.Goals = bench.CheckGoals(rep)
	if rescore != "" {
		if err := bench.RescoreFromLogs(rep, rescore); err != nil {
			return err
		}
	}
	md, err := rep.Write(out)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "written: %s (and results.json, chart.svg)\n", md)
	return nil
}

// runBench plays the bench with o until it ends or SIGINT/SIGTERM stops
// it, logging progress to stdout with the seconds since the start, and
// writes the report into out (out/interrupted for a stopped run, so a
// partial run never overwrites a full one). It returns the run's error
// joined with any write error.
func runBench(o bench.Options, out string, stdout io.Writer) error {
	begin := time.Now()
	o.Logf = func(format string, args ...any) {
		fmt.Fprintf(stdout, "%7.1fs  %s\n", time.Since(begin).Seconds(), fmt.Sprintf(format, args...))
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	rep, err := bench.Run(ctx, o)
	if rep == nil {
		return err
	}
	if errors.Is(err, context.Canceled) {
		fmt.Fprintln(stdout, "interrupted: writing the partial results")
		out += "/interrupted"
	}
	md, werr := rep.Write(out)
	if werr != nil {
		return errors.Join(err, werr)
	}
	fmt.Fprintf(stdout, "\n%s\nwritten: %s (and results.json, chart.svg)\n", rep.Markdown(""), md)
	return err
}
