package tunnel

import (
	"slices"
	"time"
)

// PeerPhase is where a tunnel peer is in its health state machine:
//
//	ok → suspect → down → healing → ok
//	                 ↑        │
//	                 └────────┘ (rung not verified in time: next rung)
//	down/healing → degraded (gave up: alert only, sticky until healthy)
type peerPhase string

// The phases of a tunnel peer.
const (
	peerOK       peerPhase = "ok"
	peerSuspect  peerPhase = "suspect"  // bad, not yet confirmed (probe misses below the streak)
	peerDown     peerPhase = "down"     // confirmed bad: the ladder may act
	peerHealing  peerPhase = "healing"  // a rung ran; waiting for it to be verified
	peerDegraded peerPhase = "degraded" // gave up: alert only until healthy again
)

// PeerState is one peer's health state. Its zero value is a fresh, healthy
// peer (Phase "" counts as ok).
type peerState struct {
	Phase   peerPhase
	Since   time.Time // when Phase was entered
	Streak  int       // bad observations in a row
	Rung    int       // index in the heal list of the next rung to try
	ActedAt time.Time // when the rung being verified started (healing)
	DoneAt  time.Time // when it returned: verify_timeout counts from here
	Reason  string    // the last bad signal
	GaveUp  string    // why the ladder gave up (degraded)
	Opened  time.Time // when the incident opened (entered down); zero: none open
	// LastGood is the last good observation. An incident began there, not
	// when it was confirmed (Began): a tunnel dark for 10 s is a 10 s
	// incident, however many misses confirm it.
	LastGood time.Time
	Began    time.Time // the open incident's start: its LastGood, or its first bad observation without one
}

// PeerObservation is what one round saw of a peer, plus what the ladder did
// about it in that round.
type peerObservation struct {
	Now time.Time
	// Err is set when the observation could not be made (the probe errored,
	// the device could not be read): the state is left unchanged.
	Err error
	// Bad is a confirmed bad signal: a probe miss, a stale handshake, rx flat
	// while tx rises, or a workload's suspicion. Not Bad is healthy.
	Bad bool
	// Confirmed makes a Bad observation count as a full streak at once: the
	// slow signals (handshake age, rx silence) carry their own duration, and
	// a workload's suspicion comes after its own streak.
	Confirmed bool
	Reason    string
	// Started names the rung the ladder ran: it started at StartedAt and
	// returned at Now, and it changed something (or would have, in a dry run).
	Started   string
	StartedAt time.Time
	// Skipped names a rung that ran and changed nothing, so it cannot have
	// fixed anything: the ladder moves past it at once.
	Skipped string
	// GaveUp says the ladder gave up at Now (every rung tried, or the budget
	// spent); Reason says why.
	GaveUp bool
	// Unverified ends the verification of a Bad observation's rung now:
	// it visibly failed (a forced handshake whose initiations left while
	// nothing came back), so the ladder need not wait out verify_timeout.
	Unverified bool
}

// PeerPolicy is the part of the configuration the state machine reads.
type peerPolicy struct {
	Misses        int           // bad probe observations in a row that confirm (probe.misses)
	VerifyTimeout time.Duration // a rung must make the peer healthy within this (policy.verify_timeout)
	Heal          []string      // the ladder, in order (tunnel heal)
}

// nextPeer is the whole per-peer state machine, a pure function so that a
// table test covers it. The ladder's own decisions come in as observations
// (Started, GaveUp) so that every transition is made here.
func nextPeer(s peerState, obs peerObservation, p peerPolicy) peerState {
	if obs.Err != nil {
		return s // never act on an observation that could not be made
	}
	if s.Phase == "" {
		s.Phase, s.Since = peerOK, obs.Now // first observation of a fresh peer
	}
	enter := func(ph peerPhase) {
		if s.Phase != ph {
			s.Phase = ph
			s.Since = obs.Now
		}
	}
	switch {
	case obs.GaveUp:
		enter(peerDegraded)
		s.GaveUp = obs.Reason
		return s
	case obs.Started != "":
		enter(peerHealing)
		s.ActedAt, s.DoneAt = obs.StartedAt, obs.Now
		if s.ActedAt.IsZero() {
			s.ActedAt = obs.Now
		}
		if i := slices.Index(p.Heal, obs.Started); i >= 0 {
			s.Rung = i + 1
		}
		return s
	case obs.Skipped != "":
		if i := slices.Index(p.Heal, obs.Skipped); i >= 0 {
			s.Rung = i + 1
		}
		return s
	case !obs.Bad:
		enter(peerOK)
		s.Streak, s.Rung, s.Reason, s.GaveUp = 0, 0, "", ""
		s.ActedAt, s.DoneAt, s.Opened, s.Began = time.Time{}, time.Time{}, time.Time{}, time.Time{}
		s.LastGood = obs.Now
		return s
	}
	s.Streak++
	s.Reason = obs.Reason
	switch s.Phase {
	case peerOK, peerSuspect:
		if obs.Confirmed || s.Streak >= max(p.Misses, 1) {
			enter(peerDown)
			s.Opened, s.Began = obs.Now, s.LastGood
			if s.Began.IsZero() {
				s.Began = obs.Now
			}
		} else {
			enter(peerSuspect)
		}
	case peerHealing:
		// Not verified in time: back to down, where the ladder takes the
		// next rung. A rung that has not returned yet (DoneAt zero: a
		// previous monitor's action still in flight) is not timed.
		if !s.DoneAt.IsZero() && (obs.Unverified || obs.Now.Sub(s.DoneAt) >= p.VerifyTimeout) {
			enter(peerDown)
		}
	case peerDown, peerDegraded:
		// Stays: down waits for the ladder; degraded is sticky until healthy.
	}
	return s
}

// began is when the open incident of s began (its last good observation),
// or when it opened for a state recorded before Began was kept.
func (s peerState) began() time.Time {
	if s.Began.IsZero() {
		return s.Opened
	}
	return s.Began
}
