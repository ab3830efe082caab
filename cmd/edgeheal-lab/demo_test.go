package main

import (
	"bytes"
	"context"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/edgeheal/edgeheal/internal/testsupport"

	"github.com/edgeheal/edgeheal/lab"
)

// buildEdgeheal builds the daemon into a temporary directory.
func buildEdgeheal(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "edgeheal")
	out, err := exec.Command("go", "build", "-o", bin, "github.com/edgeheal/edgeheal/cmd/edgeheal").CombinedOutput()
	if err != nil {
		t.Fatalf("building edgeheal: %v\n%s", err, out)
	}
	return bin
}

// The whole demo with short faults: edgeheal turns offload off at start
// and after a re-plug, detects a blackhole, keeps its hands off the tunnel
// during a broker outage and delivers the queued events after it; and
// nothing of the lab is left afterwards. About 50 s.
func TestLabDemoShort(t *testing.T) {
	testsupport.RequireRoot(t, "the lab: network namespaces, TUN, AF_PACKET")
	bin := buildEdgeheal(t)
	ctx, cancel := context.WithTimeout(context.Background(), 150*time.Second)
	defer cancel()
	var out bytes.Buffer
	sum, err := runDemo(ctx, demoSettings{binary: bin, broker: lab.BrokerEmbedded, blackhole: 6 * time.Second, outage: 6 * time.Second}, &out)
	t.Logf("demo output:\n%s", out.String())
	if err != nil {
		t.Fatalf("demo: %v", err)
	}
	if sum.OffloadOffAfterStart <= 0 || sum.TunnelBackAfterStart <= 0 {
		t.Errorf("act 1 not measured: offload off after %v, tunnel back after %v", sum.OffloadOffAfterStart, sum.TunnelBackAfterStart)
	}
	if sum.ReplugExposure <= 0 || sum.ReplugExposure > 5*time.Second {
		t.Errorf("re-plug exposure %v, want a measured fix", sum.ReplugExposure)
	}
	if sum.BlackholeDetect <= 0 {
		t.Errorf("blackhole not detected")
	}
	if sum.BrokerTunnelActions != 0 {
		t.Errorf("%d tunnel actions during the broker outage", sum.BrokerTunnelActions)
	}
	if sum.QueuedDelivered == 0 || sum.QueuedDeliveredAfter <= 0 {
		t.Errorf("no event queued during the broker outage reached the cloud (%d, last after %v)", sum.QueuedDelivered, sum.QueuedDeliveredAfter)
	}
	t.Logf("act 4: the queued events reached the cloud %v after the broker's return (measured, not asserted)", sum.QueuedDeliveredAfter)
	for _, s := range []string{"== Act 1", "== Act 4", "== What the cloud received", "== Summary", "cleaned up",
		"fleet view (edgeheal-fleet's page and /metrics) while the demo runs: http://127.0.0.1:",
		"after act 1: ", "after act 4: "} {
		if !strings.Contains(out.String(), s) {
			t.Errorf("output lacks %q", s)
		}
	}
	// The fleet view saw the node online at the end (act 4 ends with the
	// broker back and the queued events delivered).
	if !strings.Contains(out.String(), " online since ") || !strings.Contains(out.String(), "after act 3: ") {
		t.Errorf("the timeline has no note of the fleet view seeing the node online")
	}
	if left := lab.Leftovers("demo", ""); len(left) > 0 {
		t.Errorf("left behind: %v", left)
	}
}
