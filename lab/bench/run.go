package bench

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/edgeheal/edgeheal/lab"
)

// Options configure a benchmark run. Zero durations take the defaults of
// DefaultOptions.
type Options struct {
	Binary     string   // the edgeheal binary
	WorkDir    string   // per-lab directories (configs, logs, state); kept after the run
	Scenarios  []string // subset of Scenarios; empty: all
	Contenders []string // subset of Contenders; empty: all (None is always run: ratios need it)
	// Parallel runs the contenders at the same time, each on its own labs
	// (scenarios stay in order within a contender). Same faults, same
	// noise; a quarter of the wall time.
	Parallel bool
	Short    bool // recorded in the report; set by ShortOptions

	Warmup         time.Duration // healthy time before a fault, after telemetry flows
	Tail           time.Duration // observation after a fault ends
	S1Window       time.Duration
	Replugs        int
	ReplugEvery    time.Duration
	LongBlackhole  time.Duration
	S4Window       time.Duration
	BrokerOutage   time.Duration
	S6Window       time.Duration // observation after the NAT mapping sticks
	S7Window       time.Duration // observation after the NAT remaps
	S8MTU          int           // the carrier path's MTU in S8
	S8Window       time.Duration // S8: how long new transfers are tried after the fault
	S8Later        int           // S8: the transfers of each kind made one after another once one got through
	Footprint      time.Duration // steady-state window of the footprint measurement; 0: skip it
	ReresolveEvery time.Duration

	Edgeheal ConfigParams // overrides for edgeheal's config (zero: its defaults)

	// Logf receives progress lines; nil discards them.
	Logf func(format string, args ...any)
}

// DefaultOptions is the full benchmark: S2 re-plugs every 60 s
// for 10 minutes, blackholes of 20 s and 190 s, a 60 s broker outage.
func DefaultOptions() Options {
	return Options{
		Warmup:         5 * time.Second,
		Tail:           20 * time.Second,
		S1Window:       30 * time.Second,
		Replugs:        10,
		ReplugEvery:    60 * time.Second,
		LongBlackhole:  190 * time.Second,
		S4Window:       200 * time.Second, // reresolve-dns.sh acts only on handshakes older than 135 s
		BrokerOutage:   60 * time.Second,
		S6Window:       60 * time.Second, // WireGuard alone stays dark all of it (docs/lab.md, "Carrier NAT")
		S7Window:       30 * time.Second,
		S8MTU:          1400,
		S8Window:       30 * time.Second, // 6.5 s with tcp_mtu_probing, never for WireGuard alone
		S8Later:        5,
		Footprint:      60 * time.Second,
		ReresolveEvery: 30 * time.Second,
	}
}

// ShortOptions shortens S2 to 3 re-plugs 20 s apart, S4 to 60 s and the
// footprint window to 30 s; the blackholes and the broker outage keep
// their lengths, because those are what is being measured.
func ShortOptions() Options {
	o := DefaultOptions()
	o.Short = true
	o.Replugs = 3
	o.ReplugEvery = 20 * time.Second
	o.S4Window = 60 * time.Second
	o.Footprint = 30 * time.Second
	return o
}

func (o *Options) logf(format string, args ...any) {
	if o.Logf != nil {
		o.Logf(format, args...)
	}
}

// Run plays every selected scenario for every selected contender, each on
// a fresh lab, and returns the report. A failed scenario is recorded in
// its Result and the run goes on; Run returns an error only when ctx ends
// (with the partial report).
func Run(ctx context.Context, o Options) (*Report, error) {
	if len(o.Scenarios) == 0 {
		o.Scenarios = Scenarios
	}
	if len(o.Contenders) == 0 {
		o.Contenders = Contenders
	}
	if !slices.Contains(o.Contenders, None) {
		o.Contenders = append([]string{None}, o.Contenders...)
	}
	if o.WorkDir == "" {
		o.WorkDir = filepath.Join(lab.DefaultRunRoot, "bench-"+time.Now().UTC().Format("20060102T150405"))
	}
	if slices.Contains(o.Contenders, Edgeheal) {
		if _, err := os.Stat(o.Binary); err != nil {
			return nil, fmt.Errorf("edgeheal binary: %w (build it: go build -o bin/edgeheal ./cmd/edgeheal)", err)
		}
	}
	rep := &Report{Machine: DescribeMachine(), Started: time.Now().UTC(), Short: o.Short, Parallel: o.Parallel,
		Settings: settingsOf(o), WorkDir: o.WorkDir}
	if fi, err := os.Stat(o.Binary); err == nil {
		rep.Machine.EdgehealBinaryBytes = fi.Size()
		if out, err := exec.CommandContext(ctx, o.Binary, "version").Output(); err == nil {
			rep.Machine.EdgehealVersion = strings.TrimSpace(string(out))
		}
	}
	var (
		mu sync.Mutex
		wg sync.WaitGroup
	)
	one := func(contender string) {
		for _, id := range o.Scenarios {
			if ctx.Err() != nil {
				return
			}
			if !plays(contender, id) {
				continue
			}
			r := runOne(ctx, o, id, contender)
			mu.Lock()
			rep.Results = append(rep.Results, r)
			mu.Unlock()
		}
		if o.Footprint > 0 && (contender == Edgeheal || contender == Reresolve) && ctx.Err() == nil {
			f := footprint(ctx, o, contender)
			mu.Lock()
			rep.Footprints = append(rep.Footprints, f)
			mu.Unlock()
		}
	}
	for _, c := range o.Contenders {
		if o.Parallel {
			wg.Add(1)
			go func() { defer wg.Done(); one(c) }()
		} else {
			one(c)
		}
	}
	wg.Wait()
	rep.Finished = time.Now().UTC()
	rep.sort()
	rep.Goals = CheckGoals(rep)
	return rep, ctx.Err()
}

