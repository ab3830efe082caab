package netfix_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/nftables"
	"github.com/google/nftables/userdata"

	"github.com/edgeheal/edgeheal/netfix"
	"github.com/edgeheal/edgeheal/netfix/netfixtest"
)

func TestEnsureMSSClamp(t *testing.T) {
	ctx := context.Background()
	tunnel := netfix.LinkClamp{Link: "flannel-wg", PathMTU: 1328, MTUBefore: 1420}
	uplink := netfix.LinkClamp{Link: "wwan0", PathMTU: 1400}
	table := netfix.ClampTable("flannel-wg")
	for _, tc := range []struct {
		name        string
		have, want  []netfix.LinkClamp
		wantChanged bool
		wantChanges []string
		wantFlushes int
	}{
		{name: "a first clamp creates the table whole", want: []netfix.LinkClamp{uplink, tunnel}, wantChanged: true,
			wantChanges: []string{"clamp flannel-wg: TCP MSS 1288/1268 (path MTU 1328)", "clamp wwan0: TCP MSS 1360/1340 (path MTU 1400)"}, wantFlushes: 1},
		{name: "the same clamp again changes nothing", have: []netfix.LinkClamp{tunnel, uplink}, want: []netfix.LinkClamp{uplink, tunnel}},
		{name: "a grown path replaces the table", have: []netfix.LinkClamp{tunnel, uplink},
			want: []netfix.LinkClamp{{Link: "flannel-wg", PathMTU: 1376, MTUBefore: 1420}, uplink}, wantChanged: true,
			wantChanges: []string{"clamp flannel-wg: path MTU 1328 -> 1376 (TCP MSS 1336/1316)"}, wantFlushes: 1},
		{name: "a link whose path is back is dropped", have: []netfix.LinkClamp{tunnel, uplink}, want: []netfix.LinkClamp{tunnel},
			wantChanged: true, wantChanges: []string{"clamp wwan0 removed (path MTU was 1400)"}, wantFlushes: 1},
		{name: "no links left removes the table", have: []netfix.LinkClamp{tunnel}, wantChanged: true,
			wantChanges: []string{"clamp flannel-wg removed (path MTU was 1328)"}, wantFlushes: 1},
		{name: "no table and no links is nothing to do"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			nft := netfixtest.NewNFT()
			if tc.have != nil {
				if _, err := netfix.EnsureMSSClamp(ctx, nft, netfix.MSSClamp{Table: table, Links: tc.have}, false); err != nil {
					t.Fatal(err)
				}
			}
			before := len(nft.Calls())
			r, err := netfix.EnsureMSSClamp(ctx, nft, netfix.MSSClamp{Table: table, Links: tc.want}, false)
			if err != nil {
				t.Fatalf("EnsureMSSClamp: %v", err)
			}
			if r.Changed != tc.wantChanged {
				t.Errorf("Changed = %v, want %v", r.Changed, tc.wantChanged)
			}
			if diff := cmp.Diff(tc.wantChanges, r.Changes); diff != "" {
				t.Errorf("changes (-want +got):\n%s", diff)
			}
			if got := len(nft.Calls()) - before; got != tc.wantFlushes {
				t.Errorf("%d flushes, want %d: %v", got, tc.wantFlushes, nft.Calls()[before:])
			}
			got, exists, err := netfix.ReadMSSClamp(nft, table)
			if err != nil {
				t.Fatal(err)
			}
			if exists != (len(tc.want) > 0) {
				t.Errorf("table exists = %v with %d links wanted", exists, len(tc.want))
			}
			want := slices.Clone(tc.want)
			slices.SortFunc(want, func(a, b netfix.LinkClamp) int { return strings.Compare(a.Link, b.Link) })
			if len(want) == 0 {
				want = nil
			}
			if diff := cmp.Diff(want, got.Links); diff != "" {
				t.Errorf("table reads back (-want +got):\n%s", diff)
			}
		})
	}
}

