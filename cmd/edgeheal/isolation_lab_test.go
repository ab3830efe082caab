package main

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/edgeheal/edgeheal/internal/testsupport"
	"github.com/edgeheal/edgeheal/internal/testsupport/agentlab"
	"github.com/edgeheal/edgeheal/internal/testsupport/labtest"
	"github.com/edgeheal/edgeheal/lab"
	"github.com/edgeheal/edgeheal/netfix"
	"github.com/edgeheal/edgeheal/probes"
	"github.com/edgeheal/edgeheal/wire"
)

// One wedged part never stops another: the daemon runs in the lab's edge
// namespace with its uplink, a tunnel whose WireGuard UAPI socket accepts
// and never answers (a wedged wireguard-go), a workload whose container
// runtime accepts and never answers, and one whose broker accepts and
// never answers. Every TX checksum flip on the uplink is turned off again,
// each check says what gives no answer, /readyz names them, and SIGTERM
// ends the process.

// silentUnix listens on a Unix socket at path and holds every connection
// open without a word, until the test ends.
func silentUnix(t *testing.T, path string) {
	t.Helper()
	ln, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	holdSilent(t, ln)
	t.Cleanup(func() { os.Remove(path) })
}

// silentTCP listens on 127.0.0.1 in the namespace at nsPath and holds every
// connection open without a word; it returns the address.
func silentTCP(t *testing.T, nsPath string) string {
	t.Helper()
	var ln net.Listener
	if err := (probes.Netns{Path: nsPath}).Do(func() (err error) { ln, err = net.Listen("tcp", "127.0.0.1:0"); return err }); err != nil {
		t.Fatal(err)
	}
	holdSilent(t, ln)
	return ln.Addr().String()
}

func holdSilent(t *testing.T, ln net.Listener) {
	var mu sync.Mutex
	var conns []net.Conn
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		<-done
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
	})
}

// getIn GETs url from inside the namespace at nsPath.
func getIn(nsPath, url string) (int, string, error) {
	c := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DialContext: probes.Netns{Path: nsPath}.DialContext}}
	resp, err := c.Get(url)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	return resp.StatusCode, string(b), err
}

func checkOf(st wire.LocalStatus, kind, target string) (wire.Check, bool) {
	for _, c := range st.Checks {
		if c.Kind == kind && c.Target == target {
			return c, true
		}
	}
	return wire.Check{}, false
}

