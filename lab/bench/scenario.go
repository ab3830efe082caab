package bench

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"time"

	"github.com/edgeheal/edgeheal/lab"
)

// Scenario IDs, in report order. S3 is two scenarios: a 20 s and a 190 s
// blackhole (the second outlives WireGuard's 180 s session lifetime).
const (
	S1  = "S1"
	S2  = "S2"
	S3a = "S3a"
	S3b = "S3b"
	S4  = "S4"
	S5  = "S5"
	S6  = "S6"
	S7  = "S7"
	S8  = "S8"
)

// Scenarios lists every scenario in report order.
var Scenarios = []string{S1, S2, S3a, S3b, S4, S5, S6, S7, S8}

// Titles describe the scenarios in tables.
var Titles = map[string]string{
	S1:  "offload on at start",
	S2:  "modem re-plug (offload back on)",
	S3a: "blackhole 20 s",
	S3b: "blackhole 190 s",
	S4:  "cloud endpoint moves, DNS follows",
	S5:  "broker outage",
	S6:  "carrier NAT mapping stuck",
	S7:  "carrier NAT remaps",
	S8:  "path MTU 1,400, no ICMP",
}

// env is one contender on one fresh lab, playing one scenario.
type env struct {
	l   *lab.Lab
	c   running
	o   Options
	res *Result
	log func(string, ...any)
}

// sleep waits d or until ctx ends.
func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// waitFlowing waits until telemetry has been delivered without a gap for
// about 1.5 s, up to max. It reports whether it flows.
func waitFlowing(ctx context.Context, l *lab.Lab, max time.Duration) (bool, error) {
	deadline := time.Now().Add(max)
	for time.Now().Before(deadline) {
		now := time.Now()
		ok, n := true, 0
		for _, s := range l.Samples(now.Add(-2500 * time.Millisecond)) {
			if s.Sent.After(now.Add(-time.Second)) {
				break
			}
			n++
			if s.Received.IsZero() {
				ok = false
			}
		}
		if ok && n >= 10 {
			return true, nil
		}
		if err := sleep(ctx, 200*time.Millisecond); err != nil {
			return false, err
		}
	}
	return false, nil
}

// warmup waits for the tunnel to carry telemetry before a fault; a lab
// that does not get there is noted, and the scenario goes on.
func (e *env) warmup(ctx context.Context) error {
	if err := sleep(ctx, 2*time.Second); err != nil {
		return err
	}
	ok, err := waitFlowing(ctx, e.l, 20*time.Second)
	if err != nil {
		return err
	}
	if !ok {
		e.res.Notes = append(e.res.Notes, "telemetry did not flow before the fault")
	}
	return sleep(ctx, e.o.Warmup)
}

// runScenario plays one scenario. The lab is already up and the contender
// started; res.Start is set.
func runScenario(ctx context.Context, id string, e *env) error {
	switch id {
	case S1:
		return e.s1(ctx)
	case S2:
		return e.s2(ctx)
	case S3a:
		return e.s3(ctx, 20*time.Second)
	case S3b:
		return e.s3(ctx, e.o.LongBlackhole)
	case S4:
		return e.s4(ctx)
	case S5:
		return e.s5(ctx)
	case S6, S7:
		return e.nat(ctx, id)
	case S8:
		return e.s8(ctx)
	}
	return fmt.Errorf("unknown scenario %q", id)
}

// scenarioOffloadOff says whether the lab starts with the manual fix
// applied: every scenario but S1, so that each isolates its own fault.
func scenarioOffloadOff(id string) bool { return id != S1 }

// scenarioNAT says whether the lab has the carrier NAT hop, with the
// edge's WireGuard on Flannel's fixed port 51820 (docs/lab.md, "What it
// models"): S6 and S7.
func scenarioNAT(id string) bool { return id == S6 || id == S7 }

// nat plays S6 (the carrier's mapping of the tunnel's flow is stuck: new
// flows pass, WireGuard's retries from the same port do not) or S7 (the
// carrier flushes its mappings and moves to another public address and
// port range) and watches the window.
func (e *env) nat(ctx context.Context, id string) error {
	if err := e.warmup(ctx); err != nil {
		return err
	}
	e.res.FaultAt = time.Now()
	window := e.o.S6Window
	if id == S6 {
		m, err := e.l.NATStuck()
		if err != nil {
			return err
		}
		e.mark(e.res.FaultAt, "stuck: "+m.String())
	} else {
		window = e.o.S7Window
		pub, err := e.l.NATRemap()
		if err != nil {
			return err
		}
		e.mark(e.res.FaultAt, "remapped to "+pub)
	}
	return sleep(ctx, window)
}

