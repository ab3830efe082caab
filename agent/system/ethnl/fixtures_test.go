package ethnl

import (
	"bufio"
	"encoding/hex"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// The fixtures in testdata/ are the kernel's replies for a veth "up0" and
// what `ethtool -k up0` (ethtool 6.1) printed right after, captured on
// Debian 12, kernel 6.18 (2026-12-03) by TestLabCaptureFixtures:
//
//	sudo env PATH=$PATH go test -count=1 -run '^TestLabCaptureFixtures$' ./agent/system/ethnl/ -args -capture
//
// The veth's tx-checksum-ip-generic had been turned off, which turns TSO
// off while it stays requested on ("off [requested on]").

// readHex reads a fixture written by hexLines.
func readHex(tb testing.TB, name string) []byte {
	tb.Helper()
	s, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		tb.Fatal(err)
	}
	b, err := hex.DecodeString(strings.ReplaceAll(string(s), "\n", ""))
	if err != nil {
		tb.Fatalf("%s: %v", name, err)
	}
	return b
}

// capturedFeatures decodes the compact reply with the captured name table,
// as Features does.
func capturedFeatures(tb testing.TB) map[string]State {
	tb.Helper()
	r, err := decodeFeaturesReply(readHex(tb, "features-compact.hex"))
	if err != nil {
		tb.Fatal(err)
	}
	names, err := decodeStrset(readHex(tb, "strset-features.hex"))
	if err != nil {
		tb.Fatal(err)
	}
	if len(names) != r.size {
		tb.Fatalf("%d names for %d bits", len(names), r.size)
	}
	return featureMap(r, names)
}

// ethtoolK reads what `ethtool -k` printed: for each line "name: on|off"
// with " [fixed]" and " [requested on|off]" as they apply, the state as
// ethtool shows it. Lines of ethtool's groups of several kernel features
// (tx-checksumming, scatter-gather, tcp-segmentation-offload) are left out;
// ethtool's older names for single features are turned into kernel names.
func ethtoolK(tb testing.TB) map[string]string {
	tb.Helper()
	f, err := os.Open(filepath.Join("testdata", "ethtool-k.txt"))
	if err != nil {
		tb.Fatal(err)
	}
	defer f.Close()
	// ethtool 6.1's off_flag_def table, the entries of one kernel feature.
	older := map[string]string{
		"rx-checksumming": "rx-checksum", "generic-segmentation-offload": "tx-generic-segmentation",
		"generic-receive-offload": "rx-gro", "large-receive-offload": "rx-lro",
		"rx-vlan-offload": "rx-vlan-hw-parse", "tx-vlan-offload": "tx-vlan-hw-insert",
		"ntuple-filters": "rx-ntuple-filter", "receive-hashing": "rx-hashing",
	}
	groups := map[string]bool{"tx-checksumming": true, "scatter-gather": true, "tcp-segmentation-offload": true}
	out := map[string]string{}
	s := bufio.NewScanner(f)
	for s.Scan() {
		name, state, ok := strings.Cut(strings.TrimSpace(s.Text()), ": ")
		if !ok || groups[name] {
			continue
		}
		if k, ok := older[name]; ok {
			name = k
		}
		out[name] = state
	}
	return out
}

// asEthtoolPrintsIt is a state as `ethtool -k` prints it.
func asEthtoolPrintsIt(st State) string {
	s := "off"
	if st.Active {
		s = "on"
	}
	if !st.Available || st.NeverChange {
		s += " [fixed]"
	}
	if st.Requested != st.Active {
		if st.Requested {
			s += " [requested on]"
		} else {
			s += " [requested off]"
		}
	}
	return s
}

func TestCapturedRepliesSayWhatEthtoolSaid(t *testing.T) {
	fs := capturedFeatures(t)
	want := ethtoolK(t)
	got := map[string]string{}
	for n, st := range fs {
		if _, shown := want[n]; shown {
			got[n] = asEthtoolPrintsIt(st)
		}
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("decoded vs ethtool -k (-want +got):\n%s", diff)
	}
	// ethtool 6.1 shows every feature the kernel names, and so every one
	// decoded.
	var hidden []string
	for n := range fs {
		if _, shown := want[n]; !shown {
			hidden = append(hidden, n)
		}
	}
	slices.Sort(hidden)
	if len(hidden) > 0 || len(fs) < 55 {
		t.Errorf("%d features decoded, %v of them not shown by ethtool", len(fs), hidden)
	}
}

func TestCapturedRepliesSpotChecks(t *testing.T) {
	fs := capturedFeatures(t)
	for name, want := range map[string]State{
		"tx-checksum-ip-generic": {Available: true},
		"tx-checksum-ipv4":       {},
		"tx-checksum-sctp":       {Available: true, Requested: true, Active: true},
		"tx-tcp-segmentation":    {Available: true, Requested: true},
		"vlan-challenged":        {NeverChange: true},
		"highdma":                {Available: true, Requested: true, Active: true},
	} {
		if got := fs[name]; got != want {
			t.Errorf("%s = %+v, want %+v", name, got, want)
		}
	}
	if _, ok := fs[""]; ok {
		t.Errorf("an unnamed bit is in the map")
	}
}

// The verbose reply (names in every reply) of the same moment says the
// same as the compact one with the table.
func TestCapturedVerboseReplyAgrees(t *testing.T) {
	verbose, err := decodeVerboseFeatures(readHex(t, "features-verbose.hex"))
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(capturedFeatures(t), verbose); diff != "" {
		t.Errorf("compact vs verbose (-compact +verbose):\n%s", diff)
	}
}
