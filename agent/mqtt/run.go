package mqtt

// The publisher's loop: connect, serve, and while disconnected wait for
// the broker the cheap way.

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/edgeheal/edgeheal/agent/core"
	"github.com/edgeheal/edgeheal/broker"
	"github.com/edgeheal/edgeheal/wire"
)

// Run implements core.Component: after a random delay of up to
// StartJitter it connects and serves until ctx ends, then publishes the
// retained `offline` status, disconnects cleanly (so the broker discards
// the Will) and returns nil. A broker that cannot be reached is waited for
// here (awaitBroker); a TLS or password file that cannot be read is the
// error Run returns.
func (p *Publisher) Run(ctx context.Context) error {
	wctx, cancel := context.WithCancel(ctx)
	stopWatch := p.watchLinks(wctx)
	defer func() { cancel(); stopWatch() }() // also when Run fails
	p.tick()
	p.setWaiting("first connect after a start delay of up to " + p.reconnect.StartJitter.String())
	if !sleep(ctx, spread(p.reconnect.StartJitter.D(), rand.Float64())) {
		return nil
	}
	for ctx.Err() == nil {
		p.tick()
		l, err := p.connect(ctx)
		session := p.session.Load()
		if errors.Is(err, errSetup) {
			p.setErr(err)
			return err
		}
		if err != nil {
			p.setErr(err)
			p.ended(-1, false)
			p.log.Warn("mqtt connect failed", "session", session, "err", err)
			p.brokerBroke(err)
		} else {
			p.setErr(nil)
			select {
			case <-p.refresh: // asked of a connection that is gone
			default:
			}
			p.log.Info("mqtt connected", "session", session)
			p.connected.Store(true)
			start := time.Now()
			err = p.serve(ctx, l)
			p.connected.Store(false)
			up := time.Since(start)
			if errors.Is(err, errRefresh) {
				// Ended by the publisher itself, for a path its segments no
				// longer fit (Refresh): not a failure, no backoff.
				p.log.Info("mqtt connecting again", "session", session, "up_seconds", up.Seconds(), "why", err)
				continue
			}
			if err != nil {
				p.setErr(err)
				p.log.Warn("mqtt connection lost", "session", session, "up_seconds", up.Seconds(), "err", err)
				p.brokerBroke(err)
			}
			// A connection the broker closed soon after accepting it, while
			// it still answers: taken over, or refused (see kicked). One
			// that went with the broker (a restart) is neither.
			// A broker that broke MQTT is reported as that (brokerBroke).
			var perr *broker.PacketError
			kick := errors.Is(err, errLost) && !errors.As(err, &perr) && up < kickedWithin && p.check(ctx)
			p.ended(up, kick)
		}
		if !p.awaitBroker(ctx) {
			return nil
		}
	}
	return nil
}

// brokerBroke reports a broker that broke MQTT (err is a
// *broker.PacketError: a packet over the reporting session's limit, a
// malformed CONNACK): an incident the first time, and a recovery once a
// connection has lasted StableAfter (err nil). Other errors change nothing.
func (p *Publisher) brokerBroke(err error) {
	var perr *broker.PacketError
	if err != nil && !errors.As(err, &perr) {
		return
	}
	p.mu.Lock()
	was := p.broken
	p.broken = perr != nil
	p.mu.Unlock()
	now := time.Now().UTC()
	switch {
	case perr != nil && !was:
		p.log.Error("mqtt: the broker's fault: "+perr.Error(), "broker", p.broker.String())
		p.opts.Emit(core.Event{Time: now, Kind: "incident", Target: "mqtt", Result: "protocol",
			Summary:  fmt.Sprintf("mqtt: %s (%s): the broker's fault, not the network's", perr.Error(), p.broker),
			Evidence: map[string]any{"broker": p.broker.String(), "packet_type": int(perr.Type), "remaining_length": perr.Length}})
	case perr == nil && was:
		p.log.Info("mqtt: the broker speaks MQTT again")
		p.opts.Emit(core.Event{Time: now, Kind: "recovered", Target: "mqtt", Result: "ok",
			Summary: fmt.Sprintf("mqtt: %s speaks MQTT again", p.broker)})
	}
}

