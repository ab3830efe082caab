package main

import (
	"context"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/edgeheal/edgeheal/lab/bench"
)

// onEvent prints an event as the cloud receives it, with how long it was
// queued when that was over 2 s.
func (d *demo) onEvent(e bench.Event) {
	late := ""
	if q := e.Received.Sub(e.Time); q > 2*time.Second {
		late = fmt.Sprintf("  [happened at %s, queued %.1f s]", d.at(e.Time), q.Seconds())
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

// onStatus prints a status message as the cloud receives it.
func (d *demo) onStatus(s bench.Status) {
	if s.Checks == nil { // the Last Will, or a clean shutdown's offline
		d.say("cloud ←", "status %s (session %d)", s.State, s.Session)
		return
	}
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

// attrsText renders the log attributes worth showing, in a fixed order.
func attrsText(m map[string]any) string {
	var parts []string
	for _, k := range []string{"link", "peer", "target", "action", "rung", "reason", "workload", "diagnosis", "err", "error"} {
		if v, ok := m[k]; ok {
			parts = append(parts, fmt.Sprintf("%s=%v", k, v))
		}
	}
	return strings.Join(parts, " ")
}

// waitDelivered waits until telemetry is delivered again, up to max, and
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
