package offload

import (
	"fmt"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/edgeheal/edgeheal/agent/core"
	"github.com/edgeheal/edgeheal/agent/recorder"
	"github.com/edgeheal/edgeheal/configs"
	"github.com/edgeheal/edgeheal/wire"
)

// TestOffloadGuardReportsAFightAsOneIncident: something turns the offload
// back on every 100 ms for 30 s. Each flip is fixed at once, but the fight
// is one incident (one drift event, which alone carries an evidence
// bundle), a started and an ended report with the count, and a nudge to
// the tunnels at most every 10 s.
func TestOffloadGuardReportsAFightAsOneIncident(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newGuardRig(t, []configs.Uplink{{Name: "wwan0"}}, false)
		r.plug("wwan0")
		stop := r.run(t)
		defer stop()
		time.Sleep(2 * fightWindow) // the start's own fix is long past
		synctest.Wait()
		before := len(r.ev.All())
		r.mu.Lock()
		r.changed = nil
		r.mu.Unlock()

		start := time.Now()
		flips, stillOn := 0, 0
		for time.Since(start) < 30*time.Second {
			r.nic.SetFeature("wwan0", "tx-checksum-ip-generic", true)
			r.links.Touch("wwan0")
			synctest.Wait()
			flips++
			if len(txOn(r.nic, "wwan0")) != 0 {
				stillOn++
			}
			time.Sleep(100 * time.Millisecond)
		}
		if stillOn != 0 {
			t.Errorf("offload still on after %d of %d flips", stillOn, flips)
		}
		time.Sleep(fightWindow + 20*time.Second) // calm: the floor sees no drift for a minute
		synctest.Wait()

		var kinds []string
		var ended core.Event
		for _, ev := range r.ev.All()[before:] {
			kinds = append(kinds, ev.Kind+"/"+ev.Result)
			if ev.Kind == wire.EventOffloadFight && ev.Result == "ended" {
				ended = ev
			}
		}
		want := []string{wire.EventOffloadDrift + "/", wire.EventAction + "/changed", wire.EventOffloadFight + "/started", wire.EventOffloadFight + "/ended"}
		if fmt.Sprint(kinds) != fmt.Sprint(want) {
			t.Errorf("events %v, want %v", kinds, want)
		}
		if !strings.Contains(ended.Summary, fmt.Sprintf("turned back on %d times", flips-1)) {
			t.Errorf("ended %q does not count the %d flips after the first", ended.Summary, flips-1)
		}
		opened := 0
		for _, ev := range r.ev.All()[before:] {
			if recorder.OpensIncident(ev) {
				opened++
			}
		}
		if opened != 1 {
			t.Errorf("%d events open an incident (each gets an evidence bundle), want 1", opened)
		}
		r.mu.Lock()
		nudges := len(r.changed)
		r.mu.Unlock()
		if nudges < 1 || nudges > 4 {
			t.Errorf("%d tunnel nudges in a 30 s fight, want 1 to 4 (at most one per %s)", nudges, nudgeEvery)
		}
	})
}

func TestOffloadFightReportsOngoingFightsOnceAMinute(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	var f fight
	var got []string
	for i := range 1500 { // every 100 ms for 150 s
		now := t0.Add(time.Duration(i) * 100 * time.Millisecond)
		news, ev := f.fix("wwan0", now)
		if news {
			got = append(got, "news")
		}
		if ev != nil {
			got = append(got, ev.Result+" "+ev.Summary)
		}
	}
	if len(got) != 4 || got[0] != "news" || !strings.HasPrefix(got[1], "started") ||
		!strings.Contains(got[2], "turned back on 600 times in 1m0s") || !strings.Contains(got[3], "turned back on 600 times in 1m0s") {
		t.Errorf("reports %q; want news, started, then one per minute with the count", got)
	}
	if ev := f.calm("wwan0", t0.Add(150*time.Second+30*time.Second)); ev != nil {
		t.Errorf("ended 30 s after the last flip: %v", ev.Summary)
	}
	if ev := f.calm("wwan0", t0.Add(150*time.Second+fightWindow)); ev == nil || ev.Result != "ended" || !strings.Contains(ev.Summary, "1499 times") {
		t.Errorf("calm after a minute = %+v, want ended with 1499 flips after the first", ev)
	}
	if news, _ := f.fix("wwan0", t0.Add(10*time.Minute)); !news {
		t.Error("a flip long after the fight is not news")
	}
}
