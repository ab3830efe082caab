package ethnl

import (
	"encoding/hex"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

var capture = flag.Bool("capture", false, "TestLabCaptureFixtures: write testdata/ from a veth on this machine")

// TestLabCaptureFixtures writes the fixtures of the decoding tests: the
// kernel's replies, as received, for a veth "up0" whose
// tx-checksum-ip-generic was turned off (so that TSO is off but still
// requested on), and what ethtool(8) printed for it right after. Run it
// on a real host, then say in fixtures_test.go where:
//
//	sudo env PATH=$PATH go test -count=1 -run '^TestLabCaptureFixtures$' ./agent/system/ethnl/ -args -capture
func TestLabCaptureFixtures(t *testing.T) {
	if !*capture {
		t.Skip("writes testdata/: run with -args -capture")
	}
	c, ns := labConn(t)
	addVeth(t, ns, "up0")
	if err := c.Change("up0", map[string]bool{"tx-checksum-ip-generic": false}); err != nil {
		t.Fatal(err)
	}
	r, err := c.features("up0")
	if err != nil {
		t.Fatal(err)
	}
	bodies := map[string]func() ([]byte, error){
		"features-compact.hex": func() ([]byte, error) { return encodeFeaturesGet("up0", unix.ETHTOOL_FLAG_COMPACT_BITSETS) },
		"features-verbose.hex": func() ([]byte, error) { return encodeFeaturesGet("up0", 0) },
		"strset-features.hex":  func() ([]byte, error) { return encodeStrsetGet(r.ifindex) },
	}
	cmds := map[string]uint8{
		"features-compact.hex": unix.ETHTOOL_MSG_FEATURES_GET,
		"features-verbose.hex": unix.ETHTOOL_MSG_FEATURES_GET,
		"strset-features.hex":  unix.ETHTOOL_MSG_STRSET_GET,
	}
	for file, body := range bodies {
		req, err := body()
		if err != nil {
			t.Fatal(err)
		}
		reply, err := c.execute(cmds[file], req, false)
		if err != nil {
			t.Fatal(err)
		}
		writeFixture(t, file, []byte(hexLines(reply)))
	}
	out, err := exec.Command("nsenter", fmt.Sprintf("--net=/proc/%d/fd/%d", os.Getpid(), int(ns.NsHandle())),
		"ethtool", "-k", "up0").CombinedOutput()
	if err != nil {
		t.Fatalf("ethtool -k: %v\n%s", err, out)
	}
	writeFixture(t, "ethtool-k.txt", out)
}

func writeFixture(t *testing.T, name string, b []byte) {
	t.Helper()
	if err := os.WriteFile(filepath.Join("testdata", name), b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// hexLines is b in hex, 32 bytes a line.
func hexLines(b []byte) string {
	var s strings.Builder
	for len(b) > 0 {
		n := min(32, len(b))
		s.WriteString(hex.EncodeToString(b[:n]))
		s.WriteByte('\n')
		b = b[n:]
	}
	return s.String()
}
