package main

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/edgeheal/edgeheal/internal/testsupport"
	"github.com/edgeheal/edgeheal/internal/testsupport/labtest"
	"github.com/edgeheal/edgeheal/lab"
	"github.com/edgeheal/edgeheal/lab/bench"
	"github.com/edgeheal/edgeheal/netfix"
)

// The daemon against a path-MTU blackhole (`edgeheal-lab fault mtu 1400`:
// every IP packet over 1400 bytes dropped both ways, no ICMP): it finds the
// path MTU through the tunnel (1328) and over the uplink (1400), names it
// in its events, clamps the TCP MSS in its own nftables table and lowers
// the tunnel's MTU, so that new transfers through the tunnel and over the
// uplink, both ways, complete again, and its own reporting goes on; it runs
// no rung of the ladder, and small telemetry never stops. After `fault
// pass` transfers still work, and after relax_after the clamp and the MTU
// are undone. How fast is the benchmark's to measure (S8,
// docs/performance.md); this test holds the behaviour.
func TestLabDaemonFitsTrafficToAPathMTUBlackhole(t *testing.T) {
	l := labtest.New(t, lab.Options{OffloadOff: true})
	bin := buildBinary(t)
	ctx := context.Background()
	cloud := &bench.Cloud{}
	if err := cloud.Start(ctx, l); err != nil {
		t.Fatal(err)
	}
	defer cloud.Stop()
	relax := 20 * time.Second
	a, err := bench.StartAgent(ctx, l, bench.AgentOptions{Binary: bin, Dir: t.TempDir(),
		Params: bench.ConfigParams{Node: "mtu-lab", RelaxAfter: relax}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := a.Stop(10 * time.Second); err != nil {
			t.Error(err)
		}
		if t.Failed() {
			for _, ll := range a.Logs() {
				if ll.Attrs["component"] == "events" || ll.Attrs["component"] == "tunnel" {
					t.Logf("%s %s %s %v", ll.Time.Format("15:04:05.000"), ll.Level, ll.Msg, ll.Attrs)
				}
			}
		}
	})
	pathCheck := func() map[string]any {
		st, err := a.Status(ctx)
		if err != nil {
			return nil
		}
		checks, _ := st["checks"].([]any)
		for _, c := range checks {
			if m, _ := c.(map[string]any); m["kind"] == "path-mtu" {
				return m
			}
		}
		return nil
	}
	testsupport.WaitFor(t, 30*time.Second, "the path-mtu check ok", func() bool { c := pathCheck(); return c != nil && c["state"] == "ok" })
	// A node that moves nothing a smaller path would hurt (telemetry,
	// edgeheal's own probes and reports) spends no check on it.
	checks := func() float64 {
		info, _ := pathCheck()["path_mtu"].(map[string]any)
		n, _ := info["checks"].(float64)
		return n
	}
	quiet := checks()
	time.Sleep(8 * time.Second)
	if n := checks(); n != quiet {
		info, _ := pathCheck()["path_mtu"].(map[string]any)
		t.Errorf("a quiet node was checked %v times in 8 s, the last because %v", n-quiet, info["because"])
	}
	if done := bench.FirstTransfers(ctx, l, 10*time.Second); done[0].IsZero() || done[1].IsZero() || done[2].IsZero() || done[3].IsZero() {
		t.Fatalf("transfers do not work before the fault: %v", done)
	}
	testsupport.WaitFor(t, 5*time.Second, "a check for the transfers", func() bool { return checks() > quiet })

	faultAt := time.Now()
	if err := l.PathMTU(1400, 0); err != nil {
		t.Fatal(err)
	}
	done := bench.FirstTransfers(ctx, l, 30*time.Second)
	for i, k := range bench.TransferKinds {
		if done[i].IsZero() {
			t.Errorf("no new %s transfer completed within 30 s of the fault", k)
			continue
		}
		t.Logf("a new 256 KiB %s transfer completed %s after the fault", k, done[i].Sub(faultAt).Round(time.Millisecond))
	}

	wg := l.EdgeWG()
	var opened *bench.Event
	testsupport.WaitFor(t, 10*time.Second, "the blackhole's incident", func() bool {
		for _, e := range bench.LogEvents(a.Logs()) {
			if e.Kind == "incident" && e.Target == wg && !e.Time.Before(faultAt) {
				opened = &e
				return true
			}
		}
		return false
	})
	if !strings.Contains(opened.Summary, "1328") || !strings.Contains(opened.Summary, "1400") {
		t.Errorf("the incident does not name the path MTU: %s", opened.Summary)
	}
	t.Logf("incident %s after the fault: %s", opened.Time.Sub(faultAt).Round(time.Millisecond), opened.Summary)
	acted := map[string]bool{}
	for _, e := range bench.LogEvents(a.Logs()) {
		if e.Time.Before(faultAt) {
			continue
		}
		switch {
		case e.Kind == "action" && (e.Action == "handshake" || e.Action == "rebind" || e.Action == "bounce" || e.Action == "restart-unit" || e.Action == "endpoint" || e.Action == "reassert"):
			t.Errorf("a rung of the ladder ran for a path MTU: %+v", e)
		case e.Kind == "incident" && strings.HasPrefix(e.Target, wg+"/"):
			t.Errorf("the peer was taken for dark: %+v", e)
		case e.Kind == "action":
			acted[e.Action] = true
		}
	}
	if !acted["mss-clamp"] || !acted["link-mtu"] {
		t.Errorf("actions %v, want mss-clamp and link-mtu", acted)
	}
	// The agent's own reporting goes over the same uplink.
	testsupport.WaitFor(t, 15*time.Second, "the incident at the cloud", func() bool {
		for _, e := range cloud.Events() {
			if e.ID == opened.ID {
				t.Logf("the incident reached the cloud %s after the fault", e.Received.Sub(faultAt).Round(time.Millisecond))
				return true
			}
		}
		return false
	})
	if c := pathCheck(); c == nil || c["state"] != "clamped" {
		t.Errorf("path-mtu check under the fault: %v", c)
	}
	if st := l.StatsSince(faultAt); len(st.Outages) > 0 {
		t.Errorf("small telemetry stopped under the fault: %+v", st.Outages)
	}

	passAt := time.Now()
	if err := l.Pass(); err != nil {
		t.Fatal(err)
	}
	if done := bench.FirstTransfers(ctx, l, 10*time.Second); done[0].IsZero() || done[1].IsZero() || done[2].IsZero() || done[3].IsZero() {
		t.Errorf("transfers after fault pass: %v", done)
	}
	testsupport.WaitFor(t, relax+20*time.Second, "the clamp relaxed", func() bool {
		c := pathCheck()
		info, _ := c["path_mtu"].(map[string]any)
		return c != nil && c["state"] == "ok" && info["table"] == nil && info["link_mtu_set"] == nil
	})
	for _, e := range bench.LogEvents(a.Logs()) {
		if e.Kind == "path-mtu" && e.Result == "relaxed" && !e.Time.Before(passAt) {
			t.Logf("relaxed %s after fault pass: %s", e.Time.Sub(passAt).Round(time.Millisecond), e.Summary)
		}
	}
	out, err := l.Exec(ctx, lab.Edge, "ip", "-o", "link", "show", "dev", wg)
	if err != nil || !strings.Contains(string(out), "mtu 1420") {
		t.Errorf("the tunnel's MTU after the relax: %v: %s", err, out)
	}
	// The clamp table goes; the traffic watch stays, counting.
	if out, err := l.Exec(ctx, lab.Edge, "nft", "list", "tables"); err != nil ||
		slices.Contains(strings.Split(string(out), "\n"), "table inet "+netfix.ClampTable(wg)) ||
		!slices.Contains(strings.Split(string(out), "\n"), "table inet "+netfix.WatchTable(wg)) {
		t.Errorf("after the relax the tables are (%v):\n%s\nwant the traffic watch and no clamp", err, out)
	}
}

