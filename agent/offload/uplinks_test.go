package offload

import (
	"slices"
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

// A pattern never chooses the loopback, a veth, a bridge or a tunnel: on
// a K3s node "*" chose lo and every pod's veth (an offload-drift event and
// an evidence bundle per pod start). Only an exact name chooses them.
func TestAGlobNeverChoosesLoopbackVethsBridgesOrTunnels(t *testing.T) {
	links := []probes.Link{
		{Name: "lo", Index: 1, Up: true, Kind: "loopback"},
		{Name: "eth0", Index: 2, Up: true},
		{Name: "wwan0", Index: 3, Up: true},
		{Name: "veth3f2a9c1", Index: 4, Up: true, Kind: "veth"},
		{Name: "cni0", Index: 5, Up: true, Kind: "bridge"},
		{Name: "flannel.1", Index: 6, Up: true, Kind: "vxlan"},
		{Name: "flannel-wg", Index: 7, Up: true, Kind: "wireguard"},
		{Name: "tun0", Index: 8, Up: true, Kind: "tuntap"},
	}
	names := func(ts []uplinkTarget) []string {
		var out []string
		for _, t := range ts {
			out = append(out, t.Name)
		}
		return out
	}
	for _, tc := range []struct {
		sel  string
		dr   []int
		want []string
	}{
		{"*", nil, []string{"eth0", "wwan0"}},
		{"?*", nil, []string{"eth0", "wwan0"}},
		{"veth*", nil, nil},
		{"flannel*", nil, nil},
		{"cni0", nil, []string{"cni0"}},
		{"lo", nil, []string{"lo"}},
		{"flannel-wg", nil, []string{"flannel-wg"}},
		{configs.DefaultRoute, []int{1, 2}, []string{"eth0"}},
	} {
		dr := map[int]bool{}
		for _, i := range tc.dr {
			dr[i] = true
		}
		got := names(selectUplinks([]configs.Uplink{{Name: tc.sel, TxChecksum: "off"}}, links, dr))
		if !slices.Equal(got, tc.want) {
			t.Errorf("%q chooses %v, want %v", tc.sel, got, tc.want)
		}
	}
	m, err := Match(fakeLister(links), []configs.Uplink{{Name: "*"}})
	if err != nil {
		t.Fatal(err)
	}
	want := []Matched{{Selector: "*", Links: []string{"eth0", "wwan0"}, Skipped: []string{"cni0 (bridge)", "flannel-wg (tunnel (wireguard))",
		"flannel.1 (tunnel (vxlan))", "lo (loopback)", "tun0 (tunnel (tuntap))", "veth3f2a9c1 (veth)"}}}
	if diff := cmp.Diff(want, m); diff != "" {
		t.Errorf("Match (-want +got):\n%s", diff)
	}
}

type fakeLister []probes.Link

func (f fakeLister) Links() ([]probes.Link, error)     { return slices.Clone(f), nil }
func (f fakeLister) DefaultRouteLinks() ([]int, error) { return nil, nil }
