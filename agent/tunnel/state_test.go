package tunnel

import (
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/edgeheal/edgeheal/configs"
)

func TestNextPeer(t *testing.T) {
	t0 := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	// An explicit order, so that the rung indices below stay put whatever the default.
	pol := peerPolicy{Misses: 3, VerifyTimeout: 15 * time.Second, Heal: []string{"reassert", "handshake", "reresolve", "bounce", "restart-unit"}}
	miss := func(s int) peerObservation {
		return peerObservation{Now: at(s), Bad: true, Reason: "probe missed: timeout"}
	}
	good := func(s int) peerObservation { return peerObservation{Now: at(s)} }
	down := peerState{Phase: peerDown, Since: at(2), Streak: 3, Reason: "probe missed: timeout", Opened: at(2)}
	healing := peerState{Phase: peerHealing, Since: at(3), Streak: 3, Rung: 2, ActedAt: at(3), DoneAt: at(3),
		Reason: "probe missed: timeout", Opened: at(2)}

	tests := []struct {
		name string
		s    peerState
		obs  peerObservation
		p    peerPolicy
		want peerState
	}{
		{
			name: "a healthy observation keeps a fresh peer ok",
			obs:  good(0),
			want: peerState{Phase: peerOK, Since: at(0), LastGood: at(0)},
		},
		{
			name: "one probe miss makes an ok peer suspect, nothing more",
			s:    peerState{Phase: peerOK, Since: at(0)},
			obs:  miss(1),
			want: peerState{Phase: peerSuspect, Since: at(1), Streak: 1, Reason: "probe missed: timeout"},
		},
		{
			name: "a second miss keeps counting in suspect",
			s:    peerState{Phase: peerSuspect, Since: at(1), Streak: 1},
			obs:  miss(2),
			want: peerState{Phase: peerSuspect, Since: at(1), Streak: 2, Reason: "probe missed: timeout"},
		},
		{
			name: "the third miss in a row confirms: down and an incident opened at the last good observation",
			s:    peerState{Phase: peerSuspect, Since: at(1), Streak: 2, LastGood: at(0)},
			obs:  miss(3),
			want: peerState{Phase: peerDown, Since: at(3), Streak: 3, Reason: "probe missed: timeout", Opened: at(3), LastGood: at(0), Began: at(0)},
		},
		{
			name: "with misses 1 the first miss confirms",
			s:    peerState{Phase: peerOK},
			obs:  miss(1),
			p:    peerPolicy{Misses: 1, Heal: configs.HealRungs},
			want: peerState{Phase: peerDown, Since: at(1), Streak: 1, Reason: "probe missed: timeout", Opened: at(1), Began: at(1)},
		},
		{
			name: "a good probe between misses clears a suspect peer",
			s:    peerState{Phase: peerSuspect, Since: at(1), Streak: 2, Reason: "probe missed: timeout"},
			obs:  good(3),
			want: peerState{Phase: peerOK, Since: at(3), LastGood: at(3)},
		},
		{
			name: "a confirmed slow signal goes from ok straight to down",
			s:    peerState{Phase: peerOK},
			obs:  peerObservation{Now: at(5), Bad: true, Confirmed: true, Reason: "handshake age 3m31s over stale_after 3m30s"},
			want: peerState{Phase: peerDown, Since: at(5), Streak: 1, Reason: "handshake age 3m31s over stale_after 3m30s", Opened: at(5), Began: at(5)},
		},
		{
			name: "a probe that errored leaves a suspect peer exactly as it was",
			s:    peerState{Phase: peerSuspect, Since: at(1), Streak: 2},
			obs:  peerObservation{Now: at(3), Err: errors.New("no socket"), Bad: true, Confirmed: true},
			want: peerState{Phase: peerSuspect, Since: at(1), Streak: 2},
		},
		{
			name: "a probe that errored leaves a healing peer healing past its verify timeout",
			s:    healing,
			obs:  peerObservation{Now: at(60), Err: errors.New("no socket")},
			want: healing,
		},
		{
			name: "a started rung makes a down peer healing and points at the next rung",
			s:    down,
			obs:  peerObservation{Now: at(4), StartedAt: at(3), Started: configs.HealHandshake},
			want: peerState{Phase: peerHealing, Since: at(4), Streak: 3, Rung: 2, ActedAt: at(3), DoneAt: at(4),
				Reason: "probe missed: timeout", Opened: at(2)},
		},
		{
			name: "a rung that changed nothing is skipped: still down, the ladder moves on",
			s:    down,
			obs:  peerObservation{Now: at(3), Skipped: configs.HealReassert},
			want: peerState{Phase: peerDown, Since: at(2), Streak: 3, Rung: 1, Reason: "probe missed: timeout", Opened: at(2)},
		},
		{
			name: "a miss within verify_timeout keeps the peer healing",
			s:    healing,
			obs:  miss(17),
			want: peerState{Phase: peerHealing, Since: at(3), Streak: 4, Rung: 2, ActedAt: at(3), DoneAt: at(3),
				Reason: "probe missed: timeout", Opened: at(2)},
		},
		{
			name: "a rung not verified within verify_timeout sends the peer back down for the next rung",
			s:    healing,
			obs:  miss(18),
			want: peerState{Phase: peerDown, Since: at(18), Streak: 4, Rung: 2, ActedAt: at(3), DoneAt: at(3),
				Reason: "probe missed: timeout", Opened: at(2)},
		},
		{
			name: "a healthy observation while healing closes the incident and resets the ladder",
			s:    healing,
			obs:  good(5),
			want: peerState{Phase: peerOK, Since: at(5), LastGood: at(5)},
		},
		{
			name: "a down peer that recovers by itself is ok",
			s:    down,
			obs:  good(4),
			want: peerState{Phase: peerOK, Since: at(4), LastGood: at(4)},
		},
		{
			name: "giving up makes a down peer degraded with the reason",
			s:    down,
			obs:  peerObservation{Now: at(9), GaveUp: true, Reason: "budget spent"},
			want: peerState{Phase: peerDegraded, Since: at(9), Streak: 3, Reason: "probe missed: timeout", GaveUp: "budget spent", Opened: at(2)},
		},
		{
			name: "degraded is sticky while the peer stays bad",
			s:    peerState{Phase: peerDegraded, Since: at(9), Streak: 3, Reason: "probe missed: timeout", GaveUp: "budget spent", Opened: at(2)},
			obs:  peerObservation{Now: at(99), Bad: true, Confirmed: true, Reason: "handshake age 4m over stale_after 3m30s"},
			want: peerState{Phase: peerDegraded, Since: at(9), Streak: 4, Reason: "handshake age 4m over stale_after 3m30s", GaveUp: "budget spent", Opened: at(2)},
		},
		{
			name: "degraded ends only with a healthy observation",
			s:    peerState{Phase: peerDegraded, Since: at(9), Streak: 3, Rung: 5, Reason: "probe missed: timeout", GaveUp: "budget spent", Opened: at(2)},
			obs:  good(100),
			want: peerState{Phase: peerOK, Since: at(100), LastGood: at(100)},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := tt.p
			if p.Heal == nil {
				p = pol
			}
			got := nextPeer(tt.s, tt.obs, p)
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("nextPeer (-want +got):\n%s", diff)
			}
		})
	}
}