func TestEnsureMSSClampRulesSayWhatTheyDo(t *testing.T) {
	nft := netfixtest.NewNFT()
	table := netfix.ClampTable("wg0")
	if _, err := netfix.EnsureMSSClamp(context.Background(), nft, netfix.MSSClamp{Table: table,
		Links: []netfix.LinkClamp{{Link: "wg0", PathMTU: 1328, MTUBefore: 1420}}}, false); err != nil {
		t.Fatal(err)
	}
	var comments []string
	for _, chain := range []string{"mss-in", "mss-out"} {
		for _, r := range nft.Rules(table, chain) {
			c, _ := userdata.GetString(r.UserData, userdata.TypeComment)
			comments = append(comments, c)
			if len(r.Exprs) != 13 {
				t.Errorf("rule %q has %d expressions, want 13", c, len(r.Exprs))
			}
		}
	}
	want := []string{
		"edgeheal mss-in wg0 ipv4 mss=1288 path_mtu=1328 mtu_before=1420",
		"edgeheal mss-in wg0 ipv6 mss=1268 path_mtu=1328 mtu_before=1420",
		"edgeheal mss-out wg0 ipv4 mss=1288 path_mtu=1328 mtu_before=1420",
		"edgeheal mss-out wg0 ipv6 mss=1268 path_mtu=1328 mtu_before=1420",
	}
	if diff := cmp.Diff(want, comments); diff != "" {
		t.Errorf("rule comments (-want +got):\n%s", diff)
	}
}

func TestEnsureMSSClampDryRunAndFailures(t *testing.T) {
	ctx := context.Background()
	want := netfix.MSSClamp{Table: netfix.ClampTable("wg0"), Links: []netfix.LinkClamp{{Link: "wg0", PathMTU: 1328}}}
	t.Run("a dry run says what it would change and changes nothing", func(t *testing.T) {
		nft := netfixtest.NewNFT()
		r, err := netfix.EnsureMSSClamp(ctx, nft, want, true)
		if err != nil || r.Changed || !r.DryRun || len(r.Changes) != 1 || len(nft.Tables()) != 0 {
			t.Errorf("dry run = %+v, %v; tables %v", r, err, nft.Tables())
		}
	})
	t.Run("a batch that did not apply is an error", func(t *testing.T) {
		nft := netfixtest.NewNFT()
		nft.Ignore = true
		if _, err := netfix.EnsureMSSClamp(ctx, nft, want, false); err == nil || !strings.Contains(err.Error(), "reads back") {
			t.Errorf("err = %v, want a read-back mismatch", err)
		}
	})
	t.Run("a failed batch is an error and changes nothing", func(t *testing.T) {
		nft := netfixtest.NewNFT()
		nft.FlushErr = errors.New("operation not permitted")
		r, err := netfix.EnsureMSSClamp(ctx, nft, want, false)
		if err == nil || r.Changed || len(nft.Tables()) != 0 {
			t.Errorf("= %+v, %v; tables %v", r, err, nft.Tables())
		}
	})
	t.Run("a path below IPv6's minimum MTU is refused", func(t *testing.T) {
		bad := netfix.MSSClamp{Table: want.Table, Links: []netfix.LinkClamp{{Link: "wg0", PathMTU: 1200}}}
		if _, err := netfix.EnsureMSSClamp(ctx, netfixtest.NewNFT(), bad, false); err == nil {
			t.Error("clamp for path MTU 1200 accepted")
		}
	})
	t.Run("a table of another name is refused", func(t *testing.T) {
		bad := netfix.MSSClamp{Table: "filter", Links: want.Links}
		if _, err := netfix.EnsureMSSClamp(ctx, netfixtest.NewNFT(), bad, false); err == nil {
			t.Error("clamp in table filter accepted")
		}
	})
}

func TestRemoveMSSClampsRemovesOnlyEdgehealsTables(t *testing.T) {
	ctx := context.Background()
	nft := netfixtest.NewNFT()
	for _, tun := range []string{"wg0", "flannel-wg"} {
		if _, err := netfix.EnsureMSSClamp(ctx, nft, netfix.MSSClamp{Table: netfix.ClampTable(tun),
			Links: []netfix.LinkClamp{{Link: tun, PathMTU: 1328}}}, false); err != nil {
			t.Fatal(err)
		}
	}
	nft.AddTable(&nftables.Table{Name: "filter", Family: nftables.TableFamilyINet})
	if err := nft.Flush(); err != nil {
		t.Fatal(err)
	}
	r, err := netfix.RemoveMSSClamps(ctx, nft)
	if err != nil || !r.Changed || len(r.Changes) != 2 {
		t.Errorf("RemoveMSSClamps = %+v, %v", r, err)
	}
	if diff := cmp.Diff([]string{"filter"}, nft.Tables()); diff != "" {
		t.Errorf("tables left (-want +got):\n%s", diff)
	}
	if r, err := netfix.RemoveMSSClamps(ctx, nft); err != nil || r.Changed {
		t.Errorf("again = %+v, %v; want nothing to do", r, err)
	}
}