// S8: the carrier path carries IP packets up to S8MTU bytes and drops
// larger ones silently, both ways (lab.PathMTU). Small telemetry goes on;
// what is measured is how soon a new 256 KiB transfer completes, through
// the tunnel and over the uplink, both ways, and how long each later one
// takes (FirstTransfers, s8Later); for edgeheal also how soon its own
// report reaches the cloud over the same uplink (see finish).
func (e *env) s8(ctx context.Context) error {
	if err := e.warmup(ctx); err != nil {
		return err
	}
	rs := make([]TransferResult, len(TransferKinds))
	for i, k := range TransferKinds {
		rs[i].Kind = k.String()
		if d, err := transferOnce(ctx, e.l, k); err == nil {
			rs[i].BeforeSeconds = seconds(d)
		} else {
			e.res.Notes = append(e.res.Notes, fmt.Sprintf("%s before the fault: %v", k, err))
		}
	}
	// A random phase against edgeheal's path-MTU check (every 2 s), which
	// the warmup would otherwise fix: the runs sample its spread.
	if err := sleep(ctx, rand.N(2*time.Second)); err != nil {
		return err
	}
	e.res.FaultAt = time.Now()
	if err := e.l.PathMTU(e.o.S8MTU, 0); err != nil {
		return err
	}
	e.mark(e.res.FaultAt, fmt.Sprintf("path MTU %d", e.o.S8MTU))
	for i, at := range FirstTransfers(ctx, e.l, e.o.S8Window) {
		if !at.IsZero() {
			rs[i].FirstSeconds = ptr(seconds(at.Sub(e.res.FaultAt)))
		}
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	s8Later(ctx, e.l, rs, e.o.S8Later)
	e.res.Transfers = rs
	// Telemetry is judged over the same window for every contender, however
	// soon its transfers got through.
	return sleep(ctx, time.Until(e.res.FaultAt.Add(e.o.S8Window)))
}

func (e *env) mark(at time.Time, label string) {
	e.res.Marks = append(e.res.Marks, Mark{At: seconds(at.Sub(e.res.FaultAt)), Label: label})
}

// S1: the lab starts with offload on (the tunnel is dark) and the
// contender right after it. Outage: contender start to the first delivered
// message.
func (e *env) s1(ctx context.Context) error {
	e.res.FaultAt = e.res.Start
	return sleep(ctx, e.o.S1Window)
}

// S3: a blackhole of d, then a tail to see the recovery and the first
// fresh handshake.
func (e *env) s3(ctx context.Context, d time.Duration) error {
	if err := e.warmup(ctx); err != nil {
		return err
	}
	e.res.FaultAt = time.Now()
	if err := e.l.Blackhole(d); err != nil {
		return err
	}
	e.mark(e.res.FaultAt, "blackhole")
	if err := sleep(ctx, d); err != nil {
		return err
	}
	e.res.RestoreAt = e.res.FaultAt.Add(d)
	e.mark(e.res.RestoreAt, "path back")
	deadline := time.Now().Add(e.o.Tail)
	for time.Now().Before(deadline) {
		if hs, err := e.l.EdgeHandshake(); err == nil && hs.After(e.res.RestoreAt) && e.res.HandshakeAfterRestoreSeconds == nil {
			e.res.HandshakeAfterRestoreSeconds = ptr(seconds(hs.Sub(e.res.RestoreAt)))
		}
		if err := sleep(ctx, 100*time.Millisecond); err != nil {
			return err
		}
	}
	return nil
}

// S4: the cloud's public address changes and its name follows.
func (e *env) s4(ctx context.Context) error {
	if err := e.warmup(ctx); err != nil {
		return err
	}
	e.res.FaultAt = time.Now()
	addr, err := e.l.MoveCloudEndpoint()
	if err != nil {
		return err
	}
	e.mark(e.res.FaultAt, "moved to "+addr.String())
	return sleep(ctx, e.o.S4Window)
}

// S5: the broker stops for BrokerOutage. Any tunnel action is needless:
// the tunnel is fine.
func (e *env) s5(ctx context.Context) error {
	if err := e.warmup(ctx); err != nil {
		return err
	}
	e.res.FaultAt = time.Now()
	if err := e.l.StopBroker(); err != nil {
		return err
	}
	e.mark(e.res.FaultAt, "broker stopped")
	if err := sleep(ctx, e.o.BrokerOutage); err != nil {
		return err
	}
	e.res.RestoreAt = time.Now()
	if err := e.l.StartBroker(); err != nil {
		return err
	}
	e.mark(e.res.RestoreAt, "broker back")
	if err := sleep(ctx, e.o.Tail); err != nil {
		return err
	}
	e.telemetry(S5)
	return e.drain(ctx, 150*time.Second)
}

// finish computes the scenario's figures from the lab and the contender.
func (e *env) finish(id string) {
	r := e.res
	if r.End.IsZero() { // S5 ends the telemetry window before its drain
		e.telemetry(id)
	}
	from := r.FaultAt
	if from.IsZero() {
		from = r.End
	}
	at, what, ok := e.c.detected(from)
	scoreActions(r, from, at, what, ok, e.c.actions(from))
	if id == S5 {
		for _, ev := range e.c.events() {
			if !ev.Time.Before(r.FaultAt) && ev.Time.Before(r.RestoreAt) && ev.Received.After(r.RestoreAt) {
				r.EventsQueued++
				r.QueuedDeliveredSeconds = max(r.QueuedDeliveredSeconds, seconds(ev.Received.Sub(r.RestoreAt)))
			}
		}
	}
	r.Events = e.c.events()
	if id == S8 {
		for _, ev := range r.Events {
			if !ev.Time.Before(r.FaultAt) {
				r.ReportSeconds = ptr(seconds(ev.Received.Sub(r.FaultAt)))
				break
			}
		}
	}
}

// telemetry ends the scenario's telemetry window now: loss, outages and
// the series are judged up to this moment.
func (e *env) telemetry(id string) {
	r := e.res
	r.End = time.Now()
	from := r.FaultAt
	if from.IsZero() {
		from = r.End
	}
	recoverFrom := from
	if !r.RestoreAt.IsZero() {
		recoverFrom = r.RestoreAt
	}
	st := e.l.StatsSince(r.Start)
	if !r.FaultAt.IsZero() && id != S1 {
		// Loss counts the fault and what follows, not the warmup.
		st = e.l.StatsSince(r.FaultAt)
	}
	fillTelemetry(r, st, from, recoverFrom, r.End)
	r.Series = Series(e.l.Samples(r.Start), r.Start, r.End, time.Second)
	if !r.FaultAt.IsZero() {
		r.FaultOffset = seconds(r.FaultAt.Sub(r.Start))
	}
}

// drain waits, after S5's telemetry window, until every event edgeheal
// logged during the outage has reached the cloud, up to limit: its
// reconnects back off with jitter (up to 2 minutes) so a fleet does not
// return in one wave, and the queued events arrive with the reconnect.
func (e *env) drain(ctx context.Context, limit time.Duration) error {
	a, ok := e.c.(*agentRun)
	if !ok {
		return nil
	}
	deadline := time.Now().Add(limit)
	for {
		want := 0
		got := map[string]bool{}
		for _, ev := range a.cloud.Events() {
			got[ev.ID] = true
		}
		missing := 0
		for _, ev := range LogEvents(a.a.Logs()) {
			if !ev.Time.Before(e.res.FaultAt) && ev.Time.Before(e.res.RestoreAt) {
				want++
				if !got[ev.ID] {
					missing++
				}
			}
		}
		if missing == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			e.res.Notes = append(e.res.Notes, fmt.Sprintf("%d of %d events from the outage not delivered %v after it", missing, want, limit+e.o.Tail))
			return nil
		}
		if err := sleep(ctx, 250*time.Millisecond); err != nil {
			return err
		}
	}
}

