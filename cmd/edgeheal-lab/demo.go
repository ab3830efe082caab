package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/edgeheal/edgeheal/lab"
	"github.com/edgeheal/edgeheal/lab/bench"
)

const demoUsage = `usage: edgeheal-lab demo [flags]

Brings up the lab with its TX checksum fault, starts edgeheal inside the
edge namespace with the demo config (configs/examples/demo.yaml, with this
run's names) and plays four faults with a live timeline: offload on at
start, a modem re-plug, a 20 s blackhole and a broker outage. Then it
prints what the cloud received, a summary with the measured times, and
removes everything. About 2 minutes; Ctrl-C stops it and cleans up.

flags:
`

// demoSettings are the demo's knobs; the test shortens them.
type demoSettings struct {
	binary    string
	broker    lab.BrokerKind
	blackhole time.Duration
	outage    time.Duration
	verbose   bool
	keep      bool // keep the agent's directory (config, log, state)
}

// demoCmd runs `edgeheal-lab demo`: the story, stopped by SIGINT/SIGTERM.
func demoCmd(args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("demo", flag.ContinueOnError)
	fs.Usage = func() { fmt.Fprint(os.Stderr, demoUsage); fs.PrintDefaults() }
	s := demoSettings{}
	fs.StringVar(&s.binary, "edgeheal", "bin/edgeheal", "the edgeheal binary (go build -o bin/edgeheal ./cmd/edgeheal)")
	broker := fs.String("broker", "embedded", "the cloud's broker: embedded or mosquitto")
	fs.DurationVar(&s.blackhole, "blackhole", 20*time.Second, "length of the blackhole in act 3")
	fs.DurationVar(&s.outage, "broker-outage", 15*time.Second, "length of the broker outage in act 4")
	fs.BoolVar(&s.verbose, "verbose", false, "show every line of edgeheal's log")
	fs.BoolVar(&s.keep, "keep", false, "keep edgeheal's config, log and state directory")
	if err := fs.Parse(args); err != nil {
		return err
	}
	s.broker = lab.BrokerKind(*broker)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	_, err := runDemo(ctx, s, stdout)
	return err
}

// demoSummary is what the demo measured.
type demoSummary struct {
	OffloadOffAfterStart time.Duration // agent start → offload off (act 1)
	TunnelBackAfterStart time.Duration // agent start → first delivered telemetry (act 1)
	ReplugExposure       time.Duration // link created → offload off (act 2)
	ReplugLost           int           // telemetry lost around the re-plug
	BlackholeDetect      time.Duration // blackhole → incident (act 3)
	BlackholeOutage      time.Duration
	HandshakeAfter       time.Duration // path back → new handshake
	FreshHandshake       bool
	BrokerDiagnosis      string // act 4: the first event during the outage
	BrokerTunnelActions  int
	QueuedDelivered      int           // events from the outage delivered after it
	QueuedDeliveredAfter time.Duration // broker back → the last of them at the cloud
	Events               int           // events the cloud received
	Problems             []string
}

type demo struct {
	out   io.Writer
	s     demoSettings
	l     *lab.Lab
	a     *bench.Agent
	c     *bench.Cloud
	fleet *demoFleet // the fleet view's page, in this process
	t0    time.Time
	mu    sync.Mutex // serialises printing
	sum   demoSummary
	stop  chan struct{}
	wg    sync.WaitGroup
}

func (d *demo) say(src, format string, args ...any) {
	d.mu.Lock()
	defer d.mu.Unlock()
	fmt.Fprintf(d.out, "%7.2fs  %-9s %s\n", time.Since(d.t0).Seconds(), src, fmt.Sprintf(format, args...))
}

func (d *demo) title(format string, args ...any) {
	d.mu.Lock()
	defer d.mu.Unlock()
	fmt.Fprintf(d.out, "\n== %s\n", fmt.Sprintf(format, args...))
}

func (d *demo) problem(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	d.sum.Problems = append(d.sum.Problems, msg)
	d.say("demo", "PROBLEM: %s", msg)
}