// What an uninstall does: with the clamp in place and the agent stopped
// (a stop keeps the table: the path still needs it, and the next start
// takes it over), `edgeheal cleanup` removes the table and puts the
// tunnel's MTU back.
func TestLabCleanupUndoesThePathMTURepairOnceTheAgentStopped(t *testing.T) {
	l := labtest.New(t, lab.Options{OffloadOff: true})
	bin := buildBinary(t)
	ctx := context.Background()
	if err := l.PathMTU(1400, 0); err != nil {
		t.Fatal(err)
	}
	a, err := bench.StartAgent(ctx, l, bench.AgentOptions{Binary: bin, Dir: t.TempDir(), Params: bench.ConfigParams{Node: "mtu-cleanup"}})
	if err != nil {
		t.Fatal(err)
	}
	wg := l.EdgeWG()
	mtu := func() string {
		out, _ := l.Exec(ctx, lab.Edge, "ip", "-o", "link", "show", "dev", wg)
		return string(out)
	}
	tables := func() string {
		out, _ := l.Exec(ctx, lab.Edge, "nft", "list", "tables")
		return string(out)
	}
	testsupport.WaitFor(t, 30*time.Second, "the clamp and the lowered MTU", func() bool {
		return strings.Contains(mtu(), "mtu 1328") && strings.Contains(tables(), "edgeheal-"+wg)
	})
	if err := a.Stop(10 * time.Second); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(tables(), "edgeheal-"+wg) {
		t.Fatalf("a stop removed the table: %s", tables())
	}
	out, err := l.Exec(ctx, lab.Edge, bin, "cleanup")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("edgeheal cleanup:\n%s", out)
	if strings.Contains(tables(), "edgeheal") || !strings.Contains(mtu(), "mtu 1420") {
		t.Errorf("after cleanup: tables %q, link %q", tables(), mtu())
	}
	if out, err := l.Exec(ctx, lab.Edge, bin, "cleanup"); err != nil || !strings.Contains(string(out), "nothing of edgeheal's to remove") {
		t.Errorf("a second cleanup = %v: %s", err, out)
	}
}
