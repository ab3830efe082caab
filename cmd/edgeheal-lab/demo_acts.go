package main

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"github.com/edgeheal/edgeheal/lab"
	"github.com/edgeheal/edgeheal/lab/bench"
)

// act1 shows the dark tunnel, starts edgeheal and measures how soon
// offload is off and telemetry is delivered again.
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

// act2 re-plugs the modem and measures how long the new link carried
// traffic with offload on, and the telemetry lost around it.
func (d *demo) act2(ctx context.Context) error {
	d.title("Act 2: the modem re-enumerates (USB re-plug): the new link comes with offload on again")
	before := time.Now()
	ex, err := bench.ReplugExposure(ctx, d.l, 10*time.Second, nil)
	if err != nil {
		return err
	}
	d.say("lab", "uplink %s deleted and created again, offload on (kernel announced it at %s)", d.l.EdgeUplink(), d.at(ex.Created))
	if ex.Fixed.IsZero() {
		d.problem("offload still on 10 s after the re-plug")
	} else {
		d.sum.ReplugExposure = ex.Duration()
		d.say("lab", "offload off again %s after the link appeared (seen at most about 1 ms late)", ms(d.sum.ReplugExposure))
	}
	if err := sleepCtx(ctx, 5*time.Second); err != nil {
		return err
	}
	st := d.l.StatsSince(before.Add(-time.Second))
	d.sum.ReplugLost = st.Sent - st.Pending - st.Received
	d.say("lab", "telemetry around the re-plug: %d sent, %d delivered, %d lost", st.Sent-st.Pending, st.Received, d.sum.ReplugLost)
	return nil
}

// act3 blackholes the path and measures edgeheal's detection, the
// outage, and whether the path's return brought a fresh handshake.
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
			d.sum.BlackholeDetect = e.Time.Sub(start)
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

// act4 stops the broker and checks that edgeheal leaves the tunnel alone
// and delivers the events it queued once the broker is back.
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
	// agent checks the broker's port every ~2 s while disconnected.
	d.say("demo", "waiting for edgeheal to reconnect and deliver its queued events")
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		got := map[string]bool{}
		for _, e := range d.c.Events() {
			got[e.ID] = true
		}
		want, missing := 0, 0
		for _, e := range bench.LogEvents(d.a.Logs()) {
			if !e.Time.Before(start) && e.Time.Before(restarted) {
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
		if e.Received.After(restarted) {
			d.sum.QueuedDeliveredAfter = max(d.sum.QueuedDeliveredAfter, e.Received.Sub(restarted))
		}
	}
	if d.sum.QueuedDelivered > 0 {
		d.say("lab", "%d events queued during the outage reached the cloud, the last %s after the broker's return", d.sum.QueuedDelivered, ms(d.sum.QueuedDeliveredAfter))
	}
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
		if !e.Time.Before(from) && e.Time.Before(to) && e.Received.After(to) {
			n++
		}
	}
	return n
}

// statusLine is the gist of edgeheal's local status: state, outbox,
// MQTT, and every check that is not healthy.
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
