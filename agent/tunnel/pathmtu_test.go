package tunnel

import (
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/edgeheal/edgeheal/netfix"
	"github.com/edgeheal/edgeheal/probes"
)

// The path-MTU decision, table-tested: the lab's numbers (tunnel wg0 at
// 1420, uplink wwan0 at 1500, a carrier path of 1400 without ICMP: 1400
// over the uplink, 1328 through the tunnel).
func TestNextMTU(t *testing.T) {
	t0 := time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	pol := mtuPolicy{Repair: true, RelaxAfter: 2 * time.Minute}
	tun := func(largest int) pathReading { return pathReading{Link: "wg0", Full: 1420, Largest: largest} }
	capped := pathReading{Link: "wg0", Full: 1420, Largest: 1328, Capped: true}
	up := func(largest int) pathReading {
		return pathReading{Link: "wwan0", Full: 1500, Largest: largest, Endpoint: true, Overhead: 60}
	}
	silent := func(r pathReading) pathReading { r.Largest, r.Silent = 0, true; return r }
	failed := func(r pathReading) pathReading {
		r.Largest, r.Err = 0, errors.New("socket: operation not permitted")
		return r
	}
	obs := func(s int, linkMTU int, tunnel, uplink pathReading) mtuObservation {
		return mtuObservation{Now: at(s), LinkMTU: linkMTU, Tunnel: tunnel, Uplink: uplink}
	}
	// clamped is the state after the blackhole was found and fitted at 0 s.
	clamped := mtuState{
		Tunnel: mtuWay{Link: "wg0", Full: 1420, Measured: 1328, Clamp: 1328},
		Uplink: mtuWay{Link: "wwan0", Full: 1500, Measured: 1400, Clamp: 1400},
		MTUSet: 1328, MTUBefore: 1420, Fitted: true, Opened: at(0), CheckedAt: at(0),
	}
	fullClamp := []netfix.LinkClamp{{Link: "wg0", PathMTU: 1328, MTUBefore: 1420}, {Link: "wwan0", PathMTU: 1400}}
	ok := mtuState{
		Tunnel: mtuWay{Link: "wg0", Full: 1420, Measured: 1420},
		Uplink: mtuWay{Link: "wwan0", Full: 1500, Measured: 1500},
	}

	tests := []struct {
		name      string
		s         mtuState
		obs       mtuObservation
		pol       *mtuPolicy
		want      mtuState
		wantPlan  mtuPlan
		wantNotes []string // kinds
		phase     mtuPhase // after the plan is on the node (Fitted set when the plan asks for anything)
	}{
		{
			name:  "the full size crosses both ways: ok, nothing to change",
			obs:   obs(0, 1420, tun(1420), up(1500)),
			want:  func() mtuState { s := ok; s.CheckedAt = at(0); return s }(),
			phase: mtuOK,
		},
		{
			name:      "a blackhole both ways (path MTU known) is clamped at once and the tunnel's MTU follows",
			obs:       obs(0, 1420, tun(1328), up(1400)),
			want:      func() mtuState { s := clamped; s.Fitted = false; return s }(), // until the runner has done the plan
			wantPlan:  mtuPlan{Clamp: fullClamp, LinkMTU: 1328},
			wantNotes: []string{"opened"},
			phase:     mtuClamped,
		},
		{
			name: "with repair off it is reported and nothing changes",
			obs:  obs(0, 1420, tun(1328), up(1400)),
			pol:  &mtuPolicy{Repair: false, RelaxAfter: 2 * time.Minute},
			want: mtuState{Tunnel: mtuWay{Link: "wg0", Full: 1420, Measured: 1328}, Uplink: mtuWay{Link: "wwan0", Full: 1500, Measured: 1400},
				Opened: at(0), CheckedAt: at(0)},
			wantNotes: []string{"opened"},
			phase:     mtuLow,
		},
		{
			name: "a probe target that answers nothing through the tunnel: only the uplink is measured and clamped, the MTU stays",
			obs:  obs(0, 1420, silent(tun(0)), up(1400)),
			want: mtuState{Tunnel: mtuWay{Link: "wg0", Full: 1420}, Uplink: mtuWay{Link: "wwan0", Full: 1500, Measured: 1400, Clamp: 1400},
				Opened: at(0), CheckedAt: at(0)},
			wantPlan:  mtuPlan{Clamp: []netfix.LinkClamp{{Link: "wwan0", PathMTU: 1400}}},
			wantNotes: []string{"opened"},
			phase:     mtuClamped,
		},
		{
			name:  "nothing answers either way: unknown, nothing changes",
			obs:   obs(0, 1420, silent(tun(0)), silent(up(0))),
			want:  mtuState{Tunnel: mtuWay{Link: "wg0", Full: 1420}, Uplink: mtuWay{Link: "wwan0", Full: 1500}, CheckedAt: at(0)},
			phase: mtuUnknown,
		},
		{
			name:     "a check that could not be made (path MTU unknown) keeps the clamp and the MTU as they are",
			s:        clamped,
			obs:      obs(2, 1328, failed(capped), failed(up(0))),
			want:     func() mtuState { s := clamped; s.CheckedAt = at(2); return s }(),
			wantPlan: mtuPlan{Clamp: fullClamp},
			phase:    mtuClamped,
		},
		{
			name: "the endpoint does not answer: the tunnel is clamped, its MTU is not lowered (its growth could not be seen)",
			obs:  obs(0, 1420, tun(1328), silent(up(0))),
			want: mtuState{Tunnel: mtuWay{Link: "wg0", Full: 1420, Measured: 1328, Clamp: 1328}, Uplink: mtuWay{Link: "wwan0", Full: 1500},
				Opened: at(0), CheckedAt: at(0)},
			wantPlan:  mtuPlan{Clamp: []netfix.LinkClamp{{Link: "wg0", PathMTU: 1328}}},
			wantNotes: []string{"opened"},
			phase:     mtuClamped,
		},
		{
			name:     "still small, as clamped: nothing new to do",
			s:        clamped,
			obs:      obs(2, 1328, capped, up(1400)),
			want:     func() mtuState { s := clamped; s.CheckedAt = at(2); return s }(),
			wantPlan: mtuPlan{Clamp: fullClamp},
			phase:    mtuClamped,
		},
		{
			name: "smaller still: the clamp goes down at once",
			s:    clamped,
			obs:  obs(2, 1328, pathReading{Link: "wg0", Full: 1420, Largest: 1280}, up(1340)),
			want: func() mtuState {
				s := clamped
				s.Tunnel.Measured, s.Tunnel.Clamp, s.Uplink.Measured, s.Uplink.Clamp = 1280, 1280, 1340, 1340
				s.MTUSet, s.CheckedAt = 1280, at(2)
				return s
			}(),
			wantPlan: mtuPlan{Clamp: []netfix.LinkClamp{{Link: "wg0", PathMTU: 1280, MTUBefore: 1420}, {Link: "wwan0", PathMTU: 1340}}, LinkMTU: 1280},
			phase:    mtuClamped,
		},
		{
			name: "Flannel set the MTU back and the path still needs it: reported, and lowered again",
			s:    clamped,
			obs:  obs(2, 1420, tun(1328), up(1400)),
			want: func() mtuState {
				s := clamped
				s.Resets, s.CheckedAt = []time.Time{at(2)}, at(2)
				return s
			}(),
			wantPlan:  mtuPlan{Clamp: fullClamp, LinkMTU: 1328},
			wantNotes: []string{"mtu-reset"},
			phase:     mtuClamped,
		},
		{
			name: "Flannel set it back a third time in ten minutes: a fight; the MTU is left to it, the clamp stays",
			s:    func() mtuState { s := clamped; s.Resets = []time.Time{at(-300), at(-100)}; return s }(),
			obs:  obs(2, 1420, tun(1328), up(1400)),
			want: func() mtuState {
				s := clamped
				s.Resets, s.Fighting, s.MTUSet, s.MTUBefore, s.CheckedAt = []time.Time{at(-300), at(-100), at(2)}, true, 0, 0, at(2)
				return s
			}(),
			wantPlan:  mtuPlan{Clamp: []netfix.LinkClamp{{Link: "wg0", PathMTU: 1328}, {Link: "wwan0", PathMTU: 1400}}},
			wantNotes: []string{"mtu-reset", "fight"},
			phase:     mtuClamped,
		},
		{
			name: "a fight ends when the window is quiet: the MTU may be lowered again",
			s: func() mtuState {
				s := clamped
				s.Resets, s.Fighting, s.MTUSet, s.MTUBefore = []time.Time{at(-1000)}, true, 0, 0
				return s
			}(),
			obs:      obs(2, 1420, tun(1328), up(1400)),
			want:     func() mtuState { s := clamped; s.CheckedAt = at(2); s.Resets = []time.Time{}; return s }(),
			wantPlan: mtuPlan{Clamp: fullClamp, LinkMTU: 1328},
			phase:    mtuClamped,
		},
		{
			name: "the operator made a lower MTU permanent: it is theirs, and the tunnel's clamp goes",
			s:    clamped,
			obs:  obs(2, 1320, pathReading{Link: "wg0", Full: 1320, Largest: 1320}, up(1400)),
			want: func() mtuState {
				s := clamped
				s.Tunnel = mtuWay{Link: "wg0", Full: 1320, Measured: 1320}
				s.MTUSet, s.MTUBefore, s.Resets, s.CheckedAt = 0, 0, []time.Time{at(2)}, at(2)
				return s
			}(),
			wantPlan:  mtuPlan{Clamp: []netfix.LinkClamp{{Link: "wwan0", PathMTU: 1400}}},
			wantNotes: []string{"mtu-reset"},
			phase:     mtuClamped,
		},
		{
			name: "the path grew back: the clamp waits relax_after (seen through the endpoint while the MTU is low)",
			s:    clamped,
			obs:  obs(60, 1328, capped, up(1500)),
			want: func() mtuState {
				s := clamped
				s.Tunnel.Measured, s.Tunnel.Grow, s.Tunnel.GrowSince = 1420, 1420, at(60)
				s.Uplink.Measured, s.Uplink.Grow, s.Uplink.GrowSince = 1500, 1500, at(60)
				s.Opened, s.CheckedAt = time.Time{}, at(60)
				return s
			}(),
			wantPlan: mtuPlan{Clamp: fullClamp},
			phase:    mtuClamped,
		},
		{
			name: "grown for relax_after: the clamp goes and the MTU is back",
			s: func() mtuState {
				s := clamped
				s.Tunnel.Measured, s.Tunnel.Grow, s.Tunnel.GrowSince = 1420, 1420, at(60)
				s.Uplink.Measured, s.Uplink.Grow, s.Uplink.GrowSince = 1500, 1500, at(60)
				s.Opened = time.Time{}
				return s
			}(),
			obs:       obs(180, 1328, capped, up(1500)),
			want:      func() mtuState { s := ok; s.Fitted, s.CheckedAt = true, at(180); return s }(),
			wantPlan:  mtuPlan{LinkMTU: 1420},
			wantNotes: []string{"relaxed"},
			phase:     mtuOK,
		},
		{
			name: "a path that dips during relax_after keeps its clamp and starts over",
			s: func() mtuState {
				s := clamped
				s.Tunnel.Measured, s.Tunnel.Grow, s.Tunnel.GrowSince = 1420, 1420, at(60)
				s.Uplink.Measured, s.Uplink.Grow, s.Uplink.GrowSince = 1500, 1500, at(60)
				s.Opened = time.Time{}
				return s
			}(),
			obs: obs(120, 1328, capped, up(1400)),
			want: func() mtuState {
				s := clamped
				s.Opened, s.CheckedAt = at(120), at(120)
				return s
			}(),
			wantPlan:  mtuPlan{Clamp: fullClamp},
			wantNotes: []string{"opened"},
			phase:     mtuClamped,
		},
		{
			name: "a partial growth held relax_after raises the clamp to it",
			s: func() mtuState {
				s := clamped
				s.Tunnel.Measured, s.Tunnel.Grow, s.Tunnel.GrowSince = 1376, 1376, at(60)
				s.Uplink.Measured, s.Uplink.Grow, s.Uplink.GrowSince = 1450, 1450, at(60)
				return s
			}(),
			obs: obs(180, 1328, capped, up(1450)),
			want: func() mtuState {
				s := clamped
				s.Tunnel.Measured, s.Tunnel.Clamp = 1376, 1376
				s.Uplink.Measured, s.Uplink.Clamp = 1450, 1450
				s.MTUSet, s.CheckedAt = 1376, at(180)
				return s
			}(),
			wantPlan:  mtuPlan{Clamp: []netfix.LinkClamp{{Link: "wg0", PathMTU: 1376, MTUBefore: 1420}, {Link: "wwan0", PathMTU: 1450}}, LinkMTU: 1376},
			wantNotes: []string{"raised"},
			phase:     mtuClamped,
		},
		{
			name: "growth under way, and the endpoint does not answer this time: the growth is kept, not reset",
			s: func() mtuState {
				s := clamped
				s.Tunnel.Measured, s.Tunnel.Grow, s.Tunnel.GrowSince = 1420, 1420, at(60)
				s.Uplink.Measured, s.Uplink.Grow, s.Uplink.GrowSince = 1500, 1500, at(60)
				s.Opened = time.Time{}
				return s
			}(),
			obs: obs(70, 1328, capped, silent(up(0))),
			want: func() mtuState {
				s := clamped
				s.Tunnel.Measured, s.Tunnel.Grow, s.Tunnel.GrowSince = 1420, 1420, at(60)
				s.Uplink.Measured, s.Uplink.Grow, s.Uplink.GrowSince = 1500, 1500, at(60)
				s.Opened, s.CheckedAt = time.Time{}, at(70)
				return s
			}(),
			wantPlan: mtuPlan{Clamp: fullClamp},
			phase:    mtuClamped,
		},
		{
			name: "a path below IPv6's minimum MTU cannot be fitted: reported low, no clamp, no MTU",
			obs:  obs(0, 1420, tun(1200), silent(up(0))),
			want: mtuState{Tunnel: mtuWay{Link: "wg0", Full: 1420, Measured: 1200, Clamp: 1200}, Uplink: mtuWay{Link: "wwan0", Full: 1500},
				Opened: at(0), CheckedAt: at(0)},
			wantNotes: []string{"opened"},
			phase:     mtuLow,
		},
		{
			name: "the uplink failed over to another link: the old link's clamp goes with it",
			s:    clamped,
			obs:  obs(2, 1328, capped, pathReading{Link: "eth1", Full: 1500, Largest: 1500}),
			want: func() mtuState {
				s := clamped
				s.Uplink, s.CheckedAt = mtuWay{Link: "eth1", Full: 1500, Measured: 1500}, at(2)
				return s
			}(),
			wantPlan: mtuPlan{Clamp: []netfix.LinkClamp{{Link: "wg0", PathMTU: 1328, MTUBefore: 1420}}},
			phase:    mtuClamped,
		},
		{
			name: "repair turned off while clamped: the clamp goes and the MTU is put back",
			s:    clamped,
			obs:  obs(2, 1328, capped, up(1400)),
			pol:  &mtuPolicy{Repair: false, RelaxAfter: 2 * time.Minute},
			want: func() mtuState {
				s := clamped
				s.Tunnel.Clamp, s.Uplink.Clamp, s.MTUSet, s.MTUBefore, s.CheckedAt = 0, 0, 0, 0, at(2)
				s.Tunnel.Measured = 1328
				return s
			}(),
			wantPlan: mtuPlan{LinkMTU: 1420},
			phase:    mtuLow,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := pol
			if tc.pol != nil {
				p = *tc.pol
			}
			got, plan, notes := nextMTU(tc.s, tc.obs, p)
			if diff := cmp.Diff(tc.want, got, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("state (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.wantPlan, plan, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("plan (-want +got):\n%s", diff)
			}
			var kinds []string
			for _, n := range notes {
				kinds = append(kinds, n.Kind)
				if n.Text == "" {
					t.Errorf("note %s says nothing", n.Kind)
				}
			}
			if diff := cmp.Diff(tc.wantNotes, kinds, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("notes (-want +got):\n%s", diff)
			}
			got.Fitted = len(plan.Clamp) > 0 || plan.LinkMTU > 0 || got.Fitted
			if ph := got.phase(); ph != tc.phase {
				t.Errorf("phase once the plan is on the node = %s, want %s", ph, tc.phase)
			}
		})
	}
}

