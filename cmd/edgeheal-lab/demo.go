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
	QueuedDelivered      int // events from the outage delivered after it
	Events               int // events the cloud received
	Problems             []string
}

type demo struct {
	out  io.Writer
	s    demoSettings
	l    *lab.Lab
	a    *bench.Agent
	c    *bench.Cloud
	t0   time.Time
	mu   sync.Mutex // serialises printing
	sum  demoSummary
	stop chan struct{}
	wg   sync.WaitGroup
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

// since formats the time from t0 of a moment.
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
	d.wg.Add(1)
	go d.watchTelemetry()

	acts := []func(context.Context) error{d.act1, d.act2, d.act3, d.act4}
	for _, act := range acts {
		if err := act(ctx); err != nil {
			return d.sum, err
		}
	}
	d.report()
	if len(d.sum.Problems) > 0 {
		return d.sum, fmt.Errorf("the demo saw %d problems: %s", len(d.sum.Problems), strings.Join(d.sum.Problems, "; "))
	}
	return d.sum, nil
}

func (d *demo) onEvent(e bench.Event) {
	late := ""
	if q := e.Received.Sub(e.TS); q > 2*time.Second {
		late = fmt.Sprintf("  [happened at %s, queued %.1f s]", d.at(e.TS), q.Seconds())
	}
	what := e.Kind
	if e.Action != "" {
		what += " " + e.Action
	}
	if e.Result != "" {
		what += " (" + e.Result + ")"
	}
	d.say("cloud ←", "event %s %s: %s%s", what, e.Target, e.Summary, late)
}

func (d *demo) onStatus(s bench.Status) {
	d.say("cloud ←", "status %s (%d/%d checks healthy, session %d)", s.State, s.Checks.Healthy, s.Checks.Total, s.Session)
}

// watchTelemetry prints when the pod's telemetry stops and starts
// arriving at the cloud.
func (d *demo) watchTelemetry() {
	defer d.wg.Done()
	flowing := false
	var darkSince time.Time
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-d.stop:
			return
		case <-tick.C:
		}
		now := time.Now()
		var last time.Time
		for _, s := range d.l.Samples(now.Add(-3 * time.Second)) {
			if !s.Received.IsZero() && s.Received.Sub(s.Sent) <= time.Second && s.Received.After(last) {
				last = s.Received
			}
		}
		ok := !last.IsZero() && now.Sub(last) < 600*time.Millisecond
		switch {
		case ok && !flowing:
			if darkSince.IsZero() {
				d.say("telemetry", "flowing: the pod's messages reach the cloud through the tunnel")
			} else {
				d.say("telemetry", "flowing again (dark for %.1f s)", last.Sub(darkSince).Seconds())
			}
		case !ok && flowing:
			darkSince = last
			d.say("telemetry", "DARK: nothing from the pod since %s", d.at(last))
		}
		flowing = ok
	}
}

// tailLog prints edgeheal's warnings and errors (every line with --verbose).
func (d *demo) tailLog() {
	defer d.wg.Done()
	var off int
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	for {
		stopping := false
		select {
		case <-d.stop:
			stopping = true
		case <-tick.C:
		}
		b, err := os.ReadFile(d.a.LogPath())
		if err == nil && len(b) > off {
			chunk := b[off:]
			if i := strings.LastIndexByte(string(chunk), '\n'); i >= 0 {
				chunk = chunk[:i+1]
				off += i + 1
				for _, ll := range bench.ParseLogs(chunk) {
					if d.s.verbose || ll.Level == "WARN" || ll.Level == "ERROR" {
						d.say("edgeheal", "%s %s %s", strings.ToLower(ll.Level), ll.Msg, attrsText(ll.Attrs))
					}
				}
			}
		}
		if stopping {
			return
		}
	}
}

func attrsText(m map[string]any) string {
	var parts []string
	for _, k := range []string{"link", "peer", "target", "action", "rung", "reason", "workload", "diagnosis", "err", "error"} {
		if v, ok := m[k]; ok {
			parts = append(parts, fmt.Sprintf("%s=%v", k, v))
		}
	}
	return strings.Join(parts, " ")
}

