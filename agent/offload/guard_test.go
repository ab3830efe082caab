package offload

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/edgeheal/edgeheal/agent/core/coretest"
	"github.com/edgeheal/edgeheal/configs"
	"github.com/edgeheal/edgeheal/netfix"
	"github.com/edgeheal/edgeheal/netfix/netfixtest"
	"github.com/edgeheal/edgeheal/wire"
)

type guardRig struct {
	nic   *netfixtest.NIC
	links *coretest.Links
	ev    *coretest.Events
	g     *Guard

	mu      sync.Mutex
	changed []string // OnChanged calls
}

func (r *guardRig) onChanged() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.changed...)
}

func newGuardRig(t *testing.T, uplinks []configs.Uplink, dryRun bool) *guardRig {
	t.Helper()
	r := &guardRig{nic: netfixtest.NewNIC(), links: coretest.NewLinks(), ev: &coretest.Events{}}
	os := coretest.OS()
	os.NIC, os.Links = r.nic, r.links
	r.g = New(Config{
		Uplinks: uplinks, DryRun: dryRun, Floor: 10 * time.Second,
		OS: os, Log: slog.New(slog.DiscardHandler), Emit: r.ev.Emit,
		OnChanged: func(link string) {
			r.mu.Lock()
			r.changed = append(r.changed, link)
			r.mu.Unlock()
		},
	})
	return r
}

// plug adds a link with fresh veth features to the NIC, then announces it.
func (r *guardRig) plug(name string) {
	r.nic.SetLink(name, netfixtest.Veth())
	r.links.Add(name)
}

func (r *guardRig) unplug(name string) {
	r.nic.RemoveLink(name)
	r.links.Remove(name)
}

// run starts the guard and returns a stop func that cancels it and checks
// that Run returned nil with the subscription ended.
func (r *guardRig) run(t *testing.T) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.g.Run(ctx) }()
	synctest.Wait()
	return func() {
		t.Helper()
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run returned %v after cancel, want nil", err)
		}
		if n := r.links.Running(); n != 0 {
			t.Errorf("%d subscription goroutines still running after Run returned", n)
		}
	}
}

func txOn(nic *netfixtest.NIC, link string) []string {
	var on []string
	for n, st := range nic.Features(link) {
		if strings.HasPrefix(n, "tx-checksum-") && st.Active {
			on = append(on, n)
		}
	}
	slices.Sort(on)
	return on
}

func checkStates(cs []wire.Check) []string {
	var out []string
	for _, c := range cs {
		out = append(out, fmt.Sprintf("%s %s healthy=%v", c.Target, c.State, c.Healthy))
	}
	return out
}

func TestOffloadGuardEnforcesAtStartOnSelectedLinksOnly(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newGuardRig(t, []configs.Uplink{{Name: "wwan*", TxChecksum: "off"}}, false)
		r.plug("wwan0")
		r.plug("eth0")
		stop := r.run(t)
		defer stop()

		if on := txOn(r.nic, "wwan0"); len(on) != 0 {
			t.Errorf("wwan0 still has %v on", on)
		}
		if diff := cmp.Diff([]string{"tx-checksum-ip-generic", "tx-checksum-sctp"}, txOn(r.nic, "eth0")); diff != "" {
			t.Errorf("eth0, not selected, was changed (-want +got):\n%s", diff)
		}
		want := []string{"offload-drift wwan0", "action wwan0 offload-off changed"}
		if diff := cmp.Diff(want, r.ev.Brief()); diff != "" {
			t.Errorf("events (-want +got):\n%s", diff)
		}
		if diff := cmp.Diff([]string{"wwan0"}, r.onChanged()); diff != "" {
			t.Errorf("OnChanged calls (-want +got):\n%s", diff)
		}
		drift := r.ev.All()[0]
		if diff := cmp.Diff([]string{"tx-checksum-ip-generic", "tx-checksum-sctp"}, drift.Evidence["features"]); diff != "" {
			t.Errorf("drift event features (-want +got):\n%s", diff)
		}
		if drift.Evidence["trigger"] != "start" || drift.Time.IsZero() {
			t.Errorf("drift event trigger %v at %v, want start at a time", drift.Evidence["trigger"], drift.Time)
		}
		if diff := cmp.Diff([]string{"wwan0 ok healthy=true"}, checkStates(r.g.Checks())); diff != "" {
			t.Errorf("checks (-want +got):\n%s", diff)
		}
	})
}

