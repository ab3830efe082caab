package agent_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.zx2c4.com/wireguard/wgctrl/wgtypes"

	"github.com/edgeheal/edgeheal/agent"
	"github.com/edgeheal/edgeheal/agent/core"
	"github.com/edgeheal/edgeheal/configs"
	"github.com/edgeheal/edgeheal/internal/testsupport"
	"github.com/edgeheal/edgeheal/internal/testsupport/agentlab"
	"github.com/edgeheal/edgeheal/internal/testsupport/systemdlab"
	"github.com/edgeheal/edgeheal/internal/testsupport/wgpair"
	"github.com/edgeheal/edgeheal/wire"
)

// labSlowUnit takes 30 s to start, and keeps a journal of its own starts
// (the lab's systemd runs no journald): a restart of it is a restart-unit
// rung that holds its tunnel for 30 s.
const labSlowUnit = `[Unit]
Description=edgeheal lab: starts slowly
DefaultDependencies=no

[Service]
ExecStartPre=/bin/sh -c 'date +%%s >> /run/lab-slow.starts; sleep 30'
ExecStart=/bin/sleep 3600
StandardOutput=null
TimeoutStartSec=120
`

// TestLabARestartUnitUnderRealSystemdIsOneActionAcrossAReload runs the agent
// with two tunnels between the same two namespaces (real wireguard-go) and
// a real systemd for restart-unit. The first tunnel goes dark while its
// path works (the hub forgot the edge), and its ladder restarts a unit
// that takes 30 s to start. A reload arrives while the restart runs. Then:
// exactly one disruptive action is in flight at any time (the reloaded
// monitor waits for the restart, verifies it, and only then forces a
// handshake; the unit is started once more, by its journal); and the
// other tunnel's rounds keep their interval through it.
func TestLabARestartUnitUnderRealSystemdIsOneActionAcrossAReload(t *testing.T) {
	testsupport.RequireRoot(t, "systemd as PID 1 and wireguard-go in network namespaces")
	sd := systemdlab.Start(t, systemdlab.Options{Units: map[string]string{"lab-slow.service": labSlowUnit}})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	conn, err := sd.Conn(ctx)
	if err != nil {
		t.Fatalf("connecting to systemd: %v", err)
	}
	defer conn.Close()

	dark := wgpair.NewPair(t)
	dark.DefaultRoute(t)
	other := dark.Another(t)
	dark.Ping(t, dark.A, dark.B, 10*time.Second)
	other.Ping(t, other.A, other.B, 10*time.Second)
	sys := agentlab.OpenSystem(t, dark.A.NS)
	sys.Systemd = conn
	sys.Clock = agentlab.SyncedClock{Clock: sys.Clock} // this VM runs without NTP: restart-unit would be held
	cfg, err := configs.Parse("lab.yaml", []byte(fmt.Sprintf(`node: {name: lab}
tunnels:
  - interface: %s
    probe: {target: "icmp://%s"}
    heal: [restart-unit, handshake]
    unit: lab-slow.service
  - interface: %s
    probe: {target: "icmp://%s"}
policy: {cooldown: 1s, verify_timeout: 10s}
`, dark.A.Dev.Name, dark.B.Tunnel, other.A.Dev.Name, other.B.Tunnel)))
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var evs []core.Event
	var otherRounds []time.Time
	a := agent.New(cfg, agent.Options{OS: sys, Log: slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelInfo})),
		Emit: func(e core.Event) { mu.Lock(); evs = append(evs, e); mu.Unlock() },
		OnProbe: func(p core.ProbeSample) {
			if p.Kind == "tunnel" && p.Target == other.A.Dev.Name {
				mu.Lock()
				otherRounds = append(otherRounds, time.Now())
				mu.Unlock()
			}
		}})
	runCtx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(runCtx) }()
	defer func() { stop(); <-done }()
	time.Sleep(3 * time.Second) // the host paths are learnt

	// The hub forgets the edge: the tunnel is dark, the path works.
	forget := wgtypes.Config{Peers: []wgtypes.PeerConfig{{PublicKey: dark.A.PublicKey(), Remove: true}}}
	if err := dark.Client.ConfigureDevice(dark.B.Dev.Name, forget); err != nil {
		t.Fatal(err)
	}
	running := func() bool {
		for _, c := range a.Checks() {
			if c.Kind == wire.KindComponent && c.Target == "tunnel/"+dark.A.Dev.Name && strings.Contains(c.Detail, "restart-unit") {
				return true
			}
		}
		return false
	}
	testsupport.WaitFor(t, 15*time.Second, "the restart-unit rung running", running)
	restartSeen := time.Now()
	time.Sleep(5 * time.Second)
	reload := *cfg
	reload.Node.Site = "reloaded"
	if err := a.Reload(ctx, &reload); err != nil {
		t.Fatal(err)
	}
	reloadedAt := time.Now()
	testsupport.WaitFor(t, 90*time.Second, "the forced handshake after the restart was verified", func() bool {
		mu.Lock()
		defer mu.Unlock()
		for _, e := range evs {
			if e.Kind == wire.EventAction && e.Action == "handshake" {
				return true
			}
		}
		return false
	})

	mu.Lock()
	defer mu.Unlock()
	type span struct {
		action     string
		start, end time.Time
	}
	var spans []span
	for _, e := range evs {
		if e.Kind == wire.EventAction && (e.Action == "restart-unit" || e.Action == "handshake") {
			spans = append(spans, span{e.Action, e.Time, e.Time.Add(time.Duration(e.Duration * float64(time.Second)))})
		}
	}
	t.Logf("actions: %+v (reload at %s)", spans, reloadedAt.Format(time.RFC3339Nano))
	if len(spans) != 2 || spans[0].action != "restart-unit" || spans[1].action != "handshake" {
		t.Fatalf("actions %+v, want one restart-unit, then one handshake", spans)
	}
	if !spans[1].start.After(spans[0].end) {
		t.Errorf("the handshake started at %s, before the restart returned at %s: two disruptive actions in flight",
			spans[1].start.Format(time.RFC3339Nano), spans[0].end.Format(time.RFC3339Nano))
	}
	if spans[0].end.Before(reloadedAt) {
		t.Errorf("the restart returned at %s, before the reload at %s: the reload did not come during it", spans[0].end, reloadedAt)
	}
	starts, err := os.ReadFile(sd.Path("/run/lab-slow.starts"))
	if err != nil {
		t.Fatalf("the unit's journal of its starts: %v", err)
	}
	if n := strings.Count(string(starts), "\n"); n != 1 {
		t.Errorf("lab-slow.service started %d times (%q), want once: the one restart", n, starts)
	}
	// The other tunnel kept its 1 s rounds through the 30 s restart.
	var during int
	for _, at := range otherRounds {
		if at.After(restartSeen) && at.Before(spans[0].end) {
			during++
		}
	}
	if want := int(spans[0].end.Sub(restartSeen)/time.Second) / 2; during < want {
		t.Errorf("the other tunnel ran %d rounds during the %s restart, want at least %d (its interval is 1 s)",
			during, spans[0].end.Sub(restartSeen).Round(time.Second), want)
	}
	t.Logf("the other tunnel ran %d rounds during the %s restart", during, spans[0].end.Sub(restartSeen).Round(time.Second))
}