// waitFlowing waits until telemetry is delivered again, up to max, and
// returns the arrival of the first message delivered after from.
func (d *demo) waitDelivered(ctx context.Context, from time.Time, max time.Duration) (time.Time, bool) {
	deadline := time.Now().Add(max)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		var first time.Time
		for _, s := range d.l.Samples(from) {
			if !s.Received.IsZero() && s.Received.Sub(s.Sent) <= time.Second && (first.IsZero() || s.Received.Before(first)) {
				first = s.Received
			}
		}
		if !first.IsZero() {
			return first, true
		}
		time.Sleep(50 * time.Millisecond)
	}
	return time.Time{}, false
}

func (d *demo) act1(ctx context.Context) error {
	d.title("Act 1: the modem NIC has TX checksum offload on: the tunnel is dark")
	if err := sleepCtx(ctx, 4*time.Second); err != nil {
		return err
	}
	csum, _ := d.l.CloudUDPInCsumErrors()
	st := d.l.Stats()
	hs, _ := d.l.EdgeHandshake()
	hsText := "no handshake ever"
	if !hs.IsZero() {
		hsText = "last handshake " + d.at(hs)
	}
	d.say("lab", "cloud dropped %d UDP datagrams with bad checksums; %s; telemetry %d sent, %d delivered", csum, hsText, st.Sent, st.Received)
	dir := filepath.Join(lab.DefaultRunRoot, d.l.Prefix()+"-agent")
	p := bench.DemoParams()
	p.Node = d.l.Prefix() + "-edge"
	p.StateDir = filepath.Join(dir, "state")
	a, err := bench.StartAgent(ctx, d.l, bench.AgentOptions{Binary: d.s.binary, Dir: dir, Params: p})
	if err != nil {
		return err
	}
	d.a = a
	d.wg.Add(1)
	go d.tailLog()
	d.say("edgeheal", "started in %s (pid %d, config %s)", d.l.NetnsName(lab.Edge), a.PID(), filepath.Join(dir, "edgeheal.yaml"))
	wctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	off, err := d.l.WaitUplinkTxChecksumOff(wctx)
	cancel()
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		d.problem("offload still on 20 s after edgeheal started")
	} else {
		d.sum.OffloadOffAfterStart = off.Sub(a.Started())
		d.say("lab", "TX checksum offload is off on %s, %s after edgeheal started", d.l.EdgeUplink(), ms(d.sum.OffloadOffAfterStart))
	}
	first, ok := d.waitDelivered(ctx, a.Started(), 20*time.Second)
	if !ok {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		d.problem("no telemetry through the tunnel 20 s after edgeheal started")
		return nil
	}
	d.sum.TunnelBackAfterStart = first.Sub(a.Started())
	d.say("lab", "tunnel back: first telemetry delivered %s after edgeheal started", ms(d.sum.TunnelBackAfterStart))
	return sleepCtx(ctx, 3*time.Second)
}

func (d *demo) act2(ctx context.Context) error {
	d.title("Act 2: the modem re-enumerates (USB re-plug): the new link comes with offload on again")
	before := time.Now()
	ex, err := bench.ReplugExposure(ctx, d.l, 10*time.Second)
	if err != nil {
		return err
	}
	d.say("lab", "uplink %s deleted and created again, offload on (kernel announced it at %s)", d.l.EdgeUplink(), d.at(ex.Created))
	if ex.Fixed.IsZero() {
		d.problem("offload still on 10 s after the re-plug")
	} else {
		d.sum.ReplugExposure = ex.Duration()
		d.say("lab", "offload off again %s after the link appeared (seen at most one feature read, a few ms, late)", ms(d.sum.ReplugExposure))
	}
	if err := sleepCtx(ctx, 5*time.Second); err != nil {
		return err
	}
	st := d.l.StatsSince(before.Add(-time.Second))
	d.sum.ReplugLost = st.Sent - st.Pending - st.Received
	d.say("lab", "telemetry around the re-plug: %d sent, %d delivered, %d lost", st.Sent-st.Pending, st.Received, d.sum.ReplugLost)
	return nil
}