func TestOffloadGuardReenforcesAReplugWithoutWaitingForTheFloor(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newGuardRig(t, []configs.Uplink{{Name: "wwan0"}}, false)
		r.plug("wwan0")
		stop := r.run(t)
		defer stop()
		start := time.Now()

		for i := range 5 {
			r.unplug("wwan0")
			r.plug("wwan0") // a fresh link: offload on again
			synctest.Wait()
			if on := txOn(r.nic, "wwan0"); len(on) != 0 {
				t.Fatalf("re-plug %d: %v still on", i, on)
			}
		}
		if d := time.Since(start); d != 0 {
			t.Errorf("the fake clock moved %v: the fix waited for a timer instead of the event", d)
		}
		// One drift and one fix per plug: start + 5 re-plugs.
		want := slices.Repeat([]string{"offload-drift wwan0", "action wwan0 offload-off changed"}, 6)
		if diff := cmp.Diff(want, r.ev.Brief()); diff != "" {
			t.Errorf("events (-want +got):\n%s", diff)
		}
		for _, ev := range r.ev.All()[2:] {
			if ev.Kind == wire.EventOffloadDrift && ev.Evidence["trigger"] != "link-appeared" {
				t.Errorf("re-plug drift trigger = %v, want link-appeared", ev.Evidence["trigger"])
			}
		}
	})
}

func TestOffloadGuardFixesAFeatureTurnedBackOn(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newGuardRig(t, []configs.Uplink{{Name: "wwan0"}}, false)
		r.plug("wwan0")
		stop := r.run(t)
		defer stop()

		// With a change notification it is fixed at once. (More than a
		// minute apart: quicker flips are a fight, reported as one.)
		time.Sleep(fightWindow + 5*time.Second)                   // 65 s: between two floors
		r.nic.SetFeature("wwan0", "tx-checksum-ip-generic", true) // someone's ethtool -K
		r.links.Touch("wwan0")
		synctest.Wait()
		if on := txOn(r.nic, "wwan0"); len(on) != 0 {
			t.Errorf("after a change notification: %v still on", on)
		}
		// Without one, the floor finds it: set right after the floor at
		// 120 s, so fixed at 130 s, 65 s after the last fix.
		time.Sleep(55 * time.Second)
		synctest.Wait()
		r.nic.SetFeature("wwan0", "tx-checksum-sctp", true)
		time.Sleep(9 * time.Second)
		synctest.Wait()
		if on := txOn(r.nic, "wwan0"); len(on) != 1 {
			t.Fatalf("fixed before the floor, without an event: %v", on)
		}
		time.Sleep(time.Second)
		synctest.Wait()
		if on := txOn(r.nic, "wwan0"); len(on) != 0 {
			t.Errorf("%v still on after the floor", on)
		}
		evs := r.ev.All()
		var drifts []string
		for _, ev := range evs {
			if ev.Kind == wire.EventOffloadDrift {
				drifts = append(drifts, fmt.Sprint(ev.Evidence["features"], " ", ev.Evidence["trigger"]))
			}
		}
		want := []string{
			"[tx-checksum-ip-generic tx-checksum-sctp] start",
			"[tx-checksum-ip-generic] link-changed",
			"[tx-checksum-sctp] periodic",
		}
		if diff := cmp.Diff(want, drifts); diff != "" {
			t.Errorf("drift events (-want +got):\n%s", diff)
		}
	})
}

func TestOffloadGuardDryRunChangesNothingAndReportsOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newGuardRig(t, []configs.Uplink{{Name: "wwan0"}}, true)
		r.plug("wwan0")
		stop := r.run(t)
		defer stop()
		time.Sleep(35 * time.Second) // three floors
		synctest.Wait()

		if diff := cmp.Diff([]string{"tx-checksum-ip-generic", "tx-checksum-sctp"}, txOn(r.nic, "wwan0")); diff != "" {
			t.Errorf("dry run changed features (-want +got):\n%s", diff)
		}
		for _, c := range r.nic.Calls() {
			if strings.HasPrefix(c, "Change") {
				t.Errorf("dry run called %s", c)
			}
		}
		want := []string{"offload-drift wwan0", "action wwan0 offload-off dry-run"}
		if diff := cmp.Diff(want, r.ev.Brief()); diff != "" {
			t.Errorf("events (-want +got):\n%s", diff)
		}
		if got := r.onChanged(); len(got) != 0 {
			t.Errorf("OnChanged called %v in a dry run, want never: nothing changed", got)
		}
		if diff := cmp.Diff([]string{"wwan0 drift healthy=false"}, checkStates(r.g.Checks())); diff != "" {
			t.Errorf("checks (-want +got):\n%s", diff)
		}
	})
}

