package tunnel

import (
	"context"
	"errors"
	"time"
)

// Watching for the host path's return. A peer whose session expired
// during an uplink outage (no handshake within WireGuard's 180 s
// REJECT_AFTER_TIME) has nothing left to lose: the ladder forces its
// handshake as soon as the path answers (ladderDecide). Rounds alone would
// notice the return only once a round's tunnel probe had timed out (up to
// interval + timeout later), later than WireGuard's own retry at its
// luckiest; so while such a peer is held, its host path is probed every
// pathWatchEvery, and an answer starts a round at once, or cuts short the
// tunnel probe of the round in progress: that round's observation is then
// the held peers' state, and its ladder probes each host path again
// (guards). See docs/operations/tunnels.md, "Do no harm".
const (
	pathWatchEvery = 250 * time.Millisecond
	pathWatchFor   = 10 * time.Minute // then the next round's hold starts another
	pathWatchMax   = 4                // one uplink: any of its paths answering says it is back
)

// errPathBack is the tunnel probe of a round that gave way to a host path
// answering again: no observation.
var errPathBack = errors.New("tunnel probe not made: a host path just answered again, the ladder runs now")

// watchPathBack starts watching target unless it is watched already or
// pathWatchMax targets are. The watch ends when the path answers (then it
// signals pathBack), when ctx ends, or after pathWatchFor.
func (m *Monitor) watchPathBack(ctx context.Context, target string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if target == "" || m.watching[target] || len(m.watching) >= pathWatchMax {
		return
	}
	if m.watching == nil {
		m.watching = map[string]bool{}
	}
	m.watching[target] = true
	m.watchers.Go(func() {
		answered := m.watchOnce(ctx, target)
		// Forgotten before the signal: the round it starts must probe the
		// path itself (guards), not take it for still watched.
		m.mu.Lock()
		delete(m.watching, target)
		m.mu.Unlock()
		if answered {
			m.log.Info("host path answers again: the ladder runs now", "target", target)
			select {
			case m.pathBack <- struct{}{}:
			default: // one is pending already
			}
		}
	})
}

// watchOnce probes target every pathWatchEvery until it answers (true),
// ctx ends or pathWatchFor has passed.
func (m *Monitor) watchOnce(ctx context.Context, target string) bool {
	tick := time.NewTicker(pathWatchEvery)
	defer tick.Stop()
	for range int(pathWatchFor / pathWatchEvery) {
		r := m.os.Net.Tunnel(ctx, target, pathWatchEvery)
		if r.Err == nil && (r.OK || r.Answered) {
			return true
		}
		select {
		case <-ctx.Done():
			return false
		case <-tick.C:
		}
	}
	return false
}

// watched reports whether target's return is being watched.
func (m *Monitor) watched(target string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.watching[target]
}

// readRound is the round's reading. A path that answered again since the
// last round (back) leaves the tunnel probe out; one that answers while
// the probe waits cuts it short. Either way the probe is an error, which
// observes nothing: the peers keep their state and the ladder runs for
// those that are down.
func (m *Monitor) readRound(ctx context.Context, back bool) tunnelReading {
	if back {
		return m.spec.readWithout(m.os, errPathBack)
	}
	pctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	done := make(chan struct{})
	defer close(done)
	go func() {
		select {
		case <-m.pathBack:
			cancel(errPathBack)
		case <-done:
		}
	}()
	r := m.spec.read(pctx, m.os)
	if r.probe != nil && r.probe.Err != nil && errors.Is(context.Cause(pctx), errPathBack) && ctx.Err() == nil {
		r.probe.Err = errPathBack
	}
	return r
}
