package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	mqtt "github.com/eclipse/paho.mqtt.golang"

	"github.com/edgeheal/edgeheal/internal/testsupport"
	"github.com/edgeheal/edgeheal/internal/testsupport/labtest"
	"github.com/edgeheal/edgeheal/lab"
)

// TestLabDaemonHealsTheOffloadFaultAndReports runs the built daemon inside
// the lab's edge namespace, with the uplink's TX checksum offload on (the
// field failure): the daemon must turn it off, the tunnel and telemetry must
// come back, the cloud must see a retained `online` status and the events,
// `edgeheal status` must read the agent, and SIGTERM must leave `offline`.
func TestLabDaemonHealsTheOffloadFaultAndReports(t *testing.T) {
	testsupport.RequireRoot(t, "the lab: network namespaces, TUN, AF_PACKET")
	l := labtest.New(t, lab.Options{})
	bin := buildBinary(t)
	dir := t.TempDir()
	cfg := filepath.Join(dir, "config.yaml")
	node := "lab-" + l.Prefix()
	writeFile(t, cfg, fmt.Sprintf(`version: 1
node: {name: %s, site: lab}
uplinks:
  - name: %s
tunnels:
  - interface: %s
    endpoint_host: %s
    probe: {target: "tcp://%s"}
report:
  mqtt: {broker: "tcp://%s"}
  http: {listen: "127.0.0.1:9469", socket: %s/edgeheal.sock}
  state_dir: %s
`, node, l.EdgeUplink(), l.EdgeWG(), lab.CloudHost, l.BrokerTunnelAddr(), l.BrokerPublicAddr(), filepath.Join(dir, "state"), filepath.Join(dir, "state")))

	// The cloud's view: everything the agent publishes, from the cloud's namespace.
	got := make(chan mqtt.Message, 100)
	sub := cloudSubscriber(t, l, "edgeheal/v1/"+node+"/#", got)
	defer sub.Disconnect(100)

	if on, err := l.UplinkTxChecksumOn(); err != nil || !on {
		t.Fatalf("the lab must start with offload on (the fault): on=%v err=%v", on, err)
	}
	start := time.Now()
	cmd := exec.Command("ip", "netns", "exec", l.NetnsName(lab.Edge), bin, "run", "--config", cfg)
	logf, err := os.Create(filepath.Join(dir, "agent.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
		if t.Failed() {
			out, _ := os.ReadFile(logf.Name())
			t.Logf("agent log:\n%s", out)
		}
	})

	testsupport.WaitFor(t, 10*time.Second, "offload off on the edge uplink", func() bool {
		on, err := l.UplinkTxChecksumOn()
		return err == nil && !on
	})
	t.Logf("offload off %v after the agent started", time.Since(start).Round(time.Millisecond))
	testsupport.WaitFor(t, 20*time.Second, "telemetry through the tunnel", func() bool {
		s := l.StatsSince(time.Now().Add(-2 * time.Second))
		return s.Received > 0
	})
	t.Logf("telemetry flowing %v after the agent started", time.Since(start).Round(time.Millisecond))

	var sawOnline, sawOffloadAction bool
	deadline := time.After(20 * time.Second)
	for !sawOnline || !sawOffloadAction {
		select {
		case m := <-got:
			var v map[string]any
			if err := json.Unmarshal(m.Payload(), &v); err != nil {
				t.Fatalf("%s: not JSON: %s", m.Topic(), m.Payload())
			}
			if strings.HasSuffix(m.Topic(), "/status") && v["state"] == "online" {
				sawOnline = true
			}
			if strings.HasSuffix(m.Topic(), "/event") && v["kind"] == "action" && v["action"] == "offload-off" && v["result"] == "changed" {
				sawOffloadAction = true
			}
		case <-deadline:
			t.Fatalf("within 20s the cloud saw online=%v, offload-off action=%v", sawOnline, sawOffloadAction)
		}
	}

	out, err := l.Exec(context.Background(), lab.Edge, bin, "status", "--socket", filepath.Join(dir, "state", "edgeheal.sock"))
	if err != nil {
		t.Fatalf("edgeheal status: %v\n%s", err, out)
	}
	for _, want := range []string{"node " + node, "uplink", l.EdgeUplink(), "mqtt connected"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("edgeheal status lacks %q:\n%s", want, out)
		}
	}

	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Errorf("agent exit after SIGTERM: %v, want 0", err)
	}
	stopped = true
	// The retained status, read fresh: a clean stop leaves `offline`.
	fresh := make(chan mqtt.Message, 10)
	sub2 := cloudSubscriber(t, l, "edgeheal/v1/"+node+"/status", fresh)
	defer sub2.Disconnect(100)
	select {
	case m := <-fresh:
		if !strings.Contains(string(m.Payload()), `"state":"offline"`) {
			t.Errorf("retained status after SIGTERM = %s, want offline", m.Payload())
		}
	case <-time.After(5 * time.Second):
		t.Error("no retained status after SIGTERM")
	}
}

// cloudSubscriber subscribes to topic at the broker's public address,
// dialling from inside the cloud namespace, with a clean session.
func cloudSubscriber(t *testing.T, l *lab.Lab, topic string, got chan<- mqtt.Message) mqtt.Client {
	t.Helper()
	return cloudClient(t, l, fmt.Sprintf("cloud-%d", time.Now().UnixNano()), true, topic, got)
}

// cloudSession is cloudSubscriber with the persistent session id, as the
// fleet view subscribes: what the broker queued for the session while it
// was away (with Options.BrokerPersistence, also across a restart of the
// broker) arrives as soon as it connects again with the same id.
func cloudSession(t *testing.T, l *lab.Lab, id, topic string, got chan<- mqtt.Message) mqtt.Client {
	t.Helper()
	return cloudClient(t, l, id, false, topic, got)
}

func cloudClient(t *testing.T, l *lab.Lab, id string, clean bool, topic string, got chan<- mqtt.Message) mqtt.Client {
	t.Helper()
	addr := l.BrokerPublicAddr().String()
	deliver := func(_ mqtt.Client, m mqtt.Message) { got <- m }
	opts := mqtt.NewClientOptions().AddBroker("tcp://" + addr).SetClientID(id).SetCleanSession(clean).
		SetProtocolVersion(4).SetConnectTimeout(3 * time.Second).SetAutoReconnect(false).
		// A session's queued messages come before any SUBSCRIBE of this
		// connection.
		SetDefaultPublishHandler(deliver)
	opts.SetCustomOpenConnectionFn(func(_ *url.URL, _ mqtt.ClientOptions) (net.Conn, error) {
		return l.DialIn(lab.Cloud, addr, 3*time.Second)
	})
	c := mqtt.NewClient(opts)
	if tok := c.Connect(); !tok.WaitTimeout(5*time.Second) || tok.Error() != nil {
		t.Fatalf("cloud subscriber: connect: %v", tok.Error())
	}
	if tok := c.Subscribe(topic, 1, deliver); !tok.WaitTimeout(5*time.Second) || tok.Error() != nil {
		t.Fatalf("cloud subscriber: subscribe: %v", tok.Error())
	}
	return c
}
