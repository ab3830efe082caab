package evidence

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/edgeheal/edgeheal/probes"
)

type testPeer struct {
	PublicKey    string `json:"public_key"`
	PresharedKey string `json:"preshared_key"`
	Endpoint     string `json:"endpoint"`
}

func TestEvidenceBundleIsWrittenRedactedAndSummarised(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(dir, 3)
	if err != nil {
		t.Fatal(err)
	}
	b := Bundle{
		Incident: "abc123", Time: time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC), Target: "wg0/AbCd", Reason: "probe failed 3 times",
		Sections: map[string]any{
			"wireguard_peers": []testPeer{{PublicKey: "AbCd", PresharedKey: "c2VjcmV0", Endpoint: "198.51.100.7:51820"}},
			"udp":             probes.UDPCounters{InDatagrams: 10, InErrors: 3, InCsumErrors: 3},
			"routes":          []string{"default via 10.0.0.1 dev wwan0", "10.8.0.0/24 dev wg0"},
			"uplinks":         map[string]any{"wwan0": map[string]bool{"tx-checksum-ip-generic": true}},
		},
	}
	sum, err := s.Save(b)
	if err != nil {
		t.Fatal(err)
	}
	file := sum["evidence_file"].(string)
	raw, err := os.ReadFile(filepath.Join(dir, file))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(raw), "c2VjcmV0") {
		t.Error("the preshared key reached the disk")
	}
	var back map[string]any
	if err := json.Unmarshal(raw, &back); err != nil {
		t.Fatalf("bundle is not JSON: %v", err)
	}
	delete(sum, "evidence_bytes")
	want := map[string]any{
		"evidence_file":      "evidence/20261129T120000.000Z-abc123.json",
		"sections":           map[string]any{"wireguard_peers": 1, "udp": 9, "routes": 2, "uplinks": 1},
		"udp_in_csum_errors": 3.0,
		"redacted_fields":    1,
	}
	if diff := cmp.Diff(want, sum); diff != "" {
		t.Errorf("summary (-want +got):\n%s", diff)
	}
}

func TestEvidenceStoreKeepsTheNewest(t *testing.T) {
	s, err := Open(t.TempDir(), 3)
	if err != nil {
		t.Fatal(err)
	}
	base := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	for i := range 5 {
		if _, err := s.Save(Bundle{Incident: fmt.Sprintf("i%d", i), Time: base.Add(time.Duration(i) * time.Minute)}); err != nil {
			t.Fatal(err)
		}
	}
	got, err := s.List()
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"20261129T120200.000Z-i2.json", "20261129T120300.000Z-i3.json", "20261129T120400.000Z-i4.json"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("kept (-want +got):\n%s", diff)
	}
}

func TestEvidenceFileNamesCannotEscapeTheDirectory(t *testing.T) {
	s, err := Open(t.TempDir(), 3)
	if err != nil {
		t.Fatal(err)
	}
	sum, err := s.Save(Bundle{Incident: "../../etc/passwd", Time: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)})
	if err != nil {
		t.Fatal(err)
	}
	if got := sum["evidence_file"]; got != "evidence/20260101T000000.000Z-______etc_passwd.json" {
		t.Errorf("file = %v", got)
	}
}

func TestEvidenceFileNamedByTimeAndIncident(t *testing.T) {
	s, err := Open(t.TempDir(), 2)
	if err != nil {
		t.Fatal(err)
	}
	sum, err := s.Save(Bundle{Incident: "inc1", Target: "wg0", Reason: "probe failed", Time: time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC),
		Sections: map[string]any{"routes": []string{"default via 10.0.0.1"}}})
	if err != nil {
		t.Fatal(err)
	}
	if sum["evidence_file"] != "evidence/20261129T120000.000Z-inc1.json" {
		t.Errorf("summary = %v", sum)
	}
}