func TestNextMTUNamesTheBlackhole(t *testing.T) {
	s, _, notes := nextMTU(mtuState{}, mtuObservation{Now: time.Unix(0, 0), LinkMTU: 1420,
		Tunnel: pathReading{Link: "wg0", Full: 1420, Largest: 1328},
		Uplink: pathReading{Link: "wwan0", Full: 1500, Largest: 1400}}, mtuPolicy{Repair: true})
	want := "path-MTU blackhole on wg0: through the tunnel only packets up to 1328 bytes cross (1420 sent), over wwan0 only packets up to 1400 bytes cross (1500 sent); larger ones are lost without an ICMP answer while small ones pass"
	if len(notes) != 1 || notes[0].Text != want {
		t.Errorf("notes = %+v\nwant %q", notes, want)
	}
	if got := mtuWays(s); got != "path MTU 1328 through the tunnel (sends 1420); path MTU 1400 over wwan0 (sends 1500)" {
		t.Errorf("mtuWays = %q", got)
	}
}

// A dark tunnel is never checked: a path MTU measured through a tunnel
// that carries nothing would be nonsense, and whatever was decided stays.
func TestMTUDark(t *testing.T) {
	for _, tc := range []struct {
		name     string
		phases   []peerPhase
		probe    string
		readable bool
		dark     bool
	}{
		{"every peer ok and the probe answers: checked", []peerPhase{peerOK, ""}, "ok", true, false},
		{"no probe target, peers ok: checked", []peerPhase{peerOK}, "", true, false},
		{"a peer down at the same time: not checked", []peerPhase{peerOK, peerDown}, "ok", true, true},
		{"a peer suspect: not checked", []peerPhase{peerSuspect}, "ok", true, true},
		{"the round's probe missed: not checked", []peerPhase{peerOK}, "miss: timeout", true, true},
		{"the round's probe could not be made: not checked", []peerPhase{peerOK}, "error: socket", true, true},
		{"the device cannot be read: not checked", nil, "", false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			why := mtuDark(tc.phases, tc.probe, tc.readable)
			if (why != "") != tc.dark {
				t.Errorf("mtuDark = %q, want dark %v", why, tc.dark)
			}
		})
	}
}