// ladderRungs are the actions of edgeheal's repair ladder (the rungs' own
// names, and the endpoint and link-up actions they take).
var ladderRungs = map[string]bool{"reassert": true, "reresolve": true, "endpoint": true, "handshake": true,
	"rebind": true, "bounce": true, "link-up": true, "restart-unit": true}

// scoreActions records detection, actions and the needless ones: in S5
// any on the tunnel, in S8 any rung of the ladder.
func scoreActions(r *Result, from, detectedAt time.Time, detection string, detected bool, actions []Action) {
	r.DetectSeconds, r.Detection = nil, ""
	if detected {
		r.DetectSeconds, r.Detection = ptr(seconds(detectedAt.Sub(from))), detection
	}
	r.Actions, r.NeedlessActions = actions, 0
	for _, a := range r.Actions {
		switch {
		case r.Scenario == S5 && a.Tunnel:
			r.NeedlessActions++ // the tunnel is fine: the broker is down
		case r.Scenario == S8 && ladderRungs[a.What]:
			r.NeedlessActions++ // no rung helps with a path MTU
		}
	}
}

// RescoreFromLogs recomputes edgeheal's detection and actions from the
// daemon logs a run left in its work directory (<dir>/<scenario>-edgeheal/
// edgeheal.log), for reports made before the figures came from the log.
func RescoreFromLogs(rep *Report, dir string) error {
	for i := range rep.Results {
		r := &rep.Results[i]
		if r.Contender != Edgeheal || r.Error != "" {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, r.Scenario+"-"+Edgeheal, "edgeheal.log"))
		if err != nil {
			return err
		}
		evs := LogEvents(ParseLogs(b))
		from := r.FaultAt
		if from.IsZero() {
			from = r.Start
		}
		at, what, ok := agentDetected(evs, from)
		scoreActions(r, from, at, what, ok, agentActions(evs, from, r.Lab+"-wg"))
	}
	rep.Goals = CheckGoals(rep)
	return nil
}
