package mqtt

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/edgeheal/edgeheal/agent/core"
	"github.com/edgeheal/edgeheal/configs"
	"github.com/edgeheal/edgeheal/wire"
)

func TestRetryBacksOffOnFailuresAndShortConnectionsAndResetsOnlyAfterAStableOne(t *testing.T) {
	cfg := withDefaults(configs.Reconnect{
		MinDelay: configs.Duration(time.Second), MaxDelay: configs.Duration(8 * time.Second),
		StableAfter: configs.Duration(time.Minute),
	})
	t0 := time.Date(2026, 12, 1, 8, 0, 0, 0, time.UTC)
	type step struct {
		up  time.Duration // < 0: the connect failed
		rnd float64
	}
	tests := []struct {
		name  string
		steps []step
		want  []time.Duration // the wait after each step
	}{
		{"failed connects double up to the cap, each wait between half and all of the step",
			[]step{{-1, 0}, {-1, 0}, {-1, 0.999}, {-1, 0.5}, {-1, 0}, {-1, 0}},
			[]time.Duration{500 * time.Millisecond, time.Second, 3998 * time.Millisecond, 6 * time.Second, 4 * time.Second, 4 * time.Second}},
		{"a connection dropped right after CONNACK counts as a failure",
			[]step{{100 * time.Millisecond, 0}, {100 * time.Millisecond, 0}, {100 * time.Millisecond, 0}},
			[]time.Duration{500 * time.Millisecond, time.Second, 2 * time.Second}},
		{"a connection that lasted stable_after resets the backoff",
			[]step{{-1, 0}, {-1, 0}, {-1, 0}, {2 * time.Minute, 0}, {-1, 0}},
			[]time.Duration{500 * time.Millisecond, time.Second, 2 * time.Second, 500 * time.Millisecond, 500 * time.Millisecond}},
		{"one that did not last does not",
			[]step{{-1, 0}, {-1, 0}, {59 * time.Second, 0}},
			[]time.Duration{500 * time.Millisecond, time.Second, 2 * time.Second}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := newRetry(cfg)
			now := t0
			var got []time.Duration
			for _, s := range tt.steps {
				r.ended(now, s.up, s.rnd)
				got = append(got, r.next.Sub(now).Round(time.Millisecond))
				now = r.next
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("waits (-want +got):\n%s", diff)
			}
		})
	}
}

func TestJitterDraws(t *testing.T) {
	for _, tt := range []struct {
		name string
		got  time.Duration
		want time.Duration
	}{
		{"probe wait at its lowest", probeWait(2*time.Second, 0), 1500 * time.Millisecond},
		{"probe wait at its highest", probeWait(2*time.Second, 0.999999), 2500 * time.Millisecond},
		{"spread at 0", spread(500*time.Millisecond, 0), 0},
		{"spread in the middle", spread(500*time.Millisecond, 0.5), 250 * time.Millisecond},
		{"half jitter at its lowest", halfJitter(time.Second, 0), 500 * time.Millisecond},
	} {
		if tt.got.Round(time.Millisecond) != tt.want {
			t.Errorf("%s: %v, want %v", tt.name, tt.got, tt.want)
		}
	}
}

func TestKickedStartsAfterThreeShortLostConnectionsAndEndsWithOneThatLasts(t *testing.T) {
	type step struct {
		lost bool
		up   time.Duration
	}
	tests := []struct {
		name              string
		steps             []step
		startedAt, endsAt int // index of the step that starts / ends the condition; -1 none
	}{
		{"three short lost connections", []step{{true, time.Second}, {true, 2 * time.Second}, {true, time.Second}, {true, time.Second}}, 2, -1},
		{"then one that lasts ends it", []step{{true, time.Second}, {true, time.Second}, {true, time.Second}, {true, time.Minute}}, 2, 3},
		{"one that lasted in between resets the count", []step{{true, time.Second}, {true, time.Second}, {false, time.Minute}, {true, time.Second}, {true, time.Second}}, -1, -1},
		{"the agent's own short aborts do not count, nor reset", []step{{true, time.Second}, {false, time.Second}, {true, time.Second}, {true, time.Second}}, 3, -1},
		{"lost after a while is the path, not a kick", []step{{true, 20 * time.Second}, {true, 20 * time.Second}, {true, 20 * time.Second}}, -1, -1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var k kicked
			started, ended := -1, -1
			for i, s := range tt.steps {
				st, en := k.ended(s.lost, s.up)
				if st {
					started = i
				}
				if en {
					ended = i
				}
			}
			if started != tt.startedAt || ended != tt.endsAt {
				t.Errorf("started at %d, ended at %d; want %d and %d", started, ended, tt.startedAt, tt.endsAt)
			}
		})
	}
}

func TestSuggestsThePathIsBack(t *testing.T) {
	for _, tt := range []struct {
		e    core.Event
		want bool
	}{
		{core.Event{Kind: "recovered", Target: "wg0/AbCd"}, true},
		{core.Event{Kind: wire.EventOffloadDrift, Target: "wwan0"}, true},
		{core.Event{Kind: "incident", Target: "wg0/AbCd"}, false},
		{core.Event{Kind: "action", Target: "wg0/AbCd", Action: "handshake"}, false},
	} {
		if got := SuggestsThePathIsBack(tt.e); got != tt.want {
			t.Errorf("%s %s: %v, want %v", tt.e.Kind, tt.e.Target, got, tt.want)
		}
	}
}

// Callers written before report.mqtt.reconnect set MinBackoff and
// MaxBackoff: they still set the backoff's limits.
func TestMinAndMaxBackoffStillSetTheBackoff(t *testing.T) {
	dir := t.TempDir()
	ob := openOutbox(t, dir)
	p, err := NewPublisher(Options{Config: configs.ReportMQTT{Broker: "tcp://127.0.0.1:1"}, Node: configs.Node{Name: "n"},
		Outbox: ob, Session: OpenSession(dir, nil), MinBackoff: 100 * time.Millisecond, MaxBackoff: 500 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if p.reconnect.MinDelay.D() != 100*time.Millisecond || p.reconnect.MaxDelay.D() != 500*time.Millisecond {
		t.Errorf("reconnect %+v, want min_delay 100ms and max_delay 500ms", p.reconnect)
	}
}
