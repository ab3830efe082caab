package agent

import (
	"context"
	"time"
)

// Watching for the host path's return. A peer whose session expired
// during an uplink outage (no handshake within WireGuard's 180 s
// REJECT_AFTER_TIME) has nothing left to lose: the ladder forces its
// handshake as soon as the path answers (ladderDecide). Rounds alone would
// notice the return only after the next round's tunnel probe timed out
// (up to interval + timeout), later than WireGuard's own retry at its
// luckiest; so while such a peer is held, its host path is probed every
// pathWatchEvery, and an answer runs the ladder for the held peers at
// once (ladderPathBack). See docs/operations.md, "Do no harm".
const (
	pathWatchEvery = 250 * time.Millisecond
	pathWatchFor   = 10 * time.Minute // then the next round's hold starts another
	pathWatchMax   = 4                // one uplink: any of its paths answering says it is back
)

// watchPathBack starts watching target unless it is watched already or
// pathWatchMax targets are. The watch ends when the path answers, when
// ctx ends, or after pathWatchFor.
func (m *TunnelMonitor) watchPathBack(ctx context.Context, target string) {
	if target == "" || m.watching[target] || len(m.watching) >= pathWatchMax {
		return
	}
	if m.watching == nil {
		m.watching = map[string]bool{}
	}
	m.watching[target] = true
	m.watchers.Go(func() {
		answered := false
		defer func() {
			select {
			case m.watched <- pathWatchEnd{target: target, answered: answered}:
			case <-ctx.Done():
			}
		}()
		tick := time.NewTicker(pathWatchEvery)
		defer tick.Stop()
		for range int(pathWatchFor / pathWatchEvery) {
			r := m.os.Net.Tunnel(ctx, target, pathWatchEvery)
			if r.Err == nil && (r.OK || r.Answered) {
				answered = true
				return
			}
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	})
}

// pathWatchEnd is a watch's end, handed to Run's goroutine.
type pathWatchEnd struct {
	target   string
	answered bool
}

// pathWatchEnded forgets a watch and, when its path answered, runs the
// ladder now for every peer held on an uplink outage: each climb probes
// its own host path again (guards), so a peer whose path is still down
// stays held.
func (m *TunnelMonitor) pathWatchEnded(ctx context.Context, e pathWatchEnd) {
	delete(m.watching, e.target)
	if !e.answered {
		return
	}
	var held []*peerTrack
	for _, p := range m.order {
		if p.st.Phase == PeerDown && p.holdKind == holdUplink {
			held = append(held, p)
		}
	}
	if len(held) == 0 {
		return
	}
	m.log.Info("host path answers again: running the ladder now", "target", e.target, "held_peers", len(held))
	m.uplinks = nil
	m.runLadder(ctx, held)
	m.publish(m.os.Clock.Now())
}