func TestMTUSearch(t *testing.T) {
	if got := mtuSearchSizes(1328, 1329, 16); got != nil {
		t.Errorf("nothing between neighbours: %v", got)
	}
	got := mtuSearchSizes(44, 1420, 16)
	if len(got) != 16 || got[0] <= 44 || got[15] >= 1420 {
		t.Errorf("sizes = %v", got)
	}
	if got := mtuSearchSizes(1320, 1330, 16); !cmp.Equal(got, []int{1321, 1322, 1323, 1324, 1325, 1326, 1327, 1328, 1329}) {
		t.Errorf("a narrow gap is probed byte by byte: %v", got)
	}
	// Three stages find any path MTU between the smallest echo and 1500
	// exactly.
	for _, path := range []int{45, 576, 1280, 1328, 1400, 1419, 1499} {
		lo, hi := 44, 1500
		for range mtuSearchStages {
			var res probes.SizesResult
			for _, s := range mtuSearchSizes(lo, hi, mtuSearchWidth) {
				res.Answers = append(res.Answers, probes.SizeAnswer{Size: s, Answered: s <= path})
			}
			lo, hi = mtuNarrow(lo, hi, res)
		}
		if lo != path || hi != path+1 {
			t.Errorf("path %d: search ended at [%d, %d]", path, lo, hi)
		}
	}
	// A smaller echo lost while a larger crossed was lost, not too large.
	res := probes.SizesResult{Answers: []probes.SizeAnswer{{Size: 1300}, {Size: 1320, Answered: true}, {Size: 1340}}}
	if lo, hi := mtuNarrow(1280, 1420, res); lo != 1320 || hi != 1340 {
		t.Errorf("narrow = [%d, %d], want [1320, 1340]", lo, hi)
	}
}

func TestTunnelViaUplink(t *testing.T) {
	for _, tc := range []struct{ uplink, mtu, overhead, want int }{
		{1500, 1420, 60, 1420}, // the whole tunnel MTU fits
		{1400, 1420, 60, 1328}, // the lab's blackhole: 1340 of room, padded to 16
		{1400, 1420, 80, 1312}, // an IPv6 endpoint
		{1450, 1420, 60, 1376},
		{50, 1420, 60, 0},
	} {
		if got := tunnelViaUplink(tc.uplink, tc.mtu, tc.overhead); got != tc.want {
			t.Errorf("tunnelViaUplink(%d, %d, %d) = %d, want %d", tc.uplink, tc.mtu, tc.overhead, got, tc.want)
		}
	}
}
