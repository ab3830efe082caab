package clock

import (
	"errors"
	"testing"

	"github.com/edgeheal/edgeheal/agent/core/coretest"
	"github.com/edgeheal/edgeheal/probes"
)

func TestClockVerdict(t *testing.T) {
	tests := []struct {
		name     string
		cs       probes.ClockStatus
		err      error
		wantOK   bool
		wantSoft bool
		want     string
	}{
		{name: "a synchronised clock lets repairs run", cs: probes.ClockStatus{Synchronized: true}, wantOK: true},
		{
			name: "a clock that stepped back is the likely cause",
			cs:   probes.ClockStatus{Synchronized: true, SteppedBack: true, Detail: "wall clock 42s behind"},
			want: "clock stepped back (wall clock 42s behind): peers drop handshakes with an older timestamp; likely cause, not bouncing the tunnel",
		},
		{
			name:     "an unsynchronised clock is only a doubt: the bouncing rungs are held",
			cs:       probes.ClockStatus{},
			wantSoft: true,
			want:     "clock not synchronised: if peers drop our handshakes this is the likely cause; not bouncing the tunnel",
		},
		{
			name: "an unreadable clock status holds repairs: an unobserved guard lets nothing through",
			err:  errors.New("adjtimex: operation not permitted"),
			want: "clock status unknown: adjtimex: operation not permitted",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ok, soft, cause := verdictOf(tt.cs, tt.err)
			if ok != tt.wantOK || soft != tt.wantSoft || cause != tt.want {
				t.Errorf("verdictOf = %v %v %q, want %v %v %q", ok, soft, cause, tt.wantOK, tt.wantSoft, tt.want)
			}
		})
	}
}

func TestTheGuardShowsTheClockAsACheck(t *testing.T) {
	c := coretest.NewClock()
	g := New(c)
	if got := g.Checks(); got != nil {
		t.Errorf("Checks before the first sample = %+v, want none", got)
	}
	g.sample()
	if got := g.Checks(); len(got) != 1 || got[0].State != "ok" || !got[0].Healthy {
		t.Errorf("a synchronised clock: %+v, want one healthy ok check", got)
	}
	c.Set(probes.ClockStatus{Synchronized: true, SteppedBack: true})
	if got := g.Check(); got.Healthy || got.State != "suspect" {
		t.Errorf("Check of a clock that stepped back = %+v, want unhealthy, suspect", got)
	}
}