// at formats a moment as the time since t0.
func (d *demo) at(t time.Time) string { return fmt.Sprintf("+%.2fs", t.Sub(d.t0).Seconds()) }

func ms(d time.Duration) string {
	if d < time.Second {
		return fmt.Sprintf("%.1f ms", float64(d)/float64(time.Millisecond))
	}
	return fmt.Sprintf("%.2f s", d.Seconds())
}

// runDemo plays the story. It always cleans up; it returns an error when
// it could not run or when edgeheal did not heal something.
func runDemo(ctx context.Context, s demoSettings, out io.Writer) (sum demoSummary, err error) {
	d := &demo{out: out, s: s, t0: time.Now(), stop: make(chan struct{})}
	if _, err := os.Stat(s.binary); err != nil {
		return sum, fmt.Errorf("edgeheal binary %s: %w (build it: go build -o bin/edgeheal ./cmd/edgeheal)", s.binary, err)
	}
	fmt.Fprintln(out, "edgeheal demo: a K3s edge node behind a faulty 4G modem, in network namespaces on this machine")
	fmt.Fprintln(out, "  [pod] -- [edge: WireGuard + edgeheal] -- [modem: drops frames with unfinished checksums] -- [cloud: WireGuard + MQTT broker]")
	opts := lab.Options{Prefix: "demo", Broker: s.broker}
	sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	d.l, err = lab.Start(sctx, opts)
	if errors.Is(err, os.ErrExist) { // another demo runs: use a random prefix
		opts.Prefix = ""
		d.l, err = lab.Start(sctx, opts)
	}
	cancel()
	if err != nil {
		return sum, err
	}
	dir := filepath.Join(lab.DefaultRunRoot, d.l.Prefix()+"-agent")
	defer func() {
		close(d.stop)
		if d.a != nil {
			if err := d.a.Stop(10 * time.Second); err != nil {
				d.say("demo", "stopping edgeheal: %v", err)
			}
		}
		d.wg.Wait()
		if d.c != nil {
			d.c.Stop()
		}
		if d.fleet != nil {
			d.fleet.stop()
		}
		cerr := d.l.Close()
		if !s.keep {
			cerr = errors.Join(cerr, os.RemoveAll(dir))
		} else {
			fmt.Fprintf(out, "kept %s (config, edgeheal.log, state)\n", dir)
		}
		if cerr != nil {
			err = errors.Join(err, fmt.Errorf("cleaning up: %w", cerr))
		} else {
			fmt.Fprintf(out, "cleaned up: lab %s removed (namespaces, links, broker, agent) in %.0f s total\n", d.l.Prefix(), time.Since(d.t0).Seconds())
		}
	}()
	d.say("lab", "up as %q: uplink %s (TX checksum offload on), tunnel %s, broker %s (%s)",
		d.l.Prefix(), d.l.EdgeUplink(), d.l.EdgeWG(), d.l.BrokerPublicAddr(), s.broker)

	d.c = &bench.Cloud{OnEvent: d.onEvent, OnStatus: d.onStatus}
	if err := d.c.Start(ctx, d.l); err != nil {
		return sum, err
	}
	d.say("cloud", "subscribed to %s", bench.TopicFilter)
	if d.fleet, err = startDemoFleet(d.l); err != nil {
		d.say("fleet", "no fleet view: %v", err)
	} else {
		d.say("fleet", "the fleet view (edgeheal-fleet's page and /metrics) while the demo runs: %s", d.fleet.url)
	}
	d.wg.Add(1)
	go d.watchTelemetry()

	acts := []func(context.Context) error{d.act1, d.act2, d.act3, d.act4}
	for i, act := range acts {
		if err := act(ctx); err != nil {
			return d.sum, err
		}
		d.fleetNote(i + 1)
	}
	d.report()
	if len(d.sum.Problems) > 0 {
		return d.sum, fmt.Errorf("the demo saw %d problems: %s", len(d.sum.Problems), strings.Join(d.sum.Problems, "; "))
	}
	return d.sum, nil
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
