package main

import (
	"fmt"
	"strings"
	"time"
)

// report prints every event the cloud received, the sequence of states
// its status messages went through, and the summary of measured times.
func (d *demo) report() {
	d.mu.Lock()
	defer d.mu.Unlock()
	w := d.out
	evs := d.c.Events()
	d.sum.Events = len(evs)
	fmt.Fprintf(w, "\n== What the cloud received (%d events, in the order they happened)\n", len(evs))
	for _, e := range evs {
		late := ""
		if q := e.Received.Sub(e.Time); q > 2*time.Second {
			late = fmt.Sprintf(" [delivered %.1f s later]", q.Seconds())
		}
		what := e.Kind
		if e.Action != "" {
			what += " " + e.Action
		}
		fmt.Fprintf(w, "  %8s  %-22s %-16s %s%s\n", d.at(e.Time), what, e.Target, e.Summary, late)
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
	row("   the last of them at the cloud after the broker's return", ms(s.QueuedDeliveredAfter))
	row("telemetry overall", fmt.Sprintf("%d sent, %d delivered (%.2f %% lost, most before edgeheal started)", st.Sent, st.Received, st.LossPct))
	if len(s.Problems) > 0 {
		fmt.Fprintf(w, "  PROBLEMS: %s\n", strings.Join(s.Problems, "; "))
	}
	fmt.Fprintln(w)
}