func TestLabAWedgedTunnelRuntimeAndBrokerStopNothingElse(t *testing.T) {
	l := labtest.New(t, lab.Options{NoTelemetry: true}) // the uplink starts with offload on
	bin := buildBinary(t)
	edge := l.NetnsPath(lab.Edge)

	// A userspace WireGuard device whose UAPI socket accepts and never
	// answers. The socket directory is machine-wide: a name of its own.
	var rnd [4]byte
	_, _ = rand.Read(rnd[:])
	wedged := "ehw" + hex.EncodeToString(rnd[:])
	if err := os.MkdirAll("/var/run/wireguard", 0o755); err != nil {
		t.Fatal(err)
	}
	silentUnix(t, filepath.Join("/var/run/wireguard", wedged+".sock"))
	dir := t.TempDir()
	cri := filepath.Join(dir, "containerd.sock")
	silentUnix(t, cri)
	broker := silentTCP(t, edge)

	cfg := filepath.Join(dir, "config.yaml")
	writeFile(t, cfg, fmt.Sprintf(`version: 1
node: {name: gw-wedged}
interval: 200ms
uplinks: [{name: %s}]
tunnels:
  - {interface: %s, probe: {interval: 500ms, timeout: 500ms}}
workloads:
  - {name: runtime-hangs, cri_socket: %s, pod: {namespace: factory, name: telemetry-0}, interval: 1s, misses: 2, mqtt: {broker: "tcp://10.43.0.10:1883", timeout: 1s}}
  - {name: broker-silent, netns: %s, interval: 1s, misses: 2, mqtt: {broker: "tcp://%s", timeout: 1s}}
report:
  http: {listen: "127.0.0.1:9469", socket: %s/edgeheal.sock}
  state_dir: %s
`, l.EdgeUplink(), wedged, cri, edge, broker, filepath.Join(dir, "state"), filepath.Join(dir, "state")))
	d := labAgent(t, l, bin, cfg, filepath.Join(dir, "state"))

	testsupport.WaitFor(t, 10*time.Second, "offload off on the uplink", func() bool { on, err := l.UplinkTxChecksumOn(); return err == nil && !on })

	// Twenty flips, each turned off again, while the tunnel's device and
	// the workloads' runtime and broker give no answer.
	sys := agentlab.LabOS(t, l, lab.Edge)
	txOn := func() bool {
		fs, err := sys.NIC.FeaturesWithState(l.EdgeUplink())
		if err != nil {
			t.Fatal(err)
		}
		for n, st := range fs {
			if netfix.IsTxChecksum(n) && st.Active {
				return true
			}
		}
		return false
	}
	var exposure []time.Duration
	for i := range 20 {
		if err := sys.NIC.Change(l.EdgeUplink(), map[string]bool{"tx-checksum-ip-generic": true}); err != nil {
			t.Fatalf("flip %d: %v", i, err)
		}
		flipped := time.Now()
		for txOn() {
			if time.Since(flipped) > time.Second {
				t.Fatalf("flip %d not turned off within 1 s (the guard waits on something)", i+1)
			}
			time.Sleep(time.Millisecond)
		}
		exposure = append(exposure, time.Since(flipped))
		time.Sleep(200 * time.Millisecond)
	}
	slices.Sort(exposure)
	t.Logf("20 flips turned off again: exposure p50 %v, p99 %v (read back to back, one read late at most)", exposure[len(exposure)/2], exposure[len(exposure)-1])

	var st wire.LocalStatus
	testsupport.WaitFor(t, 15*time.Second, "every wedged part named in the status", func() bool {
		var ok bool
		st, ok = labAgentStatus(t, l, bin, filepath.Join(dir, "state"))
		tun, _ := checkOf(st, wire.KindPeer, wedged)
		rt, _ := checkOf(st, wire.KindWorkload, "runtime-hangs")
		return ok && strings.Contains(tun.Detail, "gave no answer") && rt.State == "unknown"
	})
	if c, _ := checkOf(st, wire.KindPeer, wedged); c.Healthy || !strings.Contains(c.Detail, "wireguard device "+wedged+" gave no answer within 2s") {
		t.Errorf("the tunnel's check %+v, want unhealthy: its device gives no answer", c)
	}
	if c, _ := checkOf(st, wire.KindWorkload, "runtime-hangs"); c.Healthy || !strings.Contains(c.Detail, "the container runtime at "+cri+" gave no answer") {
		t.Errorf("the workload's check %+v, want unknown: the container runtime gives no answer", c)
	}
	if c, _ := checkOf(st, wire.KindWorkload, "broker-silent"); c.Healthy || c.Workload == nil || c.Workload.PodProbe == nil || c.Workload.PodProbe.Class != string(probes.ClassTimeout) {
		t.Errorf("the workload's check %+v, want its probe timed out", c)
	}
	if c, _ := checkOf(st, wire.KindUplink, l.EdgeUplink()); !c.Healthy {
		t.Errorf("the uplink's check %+v, want healthy: every flip was undone", c)
	}
	code, body, err := getIn(edge, "http://127.0.0.1:9469/readyz")
	if err != nil || code != http.StatusServiceUnavailable || !strings.Contains(body, "tunnel/"+wedged+": degraded") ||
		!strings.Contains(body, "gave no answer within 2s") || !strings.Contains(body, "workloads: degraded") {
		t.Errorf("/readyz = %d %q, %v; want 503 naming the tunnel's device and the workloads", code, body, err)
	}

	// SIGTERM ends it, whatever still waits.
	start := time.Now()
	if err := d.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-d.done:
		d.done <- err // for the cleanup
		t.Logf("exited %v after SIGTERM: %v", time.Since(start).Round(time.Millisecond), err)
	case <-time.After(10 * time.Second):
		t.Fatal("still running 10 s after SIGTERM")
	}
}
