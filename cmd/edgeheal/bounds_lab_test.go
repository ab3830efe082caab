package main

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	mqtt "github.com/eclipse/paho.mqtt.golang"

	"github.com/edgeheal/edgeheal/internal/testsupport"
	"github.com/edgeheal/edgeheal/internal/testsupport/labtest"
	"github.com/edgeheal/edgeheal/lab"
)

// TestLabDisruptiveActionsStayWithinTheBudgetAcrossKillsAndReloads runs
// the built daemon on a flapping tunnel (the cloud drops the tunnel's UDP
// for 5 s of every 20 s while the host path answers: each flap is a dark
// session over a working path, what a forced handshake is for) and kills
// it with SIGKILL five times and reloads it with SIGHUP five times inside
// one policy.window. The disruptive actions the cloud receives never
// exceed policy.max_disruptive: the ledger in --state-dir carries the
// budget across every restart and reload.
func TestLabDisruptiveActionsStayWithinTheBudgetAcrossKillsAndReloads(t *testing.T) {
	testsupport.RequireRoot(t, "the lab: network namespaces, TUN, AF_PACKET, nftables")
	l := labtest.New(t, lab.Options{OffloadOff: true, Keepalive: 20 * time.Second})
	bin := buildBinary(t)
	dir := t.TempDir()
	node := "lab-" + l.Prefix()
	const maxDisruptive = 3
	cfg := filepath.Join(dir, "config.yaml")
	writeFile(t, cfg, fmt.Sprintf(`version: 1
node: {name: %s, site: lab}
tunnels:
  - interface: %s
    probe: {target: "tcp://%s"}
report:
  mqtt: {broker: "tcp://%s"}
  http: {listen: "", socket: ""}
  state_dir: %s
policy: {cooldown: 5s, max_disruptive: %d, window: 1h, verify_timeout: 5s}
`, node, l.EdgeWG(), l.BrokerTunnelAddr(), l.BrokerPublicAddr(), filepath.Join(dir, "report"), maxDisruptive))

	events := &cloudEvents{seen: map[string]bool{}}
	sub := cloudSubscriber(t, l, "edgeheal/v1/"+node+"/event", events.ch())
	defer sub.Disconnect(100)

	stateDir := filepath.Join(dir, "state")
	d := labAgent(t, l, bin, cfg, stateDir)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	flaps := flapTunnel(ctx, t, l, 5*time.Second, 20*time.Second)

	// Ten disturbances, 20 s apart, each in the middle of a flap or just
	// after it: kill -9 and start again, or SIGHUP.
	for i := range 10 {
		time.Sleep(20 * time.Second)
		if i%2 == 0 {
			if err := d.cmd.Process.Signal(syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			err := <-d.done
			d.done <- err // labAgent's cleanup waits for it too
			d = labAgent(t, l, bin, cfg, stateDir)
			continue
		}
		if err := d.cmd.Process.Signal(syscall.SIGHUP); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(10 * time.Second) // the last events reach the cloud
	cancel()
	n := <-flaps

	got := events.disruptive()
	t.Logf("%d flaps, 5 kills, 5 reloads: disruptive actions the cloud received: %v", n, got)
	if len(got) > maxDisruptive {
		t.Errorf("%d disruptive actions in one window, want at most policy.max_disruptive = %d", len(got), maxDisruptive)
	}
	if len(got) == 0 {
		t.Error("no disruptive action at all: the flaps did not exercise the ladder")
	}
}

// flapTunnel drops the tunnel's UDP at the cloud for dark of every period
// until ctx ends, then removes its rule; the channel gets the number of
// flaps.
func flapTunnel(ctx context.Context, t *testing.T, l *lab.Lab, dark, period time.Duration) <-chan int {
	t.Helper()
	port := strconv.Itoa(int(l.CloudEndpoint().Port()))
	nft := func(args ...string) error {
		_, err := l.Exec(context.Background(), lab.Cloud, "nft", args...)
		return err
	}
	for _, args := range [][]string{
		{"add", "table", "inet", "edgeheal_flap"},
		{"add", "chain", "inet", "edgeheal_flap", "in", "{ type filter hook input priority 0 ; }"},
	} {
		if err := nft(args...); err != nil {
			t.Fatalf("nft: %v", err)
		}
	}
	out := make(chan int, 1)
	go func() {
		n := 0
		defer func() { _ = nft("delete", "table", "inet", "edgeheal_flap"); out <- n }()
		for {
			if err := nft("add", "rule", "inet", "edgeheal_flap", "in", "udp", "dport", port, "drop"); err != nil {
				t.Errorf("flap on: %v", err)
				return
			}
			n++
			select {
			case <-ctx.Done():
				return
			case <-time.After(dark):
			}
			if err := nft("flush", "chain", "inet", "edgeheal_flap", "in"); err != nil {
				t.Errorf("flap off: %v", err)
				return
			}
			select {
			case <-ctx.Done():
				return
			case <-time.After(period - dark):
			}
		}
	}()
	return out
}

// cloudEvents keeps the events the cloud received, once each (delivery is
// at least once: by id).
type cloudEvents struct {
	mu   sync.Mutex
	seen map[string]bool
	evs  []map[string]any
}

func (c *cloudEvents) ch() chan<- mqtt.Message {
	ch := make(chan mqtt.Message, 1000)
	go func() {
		for m := range ch {
			var v map[string]any
			if json.Unmarshal(m.Payload(), &v) != nil {
				continue
			}
			id, _ := v["id"].(string)
			c.mu.Lock()
			if !c.seen[id] {
				c.seen[id] = true
				c.evs = append(c.evs, v)
			}
			c.mu.Unlock()
		}
	}()
	return ch
}

// disruptive lists the disruptive tunnel actions that changed something.
func (c *cloudEvents) disruptive() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []string
	for _, v := range c.evs {
		switch v["action"] {
		case "handshake", "rebind", "bounce", "restart-unit", "reresolve":
			if v["kind"] == "action" && v["result"] == "changed" {
				out = append(out, fmt.Sprintf("%v %v at %v", v["action"], v["target"], v["ts"]))
			}
		}
	}
	return out
}