func TestOffloadGuardReportsWhatItCannotFix(t *testing.T) {
	tests := []struct {
		name       string
		setup      func(r *guardRig)
		features   map[string]string
		wantEvents []string
		wantCheck  []string
		wantTxOn   []string
	}{
		{
			name: "a change the driver accepts and does not apply: degraded, one failed action",
			setup: func(r *guardRig) {
				r.nic.SetLink("wwan0", netfixtest.Veth())
				r.nic.IgnoreChanges("wwan0", true)
			},
			wantEvents: []string{"offload-drift wwan0", "action wwan0 offload-off failed"},
			wantCheck:  []string{"wwan0 degraded healthy=false"},
			wantTxOn:   []string{"tx-checksum-ip-generic", "tx-checksum-sctp"},
		},
		{
			name: "a tx checksum feature fixed on by the driver: reported, not changed",
			setup: func(r *guardRig) {
				fs := netfixtest.Veth()
				fs["tx-checksum-ipv4"] = netfix.FeatureState{Active: true, Requested: true}
				r.nic.SetLink("wwan0", fs)
			},
			wantEvents: []string{"offload-drift wwan0", "action wwan0 offload-off changed", "offload-drift wwan0"},
			wantCheck:  []string{"wwan0 fixed healthy=false"},
			wantTxOn:   []string{"tx-checksum-ipv4"},
		},
		{
			name:       "an unknown extra feature: an error check, and tx checksum still off",
			setup:      func(r *guardRig) { r.nic.SetLink("wwan0", netfixtest.Veth()) },
			features:   map[string]string{"tx-csum": "off"},
			wantEvents: []string{"offload-drift wwan0", "action wwan0 offload-off failed"},
			wantCheck:  []string{"wwan0 error healthy=false"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				r := newGuardRig(t, []configs.Uplink{{Name: "wwan0", Features: tt.features}}, false)
				tt.setup(r)
				r.links.Add("wwan0")
				stop := r.run(t)
				defer stop()
				time.Sleep(25 * time.Second) // two floors: no repeated events
				synctest.Wait()
				if diff := cmp.Diff(tt.wantEvents, r.ev.Brief()); diff != "" {
					t.Errorf("events (-want +got):\n%s", diff)
				}
				if diff := cmp.Diff(tt.wantCheck, checkStates(r.g.Checks())); diff != "" {
					t.Errorf("checks (-want +got):\n%s", diff)
				}
				if diff := cmp.Diff(tt.wantTxOn, txOn(r.nic, "wwan0")); diff != "" {
					t.Errorf("tx checksum features on (-want +got):\n%s", diff)
				}
			})
		})
	}
}

func TestOffloadGuardReportsEveryDriftDespiteAConfigError(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newGuardRig(t, []configs.Uplink{{Name: "wwan0", Features: map[string]string{"tx-csum": "off"}}}, false)
		r.plug("wwan0")
		stop := r.run(t)
		defer stop()
		for range 2 {
			time.Sleep(fightWindow) // quicker flips are a fight, reported as one
			r.nic.SetFeature("wwan0", "tx-checksum-ip-generic", true)
			r.links.Touch("wwan0")
			synctest.Wait()
		}
		var drifts int
		for _, ev := range r.ev.All() {
			if ev.Kind == wire.EventOffloadDrift {
				drifts++
			}
		}
		if drifts != 3 {
			t.Errorf("%d drift events, want 3 (start and each time the feature came back): %q", drifts, r.ev.Brief())
		}
		if on := txOn(r.nic, "wwan0"); len(on) != 0 {
			t.Errorf("%v still on", on)
		}
	})
}