// ended feeds the end of a full connect (up < 0: it failed) to the
// backoff and the closed-after-connect count (kick: the broker closed it
// soon and still answers), and reports that condition when it starts and
// when it ends.
func (p *Publisher) ended(up time.Duration, kick bool) {
	p.mu.Lock()
	p.retry.ended(time.Now(), up, rand.Float64())
	var started, over bool
	if up >= 0 {
		started, over = p.kicked.ended(kick, up)
	}
	n := p.kicked.inRow
	p.mu.Unlock()
	now := time.Now().UTC()
	switch {
	case started:
		text := p.kickedText(n)
		p.log.Error("mqtt: " + text)
		p.opts.Emit(core.Event{Time: now, Kind: "incident", Target: "mqtt", Result: "closed-after-connect",
			Summary:  "mqtt: " + text,
			Evidence: map[string]any{"client_id": p.clientID, "in_row": n, "within_seconds": kickedWithin.Seconds()}})
	case over:
		p.log.Info("mqtt: the broker keeps the connection again")
		p.opts.Emit(core.Event{Time: now, Kind: "recovered", Target: "mqtt", Result: "ok",
			Summary: fmt.Sprintf("mqtt: the broker keeps the connection of client id %s again", p.clientID)})
	}
}

// awaitBroker waits, while disconnected, until the next full connect is
// due: the broker's port answered a TCP connect (no TLS, no MQTT) and the
// backoff allows a connect; then a random delay of up to ConnectJitter.
// Checks run at once, then every ProbeInterval (jittered), and at once on
// TryNow. It returns false when ctx ended.
func (p *Publisher) awaitBroker(ctx context.Context) bool {
	check := time.NewTimer(0)
	defer check.Stop()
	var due *time.Timer
	defer func() {
		if due != nil {
			due.Stop()
		}
	}()
	answered := false
	for {
		p.tick()
		p.mu.Lock()
		wait := time.Until(p.retry.next)
		failed := p.retry.failed
		p.mu.Unlock()
		if answered && wait <= 0 {
			p.setWaiting("the broker answers: connecting")
			return sleep(ctx, spread(p.reconnect.ConnectJitter.D(), rand.Float64()))
		}
		var dueC <-chan time.Time
		if answered {
			p.setWaiting(fmt.Sprintf("the broker answers; next connect in %s (backoff after %d failed or short connections)", wait.Round(time.Second), failed))
			if due == nil {
				due = time.NewTimer(wait)
			} else {
				due.Reset(wait)
			}
			dueC = due.C
		}
		select {
		case <-ctx.Done():
			return false
		case <-dueC:
		case <-p.tryNow:
			answered = p.check(ctx)
			check.Reset(probeWait(p.reconnect.ProbeInterval.D(), rand.Float64()))
		case <-check.C:
			answered = p.check(ctx)
			check.Reset(probeWait(p.reconnect.ProbeInterval.D(), rand.Float64()))
		}
	}
}

// check reports whether the broker's port accepts a TCP connection now,
// within the smaller of ProbeInterval and DialTimeout.
func (p *Publisher) check(ctx context.Context) bool {
	ctx, cancel := context.WithTimeout(ctx, min(p.reconnect.ProbeInterval.D(), p.opts.DialTimeout))
	defer cancel()
	c, err := p.opts.Dial(ctx, "tcp", p.broker.Addr())
	if err != nil {
		p.setWaiting(fmt.Sprintf("the broker does not answer (checked every %s): %v", p.reconnect.ProbeInterval, err))
		return false
	}
	c.Close()
	return true
}

// watchLinks subscribes to link and default-route changes for as long as
// ctx lasts (again after a subscription broke, every 10 s at most), and
// turns each into a TryNow. It returns what waits for its goroutine.
func (p *Publisher) watchLinks(ctx context.Context) (wait func()) {
	if p.opts.Links == nil {
		return func() {}
	}
	var wg sync.WaitGroup
	wg.Go(func() {
		for ctx.Err() == nil {
			ch, err := p.opts.Links.Subscribe(ctx)
			if err != nil {
				p.log.Debug("mqtt: no link events, checking the broker on its interval only", "err", err)
			} else {
				for ev := range ch { // read until closed, as Subscribe requires
					if ev.Err == nil {
						p.TryNow()
					}
				}
			}
			sleep(ctx, 10*time.Second)
		}
	})
	return wg.Wait
}

// sleep waits d or until ctx ends; it reports whether ctx is still alive.
func sleep(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// OutgrowsTheConnection reports whether an event of the agent makes the
// open broker connection one to Refresh: a path-MTU repair lowered a TCP
// MSS clamp (the action's evidence says "lowered"), which a connection
// opened before it does not follow.
func OutgrowsTheConnection(e core.Event) bool {
	lowered, _ := e.Evidence["lowered"].(bool)
	return e.Kind == wire.EventAction && e.Action == "mss-clamp" && e.Result == "changed" && lowered
}

// SuggestsThePathIsBack reports whether an event of the agent is a reason
// for a disconnected publisher to check the broker at once (TryNow): a
// tunnel, workload or the outbox recovered, or an uplink came back (the
// offload guard found a re-plugged link with offload on again).
func SuggestsThePathIsBack(e core.Event) bool {
	return e.Kind == "recovered" || e.Kind == wire.EventOffloadDrift
}