func (d *demo) act3(ctx context.Context) error {
	d.title("Act 3: the mobile network blackholes everything for %v", d.s.blackhole)
	start := time.Now()
	if err := d.l.Blackhole(d.s.blackhole); err != nil {
		return err
	}
	d.say("lab", "modem drops every frame, both ways, for %v", d.s.blackhole)
	if err := sleepCtx(ctx, d.s.blackhole); err != nil {
		return err
	}
	restored := start.Add(d.s.blackhole)
	d.say("lab", "path back")
	deadline := time.Now().Add(15 * time.Second)
	var hs time.Time
	for time.Now().Before(deadline) {
		if h, err := d.l.EdgeHandshake(); err == nil && h.After(restored) {
			hs = h
			break
		}
		if err := sleepCtx(ctx, 50*time.Millisecond); err != nil {
			return err
		}
	}
	if hs.IsZero() {
		d.say("lab", "no new handshake within 15 s: the session outlived the block (WireGuard keeps one for 180 s)")
	} else {
		d.sum.FreshHandshake = true
		d.sum.HandshakeAfter = hs.Sub(restored)
		d.say("lab", "fresh handshake %s after the path returned", ms(d.sum.HandshakeAfter))
	}
	if _, ok := d.waitDelivered(ctx, restored, 15*time.Second); !ok {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		d.problem("telemetry not back within 15 s of the path returning")
	}
	if err := sleepCtx(ctx, 3*time.Second); err != nil { // the recovered event
		return err
	}
	for _, e := range bench.EventsBetween(d.c.Events(), start, time.Time{}) {
		if e.Kind == "incident" {
			d.sum.BlackholeDetect = e.TS.Sub(start)
			break
		}
	}
	if d.sum.BlackholeDetect == 0 {
		// No event reached the cloud: fall back to the daemon's log.
		for _, ll := range d.a.Logs() {
			if ll.Time.After(start) && strings.Contains(ll.Msg, "incident opened") {
				d.sum.BlackholeDetect = ll.Time.Sub(start)
				break
			}
		}
	}
	if d.sum.BlackholeDetect == 0 {
		d.problem("edgeheal reported no incident for the blackhole")
	} else {
		d.say("demo", "edgeheal detected the dark tunnel %s after the blackhole began", ms(d.sum.BlackholeDetect))
	}
	for _, o := range d.l.StatsSince(start.Add(-time.Second)).Outages {
		d.sum.BlackholeOutage = max(d.sum.BlackholeOutage, o.Duration())
	}
	return nil
}

func (d *demo) act4(ctx context.Context) error {
	d.title("Act 4: the cloud's MQTT broker stops for %v: not a tunnel problem", d.s.outage)
	start := time.Now()
	if err := d.l.StopBroker(); err != nil {
		return err
	}
	d.say("lab", "broker stopped (the tunnel is fine)")
	half := d.s.outage / 2
	if err := sleepCtx(ctx, half); err != nil {
		return err
	}
	if st, err := d.a.Status(ctx); err == nil {
		d.say("edgeheal", "local status: %s", statusLine(st))
	} else {
		d.say("edgeheal", "local status unavailable: %v", err)
	}
	if err := sleepCtx(ctx, d.s.outage-half); err != nil {
		return err
	}
	restarted := time.Now()
	if err := d.l.StartBroker(); err != nil {
		return err
	}
	d.say("lab", "broker back")
	// Wait for the outbox to deliver what happened during the outage: the
	// agent reconnects with a jittered backoff, so this can take a while.
	d.say("demo", "waiting for edgeheal to reconnect and deliver its queued events (jittered backoff)")
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		got := map[string]bool{}
		for _, e := range d.c.Events() {
			got[e.ID] = true
		}
		want, missing := 0, 0
		for _, e := range bench.LogEvents(d.a.Logs()) {
			if !e.TS.Before(start) && e.TS.Before(restarted) {
				want++
				if !got[e.ID] {
					missing++
				}
			}
		}
		if want > 0 && missing == 0 {
			break
		}
		if err := sleepCtx(ctx, 200*time.Millisecond); err != nil {
			return err
		}
	}
	evs := bench.EventsBetween(d.c.Events(), start, restarted)
	d.sum.QueuedDelivered = queued(evs, start, restarted)
	for _, e := range evs {
		if e.TunnelAction(d.l.EdgeWG()) {
			d.sum.BrokerTunnelActions++
		}
		if d.sum.BrokerDiagnosis == "" && e.Kind != "action" {
			d.sum.BrokerDiagnosis = e.Kind + ": " + e.Summary
		}
	}
	if d.sum.QueuedDelivered == 0 {
		d.problem("no event from the broker outage reached the cloud after it")
	}
	if d.sum.BrokerTunnelActions > 0 {
		d.problem("%d tunnel actions during a broker outage", d.sum.BrokerTunnelActions)
	}
	return nil
}

