package probes

import (
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"golang.org/x/sys/unix"
)

// fakeClock drives Clock's seams: each sample advances the monotonic clock
// by tick and the wall clock by tick plus whatever step is queued.
type fakeClock struct {
	wall  time.Time
	mono  time.Duration
	tick  time.Duration
	steps []time.Duration // added to the wall clock at the next samples, in order
	timex unix.Timex
	state int
	err   error
}

func (f *fakeClock) sample() (time.Time, time.Duration) {
	f.mono += f.tick
	f.wall = f.wall.Add(f.tick)
	if len(f.steps) > 0 {
		f.wall = f.wall.Add(f.steps[0])
		f.steps = f.steps[1:]
	}
	return f.wall, f.mono
}

func (f *fakeClock) adjtimex(tx *unix.Timex) (int, error) {
	*tx = f.timex
	return f.state, f.err
}

func TestClockCheck(t *testing.T) {
	synced := unix.Timex{Status: unix.STA_PLL, Offset: 1500} // µs
	tests := []struct {
		name  string
		timex unix.Timex
		state int
		steps []time.Duration // wall clock step before each Check (the first has no baseline)
		want  []ClockStatus
	}{
		{
			name:  "a synchronized clock moving normally is fine",
			timex: synced,
			steps: []time.Duration{0, 0},
			want: []ClockStatus{
				{Synchronized: true, Offset: 1500 * time.Microsecond, Detail: "clock synchronized, offset 1.5ms"},
				{Synchronized: true, Offset: 1500 * time.Microsecond, Detail: "clock synchronized, offset 1.5ms"},
			},
		},
		{
			name:  "STA_UNSYNC means not synchronized",
			timex: unix.Timex{Status: unix.STA_UNSYNC},
			steps: []time.Duration{0},
			want:  []ClockStatus{{Detail: "clock not synchronized (STA_UNSYNC: no NTP daemon disciplines it)"}},
		},
		{
			name:  "TIME_ERROR means not synchronized",
			timex: synced,
			state: unix.TIME_ERROR,
			steps: []time.Duration{0},
			want:  []ClockStatus{{Offset: 1500 * time.Microsecond, Detail: "clock not synchronized (kernel clock state TIME_ERROR)"}},
		},
		{
			name:  "a nanosecond offset is read as nanoseconds",
			timex: unix.Timex{Status: unix.STA_NANO, Offset: 2500},
			steps: []time.Duration{0},
			want:  []ClockStatus{{Synchronized: true, Offset: 2500 * time.Nanosecond, Detail: "clock synchronized, offset 2.5µs"}},
		},
		{
			name:  "a backward step is reported for as long as the lost time",
			timex: synced,
			// 10 s per Check: step back 25 s, then it still matters 15 s and 5 s later, then no more.
			steps: []time.Duration{0, -25 * time.Second, 0, 0, 0},
			want: []ClockStatus{
				{Synchronized: true, Offset: 1500 * time.Microsecond, Detail: "clock synchronized, offset 1.5ms"},
				{Synchronized: true, SteppedBack: true, Offset: 1500 * time.Microsecond, Detail: "wall clock stepped back 25s; WireGuard peers reject our handshakes for up to 25s more"},
				{Synchronized: true, SteppedBack: true, Offset: 1500 * time.Microsecond, Detail: "wall clock stepped back 25s; WireGuard peers reject our handshakes for up to 15s more"},
				{Synchronized: true, SteppedBack: true, Offset: 1500 * time.Microsecond, Detail: "wall clock stepped back 25s; WireGuard peers reject our handshakes for up to 5s more"},
				{Synchronized: true, Offset: 1500 * time.Microsecond, Detail: "clock synchronized, offset 1.5ms"},
			},
		},
		{
			name:  "a step forward or a slew below MinStep is not a step back",
			timex: synced,
			steps: []time.Duration{0, time.Hour, -50 * time.Millisecond},
			want: []ClockStatus{
				{Synchronized: true, Offset: 1500 * time.Microsecond, Detail: "clock synchronized, offset 1.5ms"},
				{Synchronized: true, Offset: 1500 * time.Microsecond, Detail: "clock synchronized, offset 1.5ms"},
				{Synchronized: true, Offset: 1500 * time.Microsecond, Detail: "clock synchronized, offset 1.5ms"},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := &fakeClock{wall: time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC), tick: 10 * time.Second,
				steps: tt.steps, timex: tt.timex, state: tt.state}
			c := &Clock{sample: f.sample, adjtimex: f.adjtimex}
			var got []ClockStatus
			for range tt.want {
				st, err := c.Check()
				if err != nil {
					t.Fatalf("Check: %v", err)
				}
				got = append(got, st)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("statuses (-want +got):\n%s", diff)
			}
		})
	}
}

func TestClockCheckAdjtimexError(t *testing.T) {
	f := &fakeClock{tick: time.Second, err: unix.EPERM}
	c := &Clock{sample: f.sample, adjtimex: f.adjtimex}
	if _, err := c.Check(); !errors.Is(err, unix.EPERM) {
		t.Fatalf("err = %v, want EPERM", err)
	}
}

// TestClockCheckOnThisHost reads the real kernel: it must work unprivileged
// and see no step between two immediate calls.
func TestClockCheckOnThisHost(t *testing.T) {
	var c Clock
	if _, err := c.Check(); err != nil {
		t.Fatal(err)
	}
	st, err := c.Check()
	if err != nil {
		t.Fatal(err)
	}
	if st.SteppedBack {
		t.Errorf("second Check = %+v; a step back between two immediate calls is unlikely", st)
	}
	t.Logf("this host: %+v", st)
}
