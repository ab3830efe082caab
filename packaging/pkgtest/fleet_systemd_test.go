package pkgtest

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/edgeheal/edgeheal/fleet/web"
	"github.com/edgeheal/edgeheal/internal/testsupport"
	"github.com/edgeheal/edgeheal/internal/testsupport/mosquitto"
	"github.com/edgeheal/edgeheal/internal/testsupport/systemdlab"
	"github.com/edgeheal/edgeheal/probes"
)

// fleetMounts makes the fleet package's payload look installed
// (payloadMounts), with /etc/edgeheal-fleet the test's own directory.
const fleetMounts = payloadMounts + `mount --bind "$T/etc-fleet" /etc/edgeheal-fleet
`

// TestLabFleetUnitUnderRealSystemd runs the packaged edgeheal-fleet.service
// under a confined systemd as PID 1, with a mosquitto in the lab's own
// network namespace: the sandboxed view (a dynamic user, no capability)
// starts, reads a retained status from the broker and serves it on
// /metrics.
func TestLabFleetUnitUnderRealSystemd(t *testing.T) {
	testsupport.RequireRoot(t, "systemd as PID 1 in its own namespaces")
	built(t)
	payload := extractDeb(t, fleetDebPath(runtime.GOARCH))
	dir := t.TempDir()
	for _, d := range []string{"etc-extra/edgeheal-fleet", "etc-fleet"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var broker *mosquitto.Broker
	var labNet string
	// The lab boots without sysinit.target: nothing else of the unit changes.
	s, conn := bootWithUnit(ctx, t, payload, dir, fleetMounts, "edgeheal-fleet.service", "[Unit]\nDefaultDependencies=no\n",
		func(s *systemdlab.Systemd) {
			labNet = fmt.Sprintf("/proc/%d/ns/net", s.PID)
			broker = mosquitto.Start(t, mosquitto.Options{Netns: labNet})
			writeConfig(t, filepath.Join(dir, "etc-fleet/config.yaml"), fmt.Sprintf("mqtt: {broker: %q}\nlisten: 127.0.0.1:9470\n", broker.PlainURL()))
			// The door is on as shipped: Prometheus's token in the default
			// users file, readable by the dynamic user (it holds hashes only).
			writeConfig(t, filepath.Join(dir, "etc-fleet/users"), web.TokenLine("prometheus", "pkg-token")+"\n")
		})
	defer conn.Close()
	if res := job(ctx, t, "start", func(ch chan<- string) (int, error) {
		return conn.StartUnitContext(ctx, "edgeheal-fleet.service", "replace", ch)
	}); res != "done" {
		t.Fatalf("start job: %s; service: %+v", res, unitState(ctx, t, conn, "edgeheal-fleet.service"))
	}
	st := waitUnit(ctx, t, conn, "edgeheal-fleet.service", "the view is running", func(st state) bool {
		return st.active == "active" && st.sub == "running" && st.mainPID != 0
	})

	got := procStatus(t, s, st.mainPID)
	t.Logf("the view: Uid %s, CapBnd %s, NoNewPrivs %s, Seccomp %s", got["Uid"], got["CapBnd"], got["NoNewPrivs"], got["Seccomp"])
	if strings.HasPrefix(got["Uid"], "0 ") || got["CapBnd"] != "0000000000000000" || got["NoNewPrivs"] != "1" || got["Seccomp"] != "2" {
		t.Errorf("the view runs with Uid %q CapBnd %q NoNewPrivs %q Seccomp %q; want a non-root user, no capability, no new privileges, a syscall filter",
			got["Uid"], got["CapBnd"], got["NoNewPrivs"], got["Seccomp"])
	}

	status := `{"v":1,"state":"online","session":4,"ts":"2026-12-01T12:00:00Z","node":"pkg-node","site":"pkg-site"}`
	if out, err := exec.Command("nsenter", "--net="+labNet, "mosquitto_pub", "-h", "127.0.0.1", "-p", port(broker.PlainAddr),
		"-t", "edgeheal/v1/pkg-node/status", "-r", "-q", "1", "-m", status).CombinedOutput(); err != nil {
		t.Fatalf("mosquitto_pub: %v\n%s", err, out)
	}
	client := labHTTP(labNet)
	want := `edgeheal_fleet_node_state{node="pkg-node",site="pkg-site",state="online"} 1`
	testsupport.WaitFor(t, 30*time.Second, "the sandboxed view's /metrics shows the node", func() bool {
		req, _ := http.NewRequest("GET", "http://127.0.0.1:9470/metrics", nil)
		req.Header.Set("Authorization", "Bearer pkg-token")
		resp, err := client.Do(req)
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return strings.Contains(string(body), want) && strings.Contains(string(body), "edgeheal_fleet_connected 1")
	})
	if resp, err := client.Get("http://127.0.0.1:9470/metrics"); err != nil || resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("/metrics without the token: %v, %v; want 401", resp, err)
	} else {
		resp.Body.Close()
	}
}

// procStatus is /proc/<pid>/status of a process in the lab, each value
// with its runs of white space made one space.
func procStatus(t *testing.T, s *systemdlab.Systemd, pid uint32) map[string]string {
	t.Helper()
	b, err := os.ReadFile(s.Path(fmt.Sprintf("/proc/%d/status", pid)))
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, line := range strings.Split(string(b), "\n") {
		k, v, _ := strings.Cut(line, ":")
		got[k] = strings.Join(strings.Fields(v), " ")
	}
	return got
}

func port(addr string) string {
	_, p, _ := net.SplitHostPort(addr)
	return p
}

// labHTTP is an HTTP client whose connections are made inside the lab's
// network namespace (probes.Netns: the agent's own way into one).
func labHTTP(nsPath string) *http.Client {
	return &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
		DialContext: probes.Netns{Path: nsPath}.DialContext, DisableKeepAlives: true}}
}