// plays says whether a contender plays a scenario: the kernel's MTU
// probing only S8, where it is the alternative edgeheal is measured
// against; every other contender all of them.
func plays(contender, id string) bool {
	return contender != MTUProbing || id == S8
}

// runOne starts a fresh lab for the contender, plays the scenario and
// removes the lab.
func runOne(ctx context.Context, o Options, id, contender string) (r Result) {
	r = Result{Scenario: id, Contender: contender}
	dir := filepath.Join(o.WorkDir, id+"-"+contender)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		r.Error = err.Error()
		return r
	}
	lo := labOptions(contender)
	lo.OffloadOff = scenarioOffloadOff(id)
	if scenarioNAT(id) {
		lo.NAT, lo.EdgeListenPort = true, 51820
	}
	sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	l, err := lab.Start(sctx, lo)
	cancel()
	if err != nil {
		r.Error = fmt.Sprintf("starting lab: %v", err)
		o.logf("%s %-14s lab failed: %v", id, contender, err)
		return r
	}
	r.Lab = l.Prefix()
	defer func() {
		if err := l.Close(); err != nil {
			r.Notes = append(r.Notes, fmt.Sprintf("closing lab: %v", err))
		}
	}()
	c, err := startContender(ctx, l, contender, o, dir)
	if err != nil {
		r.Error = fmt.Sprintf("starting %s: %v", contender, err)
		o.logf("%s %-14s failed: %v", id, contender, err)
		return r
	}
	r.Start = time.Now()
	o.logf("%s %-14s started on lab %s", id, contender, l.Prefix())
	e := &env{l: l, c: c, o: o, res: &r, log: o.logf}
	err = runScenario(ctx, id, e)
	e.finish(id)
	if err != nil && !errors.Is(err, context.Canceled) {
		r.Error = err.Error()
	}
	if err := c.stop(); err != nil {
		r.Notes = append(r.Notes, err.Error())
	}
	o.logf("%s %-14s done: outage %.2fs, loss %.2f%%, %d actions", id, contender, r.OutageSeconds, r.LossPct, len(r.Actions))
	return r
}

// Footprint is a contender's steady-state cost: a healthy tunnel, nothing
// to repair.
type Footprint struct {
	Contender  string  `json:"contender"`
	Seconds    float64 `json:"window_seconds"`
	RSSMiB     float64 `json:"rss_mib"`      // edgeheal: VmRSS at the end; the loop: the largest run's max RSS
	PeakRSSMiB float64 `json:"peak_rss_mib"` // VmHWM / max RSS
	CPUPct     float64 `json:"cpu_pct_of_core"`
	Runs       int     `json:"runs,omitempty"` // reresolve-dns.sh runs in the window
	Bytes      int64   `json:"bytes"`          // edgeheal's binary; the script
	Note       string  `json:"note,omitempty"`
	Error      string  `json:"error,omitempty"`
}

func footprint(ctx context.Context, o Options, contender string) (f Footprint) {
	f = Footprint{Contender: contender, Seconds: o.Footprint.Seconds()}
	dir := filepath.Join(o.WorkDir, "footprint-"+contender)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		f.Error = err.Error()
		return f
	}
	lo := labOptions(contender)
	lo.OffloadOff = true
	sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	l, err := lab.Start(sctx, lo)
	cancel()
	if err != nil {
		f.Error = err.Error()
		return f
	}
	defer l.Close()
	c, err := startContender(ctx, l, contender, o, dir)
	if err != nil {
		f.Error = err.Error()
		return f
	}
	defer c.stop()
	o.logf("footprint %-14s measuring for %v", contender, o.Footprint)
	if err := sleep(ctx, 10*time.Second); err != nil { // past start-up
		f.Error = err.Error()
		return f
	}
	switch c := c.(type) {
	case *agentRun:
		fi, _ := os.Stat(o.Binary)
		if fi != nil {
			f.Bytes = fi.Size()
		}
		a, err := SampleProc(c.a.PID())
		if err != nil {
			f.Error = err.Error()
			return f
		}
		if err := sleep(ctx, o.Footprint); err != nil {
			f.Error = err.Error()
			return f
		}
		b, err := SampleProc(c.a.PID())
		if err != nil {
			f.Error = err.Error()
			return f
		}
		f.RSSMiB = round3(float64(b.RSSKiB) / 1024)
		f.PeakRSSMiB = round3(float64(b.HWMKiB) / 1024)
		f.CPUPct = round3(float64(b.CPU-a.CPU) / float64(b.At.Sub(a.At)) * 100)
		f.Note = "edgeheal resident all the time"
	case *reresolveLoop:
		if fi, err := os.Stat(ReresolveScript); err == nil {
			f.Bytes = fi.Size()
		}
		runs0, cpu0, _ := c.usage()
		start := time.Now()
		if err := sleep(ctx, o.Footprint); err != nil {
			f.Error = err.Error()
			return f
		}
		runs1, cpu1, rss := c.usage()
		f.Runs = runs1 - runs0
		f.RSSMiB = round3(float64(rss) / 1024)
		f.PeakRSSMiB = f.RSSMiB
		f.CPUPct = round3(float64(cpu1-cpu0) / float64(time.Since(start)) * 100)
		f.Note = "resident only while a run lasts; RSS is the peak of the bash running the script (wg and date are smaller and short-lived)"
	}
	return f
}

func round3(f float64) float64 { return float64(int64(f*1000+0.5)) / 1000 }
