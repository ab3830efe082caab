package probes

import (
	"errors"
	"os"
	"testing"
)

func TestLabEthtoolFeaturesOfAVeth(t *testing.T) {
	ns, h := labNamespace(t)
	addVeth(t, h, "up0", "up0p")
	e, err := NewEthtoolAt(ns)
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	fs, err := e.Features("up0")
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, f := range fs {
		if IsTxChecksum(f.Name) {
			got[f.Name] = f.State()
		}
	}
	// ethtool -k of a fresh veth, kernel 6.18 (2026-11).
	want := map[string]string{
		"tx-checksum-ipv4": "off [fixed]", "tx-checksum-ip-generic": "on", "tx-checksum-ipv6": "off [fixed]",
		"tx-checksum-fcoe-crc": "off [fixed]", "tx-checksum-sctp": "on",
	}
	for n, w := range want {
		if got[n] != w {
			t.Errorf("%s = %q, want %q", n, got[n], w)
		}
	}
	if _, err := e.Features("nosuch0"); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Features of a missing link: %v, want an error matching os.ErrNotExist", err)
	}
}