func TestOffloadGuardFollowsTheDefaultRoute(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newGuardRig(t, []configs.Uplink{{Name: configs.DefaultRoute}}, false)
		r.plug("eth0")
		r.plug("wwan0")
		r.links.SetDefaultRoute("eth0")
		stop := r.run(t)
		defer stop()
		if on := txOn(r.nic, "eth0"); len(on) != 0 {
			t.Errorf("eth0 (default route) still has %v on", on)
		}
		if on := txOn(r.nic, "wwan0"); len(on) == 0 {
			t.Errorf("wwan0 (no default route) was changed")
		}

		r.links.SetDefaultRoute("wwan0") // failover to the modem
		synctest.Wait()
		if on := txOn(r.nic, "wwan0"); len(on) != 0 {
			t.Errorf("wwan0 (now the default route) still has %v on", on)
		}
		if diff := cmp.Diff([]string{"wwan0 ok healthy=true"}, checkStates(r.g.Checks())); diff != "" {
			t.Errorf("checks (-want +got):\n%s", diff)
		}
	})
}

func TestOffloadGuardResubscribesWhenTheSubscriptionBreaks(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newGuardRig(t, []configs.Uplink{{Name: "wwan0"}}, false)
		r.plug("wwan0")
		stop := r.run(t)
		defer stop()

		r.links.Break()
		synctest.Wait()
		// Missed while the subscription was down: no event reaches the guard.
		r.nic.SetFeature("wwan0", "tx-checksum-ip-generic", true)
		time.Sleep(time.Second) // the first retry, well before the 10 s floor
		synctest.Wait()
		if on := txOn(r.nic, "wwan0"); len(on) != 0 {
			t.Errorf("%v still on after resubscribing", on)
		}
		n := r.links.Subscribes()
		if n != 2 {
			t.Errorf("Subscribe called %d times, want 2", n)
		}
		r.unplug("wwan0")
		r.plug("wwan0")
		synctest.Wait()
		if on := txOn(r.nic, "wwan0"); len(on) != 0 {
			t.Errorf("the new subscription missed a re-plug: %v on", on)
		}
	})
}

func TestOffloadGuardKeepsWorkingWithoutASubscription(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newGuardRig(t, []configs.Uplink{{Name: "wwan0"}}, false)
		r.links.SetSubscribeErr(errors.New("netlink: permission denied"))
		r.plug("wwan0")
		stop := r.run(t)
		defer stop()
		if on := txOn(r.nic, "wwan0"); len(on) != 0 {
			t.Errorf("not enforced at start without a subscription: %v", on)
		}
		r.nic.SetFeature("wwan0", "tx-checksum-ip-generic", true)
		time.Sleep(10 * time.Second)
		synctest.Wait()
		if on := txOn(r.nic, "wwan0"); len(on) != 0 {
			t.Errorf("the floor did not fix %v", on)
		}
	})
}

func TestOffloadGuardEnforceIsOnePass(t *testing.T) {
	r := newGuardRig(t, []configs.Uplink{{Name: "wwan*"}, {Name: "ppp0"}}, false)
	r.plug("wwan0")
	r.plug("wwan1")
	r.nic.RemoveLink("wwan1") // listed, but gone before its features are read

	res, err := r.g.Enforce(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	want := []netfix.Result{{Action: "offload-off", Target: "wwan0", Changed: true, Changes: []string{
		"tx-checksum-ip-generic: on -> off", "tx-checksum-sctp: on -> off"}}}
	if diff := cmp.Diff(want, res); diff != "" {
		t.Errorf("results (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"wwan0 ok healthy=true", "ppp0 absent healthy=true"}, checkStates(r.g.Checks())); diff != "" {
		t.Errorf("checks (-want +got):\n%s", diff)
	}

	r.links.SetListErr(errors.New("netlink: interrupted"))
	if _, err := r.g.Enforce(context.Background()); err == nil {
		t.Error("no error when the links could not be listed")
	}
	if diff := cmp.Diff([]string{"wwan0 ok healthy=true", "ppp0 absent healthy=true"}, checkStates(r.g.Checks())); diff != "" {
		t.Errorf("checks changed after a pass that observed nothing (-want +got):\n%s", diff)
	}
}
