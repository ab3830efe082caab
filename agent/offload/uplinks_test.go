package offload

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/edgeheal/edgeheal/agent/core/coretest"
	"github.com/edgeheal/edgeheal/configs"
	"github.com/edgeheal/edgeheal/netfix"
	"github.com/edgeheal/edgeheal/probes"
)

func TestSelectUplinks(t *testing.T) {
	links := []probes.Link{
		{Name: "lo", Index: 1, Up: true},
		{Name: "eth0", Index: 2, Up: true},
		{Name: "wwan0", Index: 3, Up: true},
		{Name: "wwan1", Index: 4},
		{Name: "usb0", Index: 5, Up: true},
		{Name: "wg0", Index: 6, Up: true},
	}
	off := func(name string, f map[string]string) configs.Uplink {
		return configs.Uplink{Name: name, TxChecksum: "off", Features: f}
	}
	type sel struct {
		Link string
		By   []string
		Want netfix.OffloadWant
	}
	want := func(txOff bool, f map[string]string) netfix.OffloadWant {
		if f == nil {
			f = map[string]string{}
		}
		return netfix.OffloadWant{TxChecksumOff: txOff, Features: f}
	}
	tests := []struct {
		name string
		ups  []configs.Uplink
		dr   []int
		want []sel
	}{
		{"an exact name selects that link only", []configs.Uplink{off("eth0", nil)}, nil,
			[]sel{{"eth0", []string{"eth0"}, want(true, nil)}}},
		{"a glob selects every matching link, sorted by name", []configs.Uplink{off("wwan*", nil)}, nil,
			[]sel{{"wwan0", []string{"wwan*"}, want(true, nil)}, {"wwan1", []string{"wwan*"}, want(true, nil)}}},
		{"default-route selects the links of the default routes", []configs.Uplink{off("default-route", nil)}, []int{3, 5, 3},
			[]sel{{"usb0", []string{"default-route"}, want(true, nil)}, {"wwan0", []string{"default-route"}, want(true, nil)}}},
		{"a link chosen by two configs appears once, their features merged, the later winning",
			[]configs.Uplink{off("wwan0", map[string]string{"gro": "on", "tso": "off"}), {Name: "default-route", TxChecksum: "leave", Features: map[string]string{"gro": "off"}}, off("usb*", nil)},
			[]int{3},
			[]sel{{"usb0", []string{"usb*"}, want(true, nil)}, {"wwan0", []string{"wwan0", "default-route"}, want(true, map[string]string{"gro": "off", "tso": "off"})}}},
		{"tx_checksum leave with features guards only the features",
			[]configs.Uplink{{Name: "eth0", TxChecksum: "leave", Features: map[string]string{"gro": "off"}}}, nil,
			[]sel{{"eth0", []string{"eth0"}, want(false, map[string]string{"gro": "off"})}}},
		{"a config that matches nothing selects nothing", []configs.Uplink{off("ppp*", nil)}, nil, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dr := map[int]bool{}
			for _, i := range tt.dr {
				dr[i] = true
			}
			var got []sel
			for _, s := range selectUplinks(guardedUplinks(tt.ups), links, dr) {
				got = append(got, sel{s.Name, s.SelectedBy, s.Want})
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

func TestGuardedUplinksDropsTheOnesThatGuardNothing(t *testing.T) {
	got := guardedUplinks([]configs.Uplink{{Name: "lo", TxChecksum: "leave"}, {Name: "wwan0", TxChecksum: "off"}})
	if len(got) != 1 || got[0].Name != "wwan0" {
		t.Errorf("guarded = %+v, want only wwan0", got)
	}
}

func TestReadUplinksReadsTheDefaultRoutesOnlyWhenNeeded(t *testing.T) {
	links := coretest.NewLinks()
	links.Add("wwan0")
	if _, dr, err := readUplinks(links, []configs.Uplink{{Name: "wwan0", TxChecksum: "off"}}); err != nil || dr != nil {
		t.Errorf("without default-route: dr %v, err %v; want no route read", dr, err)
	}
	links.SetDefaultRoute("wwan0")
	got, dr, err := readUplinks(links, []configs.Uplink{{Name: "default-route", TxChecksum: "off"}})
	if err != nil || len(dr) != 1 || len(got) != 1 || got[0].Name != "wwan0" {
		t.Errorf("default-route: %+v, %v, %v; want wwan0", got, dr, err)
	}
}