// queued counts events that happened in [from, to) and arrived after to.
func queued(evs []bench.Event, from, to time.Time) int {
	n := 0
	for _, e := range evs {
		if !e.TS.Before(from) && e.TS.Before(to) && e.Received.After(to) {
			n++
		}
	}
	return n
}

func statusLine(st map[string]any) string {
	parts := []string{fmt.Sprintf("state %v", st["state"])}
	if ob, ok := st["outbox"].(map[string]any); ok {
		parts = append(parts, fmt.Sprintf("outbox %v queued", ob["depth"]))
	}
	if mq, ok := st["mqtt"].(map[string]any); ok {
		parts = append(parts, fmt.Sprintf("mqtt connected=%v", mq["connected"]))
	}
	if cs, ok := st["checks"].([]any); ok {
		for _, c := range cs {
			if m, ok := c.(map[string]any); ok && m["healthy"] != true {
				parts = append(parts, fmt.Sprintf("%v %v %v (%v)", m["kind"], m["target"], m["state"], m["detail"]))
			}
		}
	}
	return strings.Join(parts, ", ")
}

func (d *demo) report() {
	d.mu.Lock()
	defer d.mu.Unlock()
	w := d.out
	evs := d.c.Events()
	d.sum.Events = len(evs)
	fmt.Fprintf(w, "\n== What the cloud received (%d events, in the order they happened)\n", len(evs))
	for _, e := range evs {
		late := ""
		if q := e.Received.Sub(e.TS); q > 2*time.Second {
			late = fmt.Sprintf(" [delivered %.1f s later]", q.Seconds())
		}
		what := e.Kind
		if e.Action != "" {
			what += " " + e.Action
		}
		fmt.Fprintf(w, "  %8s  %-22s %-16s %s%s\n", d.at(e.TS), what, e.Target, e.Summary, late)
	}
	sts := d.c.Statuses()
	if len(sts) > 0 {
		var seq []string
		for _, s := range sts {
			if len(seq) == 0 || seq[len(seq)-1] != s.State {
				seq = append(seq, s.State)
			}
		}
		fmt.Fprintf(w, "  status messages: %d (%s)\n", len(sts), strings.Join(seq, " → "))
	}
	s := d.sum
	st := d.l.Stats()
	fmt.Fprintf(w, "\n== Summary\n")
	row := func(what, v string) { fmt.Fprintf(w, "  %-58s %s\n", what, v) }
	row("1. offload off after edgeheal started", ms(s.OffloadOffAfterStart))
	row("   tunnel back (first telemetry) after edgeheal started", ms(s.TunnelBackAfterStart))
	row("2. offload exposure after the modem re-plug", ms(s.ReplugExposure))
	row("   telemetry lost around the re-plug", fmt.Sprintf("%d messages", s.ReplugLost))
	row(fmt.Sprintf("3. %v blackhole detected after", d.s.blackhole), ms(s.BlackholeDetect))
	row("   telemetry outage (block included)", ms(s.BlackholeOutage))
	hsText := "none needed: the session outlived the block"
	if s.FreshHandshake {
		hsText = ms(s.HandshakeAfter)
	}
	row("   fresh handshake after the path returned", hsText)
	diag := s.BrokerDiagnosis
	if diag == "" {
		diag = "—"
	}
	row("4. broker outage: first event", diag)
	row("   tunnel actions during the broker outage", fmt.Sprint(s.BrokerTunnelActions))
	row("   events queued during the outage, delivered after it", fmt.Sprint(s.QueuedDelivered))
	row("telemetry overall", fmt.Sprintf("%d sent, %d delivered (%.2f %% lost, most before edgeheal started)", st.Sent, st.Received, st.LossPct))
	if len(s.Problems) > 0 {
		fmt.Fprintf(w, "  PROBLEMS: %s\n", strings.Join(s.Problems, "; "))
	}
	fmt.Fprintln(w)
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
