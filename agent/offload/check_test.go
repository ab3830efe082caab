package offload

import (
	"context"
	"strings"
	"testing"
	"testing/synctest"

	"github.com/google/go-cmp/cmp"

	"github.com/edgeheal/edgeheal/agent/core/coretest"
	"github.com/edgeheal/edgeheal/configs"
	"github.com/edgeheal/edgeheal/netfix"
	"github.com/edgeheal/edgeheal/netfix/netfixtest"
	"github.com/edgeheal/edgeheal/wire"
)

func vethFeatures(ipGenericOn bool) map[string]netfix.FeatureState {
	on := netfix.FeatureState{Active: true, Requested: true, Changeable: true}
	off := netfix.FeatureState{Changeable: true}
	fixedOff := netfix.FeatureState{}
	ipGeneric := off
	if ipGenericOn {
		ipGeneric = on
	}
	return map[string]netfix.FeatureState{
		"rx-gro": off, "tx-checksum-fcoe-crc": fixedOff, "tx-checksum-ip-generic": ipGeneric,
		"tx-checksum-ipv4": fixedOff, "tx-checksum-ipv6": fixedOff, "tx-checksum-sctp": off,
		"tx-tcp-segmentation": on,
	}
}

// checkGuard is a guard over a fake NIC and links, for its one-shot Check.
func checkGuard(uplinks []configs.Uplink, links map[string]map[string]netfix.FeatureState) (*Guard, *netfixtest.NIC) {
	os := coretest.OS()
	nic, fl := netfixtest.NewNIC(), coretest.NewLinks()
	for name, fs := range links {
		nic.SetLink(name, fs)
		fl.Add(name)
	}
	os.NIC, os.Links = nic, fl
	return New(Config{Uplinks: uplinks, OS: os}), nic
}

func TestOffloadCheckIsTheReconcilersDryRun(t *testing.T) {
	g, nic := checkGuard([]configs.Uplink{
		{Name: "wwan*", TxChecksum: "off", Features: map[string]string{"gro": "on"}},
		{Name: "eth0", TxChecksum: "off"},
		{Name: "ppp0", TxChecksum: "off"},
		{Name: "lo", TxChecksum: "leave"},
	}, map[string]map[string]netfix.FeatureState{"wwan0": vethFeatures(true), "eth0": vethFeatures(false)})
	rep, err := g.Check(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if rep.Healthy {
		t.Error("healthy with tx-checksum-ip-generic on on wwan0")
	}
	var got strings.Builder
	if err := rep.WriteText(&got); err != nil {
		t.Fatal(err)
	}
	want := `uplink eth0 (selected by eth0): ok
  tx-checksum-fcoe-crc:    off [fixed]
  tx-checksum-ip-generic:  off
  tx-checksum-ipv4:        off [fixed]
  tx-checksum-ipv6:        off [fixed]
  tx-checksum-sctp:        off
uplink wwan0 (selected by wwan*): WRONG: rx-gro, tx-checksum-ip-generic
  rx-gro:                  off  want on
  tx-checksum-fcoe-crc:    off [fixed]
  tx-checksum-ip-generic:  on  want off
  tx-checksum-ipv4:        off [fixed]
  tx-checksum-ipv6:        off [fixed]
  tx-checksum-sctp:        off
uplink ppp0: no link matches
`
	if diff := cmp.Diff(want, got.String()); diff != "" {
		t.Errorf("text (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"eth0 ok healthy=true", "wwan0 drift healthy=false", "ppp0 absent healthy=true"},
		checkStates(rep.Checks())); diff != "" {
		t.Errorf("checks (-want +got):\n%s", diff)
	}
	for _, c := range nic.Calls() {
		if strings.HasPrefix(c, "Change") {
			t.Errorf("the check changed a feature: %s", c)
		}
	}
}

func TestOffloadCheckHealthyWhenEverythingIsOff(t *testing.T) {
	g, _ := checkGuard([]configs.Uplink{{Name: "wwan0", TxChecksum: "off"}}, map[string]map[string]netfix.FeatureState{"wwan0": vethFeatures(false)})
	rep, err := g.Check(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if !rep.Healthy {
		t.Errorf("unhealthy: %+v", rep)
	}
}

// edgeheal check and the daemon run the same reconciler, so a conflicting
// offload config is the same conflict, with the same words, in both.
func TestCheckAndDaemonReportTheSameOffloadConflict(t *testing.T) {
	uplinks := []configs.Uplink{{Name: "wwan0", TxChecksum: "off", Features: map[string]string{"tx-checksum-ip-generic": "on", "tx-csum": "off"}}}
	g, _ := checkGuard(uplinks, map[string]map[string]netfix.FeatureState{"wwan0": vethFeatures(true)})
	rep, err := g.Check(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	oneShot := rep.Checks()[0]

	var daemon wire.Check
	synctest.Test(t, func(t *testing.T) {
		r := newGuardRig(t, uplinks, false)
		r.nic.SetLink("wwan0", vethFeatures(true))
		r.links.Add("wwan0")
		stop := r.run(t)
		defer stop()
		daemon = r.g.Checks()[0]
	})
	for _, c := range []wire.Check{oneShot, daemon} {
		if c.State != uplinkError || c.Healthy ||
			!strings.Contains(c.Detail, `conflicting feature settings: tx-checksum-ip-generic: on (from "tx-checksum-ip-generic") but tx_checksum is off`) ||
			!strings.Contains(c.Detail, `unknown feature "tx-csum"`) {
			t.Errorf("check %+v, want state error naming the conflict and the unknown feature", c)
		}
	}
	if oneShot.Detail != daemon.Detail {
		t.Errorf("edgeheal check says %q, the daemon %q", oneShot.Detail, daemon.Detail)
	}
	if daemon.Uplink == nil || daemon.Uplink.Features["tx-checksum-ip-generic"] != "on" {
		t.Errorf("the daemon's check shows %+v, want the guarded features as read", daemon.Uplink)
	}
}
