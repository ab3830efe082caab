package agent

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/edgeheal/edgeheal/configs"
	"github.com/edgeheal/edgeheal/probes"
)

// fakeFeatures is a hand-written probes.FeatureReader.
type fakeFeatures map[string][]probes.Feature

func (f fakeFeatures) Features(link string) ([]probes.Feature, error) {
	fs, ok := f[link]
	if !ok {
		return nil, fmt.Errorf("link %s: %w", link, os.ErrNotExist)
	}
	return fs, nil
}

func vethFeatures(ipGenericOn bool) []probes.Feature {
	return []probes.Feature{
		{Name: "rx-gro"},
		{Name: "tx-checksum-fcoe-crc", Fixed: true},
		{Name: "tx-checksum-ip-generic", On: ipGenericOn},
		{Name: "tx-checksum-ipv4", Fixed: true},
		{Name: "tx-checksum-ipv6", Fixed: true},
		{Name: "tx-checksum-sctp"},
		{Name: "tx-tcp-segmentation", On: true},
	}
}

func TestCheckUplinks(t *testing.T) {
	links := newFakeLinks()
	links.Add("wwan0")
	links.Add("eth0")
	nic := fakeFeatures{"wwan0": vethFeatures(true), "eth0": vethFeatures(false)}

	rep, err := CheckUplinks(context.Background(), []configs.Uplink{
		{Name: "wwan*", TxChecksum: "off", Features: map[string]string{"gro": "on"}},
		{Name: "eth0", TxChecksum: "off"},
		{Name: "ppp0", TxChecksum: "off"},
		{Name: "lo", TxChecksum: "leave"},
	}, links, nic)
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
}

func TestCheckUplinksHealthyWhenEverythingIsOff(t *testing.T) {
	links := newFakeLinks()
	links.Add("wwan0")
	rep, err := CheckUplinks(context.Background(), []configs.Uplink{{Name: "wwan0"}}, links,
		fakeFeatures{"wwan0": vethFeatures(false)})
	if err != nil {
		t.Fatal(err)
	}
	if !rep.Healthy {
		t.Errorf("unhealthy: %+v", rep)
	}
}

func TestCheckUplinksUnknownFeatureIsUnhealthy(t *testing.T) {
	links := newFakeLinks()
	links.Add("wwan0")
	rep, err := CheckUplinks(context.Background(), []configs.Uplink{{Name: "wwan0", Features: map[string]string{"tx-csum": "off"}}},
		links, fakeFeatures{"wwan0": vethFeatures(false)})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Healthy || !strings.Contains(rep.Uplinks[0].Error, `unknown feature "tx-csum"`) {
		t.Errorf("report = %+v, want unhealthy with the unknown feature named", rep)
	}
}
