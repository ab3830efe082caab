package agent

import (
	"context"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/edgeheal/edgeheal/agent/core/coretest"
	"github.com/edgeheal/edgeheal/netfix"
	"github.com/edgeheal/edgeheal/netfix/netfixtest"
)

func TestCleanupRemovesTheClampTablesAndPutsBackTheMTUsEdgehealLowered(t *testing.T) {
	ctx := context.Background()
	os := coretest.OS()
	nft := os.Nftables.(*coretest.Nftables).NFT
	mtus := os.MTU.(*netfixtest.MTUs)
	mtus.Set("wg0", 1328)        // as edgeheal set it
	mtus.Set("flannel-wg", 1420) // set back by Flannel since: theirs
	for _, c := range []netfix.MSSClamp{
		{Table: netfix.ClampTable("wg0"), Links: []netfix.LinkClamp{{Link: "wg0", PathMTU: 1328, MTUBefore: 1420}, {Link: "wwan0", PathMTU: 1400}}},
		{Table: netfix.ClampTable("flannel-wg"), Links: []netfix.LinkClamp{{Link: "flannel-wg", PathMTU: 1328, MTUBefore: 1450}}},
	} {
		if _, err := netfix.EnsureMSSClamp(ctx, nft, c, false); err != nil {
			t.Fatal(err)
		}
	}
	rs, err := Cleanup(ctx, os)
	if err != nil {
		t.Fatal(err)
	}
	var changes []string
	for _, r := range rs {
		changes = append(changes, r.Changes...)
	}
	want := []string{"mtu 1328 -> 1420", "removed table inet edgeheal-wg0", "removed table inet edgeheal-flannel-wg"}
	if diff := cmp.Diff(want, changes); diff != "" {
		t.Errorf("changes (-want +got):\n%s", diff)
	}
	if mtus.MTU("wg0") != 1420 || mtus.MTU("flannel-wg") != 1420 || len(nft.Tables()) != 0 {
		t.Errorf("after: wg0 %d, flannel-wg %d, tables %v", mtus.MTU("wg0"), mtus.MTU("flannel-wg"), nft.Tables())
	}
	if rs, err := Cleanup(ctx, os); err != nil || len(rs) != 0 {
		t.Errorf("again = %+v, %v; want nothing to do", rs, err)
	}
}

// What a tunnel no longer configured left goes, with the MTU it lowered;
// what a configured tunnel has stays for its monitor.
func TestForgetRemovesOnlyWhatTunnelsNoLongerConfiguredLeft(t *testing.T) {
	ctx := context.Background()
	os := coretest.OS()
	nft := os.Nftables.(*coretest.Nftables).NFT
	mtus := os.MTU.(*netfixtest.MTUs)
	mtus.Set("wg0", 1328)
	mtus.Set("wg-old", 1328)
	for _, c := range []netfix.MSSClamp{
		{Table: netfix.ClampTable("wg0"), Links: []netfix.LinkClamp{{Link: "wg0", PathMTU: 1328, MTUBefore: 1420}}},
		{Table: netfix.ClampTable("wg-old"), Links: []netfix.LinkClamp{{Link: "wg-old", PathMTU: 1328, MTUBefore: 1420}, {Link: "wwan0", PathMTU: 1400}}},
	} {
		if _, err := netfix.EnsureMSSClamp(ctx, nft, c, false); err != nil {
			t.Fatal(err)
		}
	}
	for _, tn := range []string{"wg0", "wg-old"} {
		if _, err := netfix.EnsureTrafficWatch(ctx, nft, netfix.TrafficWatch{Table: netfix.WatchTable(tn), Links: []string{tn}}, false); err != nil {
			t.Fatal(err)
		}
	}
	all := nft.Tables()
	if rs, err := Forget(ctx, os, []string{"wg0"}, true); err != nil || len(rs) != 3 || len(nft.Tables()) != len(all) || mtus.MTU("wg-old") != 1328 {
		t.Errorf("dry run = %+v, %v; tables %v, wg-old MTU %d; want three changes said and none made", rs, err, nft.Tables(), mtus.MTU("wg-old"))
	}
	rs, err := Forget(ctx, os, []string{"wg0"}, false)
	if err != nil {
		t.Fatal(err)
	}
	var changes []string
	for _, r := range rs {
		changes = append(changes, r.Changes...)
	}
	want := []string{"mtu 1328 -> 1420", "clamp wg-old removed (path MTU was 1328)", "clamp wwan0 removed (path MTU was 1400)", "table edgeheal-wg-old/watch removed"}
	if diff := cmp.Diff(want, changes); diff != "" {
		t.Errorf("changes (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{netfix.ClampTable("wg0"), netfix.WatchTable("wg0")}, nft.Tables()); diff != "" || mtus.MTU("wg0") != 1328 || mtus.MTU("wg-old") != 1420 {
		t.Errorf("after: tables (-want +got):\n%s\nwg0 MTU %d, wg-old %d", diff, mtus.MTU("wg0"), mtus.MTU("wg-old"))
	}
	if rs, err := Forget(ctx, os, []string{"wg0"}, false); err != nil || len(rs) != 0 {
		t.Errorf("again = %+v, %v; want nothing to do", rs, err)
	}
}
