package lab_test

import (
	"context"
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/edgeheal/edgeheal/internal/testsupport"

	"github.com/edgeheal/edgeheal/internal/testsupport/labtest"
	"github.com/edgeheal/edgeheal/lab"
	"github.com/safchain/ethtool"
	"github.com/vishvananda/netlink"
	"golang.zx2c4.com/wireguard/wgctrl"
	"golang.zx2c4.com/wireguard/wgctrl/wgtypes"
)

func handshakeDone(t *testing.T, l *lab.Lab) bool {
	t.Helper()
	hs, err := l.EdgeHandshake()
	if err != nil {
		t.Fatal(err)
	}
	return !hs.IsZero()
}

func csumErrors(t *testing.T, l *lab.Lab) uint64 {
	t.Helper()
	n, err := l.CloudUDPInCsumErrors()
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// uplinkOffloadOff turns the edge uplink's TX checksum offload off the way
// an operator (or edgeheal) does: ethtool, inside the edge namespace.
func uplinkOffloadOff(t *testing.T, l *lab.Lab) {
	t.Helper()
	err := l.Do(lab.Edge, func() error {
		e, err := ethtool.NewEthtool()
		if err != nil {
			return err
		}
		defer e.Close()
		return e.Change(l.EdgeUplink(), map[string]bool{"tx-checksum-ip-generic": false})
	})
	if err != nil {
		t.Fatalf("turning offload off: %v", err)
	}
}

func TestLabOffloadOnKeepsTunnelDarkUntilEthtoolTurnsItOff(t *testing.T) {
	l := labtest.New(t, lab.Options{})
	if on, err := l.UplinkTxChecksumOn(); err != nil || !on {
		t.Fatalf("uplink TX checksum offload on at start = %v, %v; want true, nil", on, err)
	}

	time.Sleep(3 * time.Second)
	if handshakeDone(t, l) {
		t.Errorf("handshake completed with offload on; want none")
	}
	st := l.Stats()
	if st.Sent == 0 || st.Received != 0 || st.LossPct != 100 {
		t.Errorf("telemetry with offload on = sent %d received %d loss %.1f%%; want all lost", st.Sent, st.Received, st.LossPct)
	}
	errs := csumErrors(t, l)
	if errs == 0 {
		t.Errorf("cloud UdpInCsumErrors = 0 with offload on; want > 0")
	}
	t.Logf("offload on for 3 s: sent %d, received %d, cloud UdpInCsumErrors %d", st.Sent, st.Received, errs)

	fixed := time.Now()
	uplinkOffloadOff(t, l)
	hs := testsupport.WaitFor(t, 15*time.Second, "handshake after offload off", func() bool { return handshakeDone(t, l) })
	flow := testsupport.WaitFor(t, 15*time.Second, "telemetry after offload off", func() bool { return l.StatsSince(fixed).Received > 0 })
	t.Logf("after offload off: handshake in %v, telemetry flowing %v later", hs.Round(time.Millisecond), flow.Round(time.Millisecond))
}

func TestLabReplugBringsOffloadBackAndDarkensTunnel(t *testing.T) {
	l := labtest.New(t, lab.Options{OffloadOff: true})
	testsupport.WaitFor(t, 10*time.Second, "telemetry with offload off", func() bool { return l.Stats().Received > 20 })

	before := csumErrors(t, l)
	replugged := time.Now()
	if err := l.Replug(context.Background()); err != nil {
		t.Fatalf("replug: %v", err)
	}
	if on, err := l.UplinkTxChecksumOn(); err != nil || !on {
		t.Fatalf("uplink TX checksum offload on after replug = %v, %v; want true, nil", on, err)
	}
	time.Sleep(3 * time.Second)
	st := l.StatsSince(replugged.Add(100 * time.Millisecond))
	if st.Received != 0 || st.Sent == 0 {
		t.Errorf("telemetry after replug = sent %d received %d; want all lost", st.Sent, st.Received)
	}
	if after := csumErrors(t, l); after <= before {
		t.Errorf("cloud UdpInCsumErrors %d -> %d after replug; want a rise", before, after)
	}

	// The relay re-bound: with offload off again, traffic flows.
	type seen struct {
		at  time.Time
		err error
	}
	offc := make(chan seen, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		at, err := l.WaitUplinkTxChecksumOff(ctx)
		offc <- seen{at, err}
	}()
	time.Sleep(100 * time.Millisecond)
	fixed := time.Now()
	if err := l.SetUplinkTxChecksum(false); err != nil {
		t.Fatal(err)
	}
	off := <-offc
	if off.err != nil || off.at.Before(fixed) {
		t.Errorf("WaitUplinkTxChecksumOff = %v, %v; want a time after %v", off.at, off.err, fixed)
	}
	t.Logf("offload exposure after the replug: %v (seen %v after the change)",
		off.at.Sub(l.UplinkPluggedAt()).Round(time.Millisecond), off.at.Sub(fixed).Round(time.Microsecond))
	d := testsupport.WaitFor(t, 20*time.Second, "telemetry after offload off again", func() bool { return l.StatsSince(fixed).Received > 0 })
	t.Logf("replugged uplink dark for 3 s; telemetry back %v after offload off", d.Round(time.Millisecond))
}

func TestLabBlackholeOf20sLeavesGapAndRecoversByItself(t *testing.T) {
	l := labtest.New(t, lab.Options{OffloadOff: true})
	testsupport.WaitFor(t, 10*time.Second, "telemetry", func() bool { return l.Stats().Received > 20 })

	const block = 20 * time.Second
	start := time.Now()
	if err := l.Blackhole(block); err != nil {
		t.Fatal(err)
	}
	if f, _ := l.Fault(); f.Kind != lab.FaultBlackhole {
		t.Fatalf("fault = %v; want blackhole", f)
	}
	end := start.Add(block)
	time.Sleep(block)
	testsupport.WaitFor(t, 15*time.Second, "telemetry after the blackhole", func() bool {
		st := l.StatsSince(start)
		return len(st.Outages) > 0 && !st.Outages[0].End.IsZero()
	})
	if f, _ := l.Fault(); f.Kind != lab.FaultPass {
		t.Errorf("fault after %v = %v; want pass", block, f)
	}
	st := l.StatsSince(start)
	o := st.Outages[0]
	gap := o.Duration()
	if gap < block-time.Second || gap > block+15*time.Second {
		t.Errorf("telemetry gap = %v; want about %v", gap, block)
	}
	t.Logf("blackhole %v: gap %v (%d messages lost), recovered %v after the path returned",
		block, gap.Round(time.Millisecond), o.Lost, o.End.Sub(end).Round(time.Millisecond))
}

// The blackhole is the cell's outage, not a cut cable: IP frames are
// dropped while ARP passes, as a real uplink answers for its own link.
// (With ARP dropped too, the first packet after a long block waited for
// the kernel's next ARP solicitation: docs/lab.md, "Faults".)
func TestLabBlackholeDropsIPButPassesARP(t *testing.T) {
	l := labtest.New(t, lab.Options{OffloadOff: true, NoTelemetry: true})
	if err := l.Blackhole(0); err != nil {
		t.Fatal(err)
	}
	cloud := net.IP(l.CloudPublicAddr().AsSlice())
	neighState := func() int {
		state := -1
		err := l.Do(lab.Edge, func() error {
			link, err := netlink.LinkByName(l.EdgeUplink())
			if err != nil {
				return err
			}
			ns, err := netlink.NeighList(link.Attrs().Index, netlink.FAMILY_V4)
			for _, n := range ns {
				if n.IP.Equal(cloud) {
					state = n.State
				}
			}
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		return state
	}
	// Forget the cloud's address, then make the edge resolve it again.
	err := l.Do(lab.Edge, func() error {
		link, err := netlink.LinkByName(l.EdgeUplink())
		if err != nil {
			return err
		}
		_ = netlink.NeighDel(&netlink.Neigh{LinkIndex: link.Attrs().Index, IP: cloud})
		c, err := net.DialUDP("udp4", nil, &net.UDPAddr{IP: cloud, Port: 9})
		if err != nil {
			return err
		}
		defer c.Close()
		_, err = c.Write([]byte("who has"))
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	testsupport.WaitFor(t, 5*time.Second, "the edge to resolve the cloud's address during the blackhole", func() bool {
		return neighState() == netlink.NUD_REACHABLE
	})
	err = l.Do(lab.Edge, func() error {
		c, err := net.DialTimeout("tcp", l.BrokerPublicAddr().String(), 500*time.Millisecond)
		if err == nil {
			c.Close()
			return errors.New("a TCP connection to the broker opened through the blackhole")
		}
		return nil
	})
	if err != nil {
		t.Error(err)
	}
}

func TestLabStartsInSecondsAndLeavesNothingBehind(t *testing.T) {
	testsupport.RequireRoot(t, "the lab: network namespaces, TUN, AF_PACKET")
	for _, broker := range []lab.BrokerKind{lab.BrokerEmbedded, lab.BrokerMosquitto} {
		t.Run("with the "+string(broker)+" broker", func(t *testing.T) {
			begin := time.Now()
			l, err := lab.Start(context.Background(), lab.Options{Broker: broker, OffloadOff: true})
			if err != nil {
				t.Fatal(err)
			}
			up := time.Since(begin)
			t.Cleanup(func() { l.Close() }) // also when a check below fails
			prefix, runDir := l.Prefix(), l.RunDir()
			if left := lab.Leftovers(prefix, runDir); len(left) < 4 {
				t.Errorf("a running lab shows %v; want its namespaces, sockets and run dir", left)
			}
			flow := testsupport.WaitFor(t, 15*time.Second, "telemetry", func() bool { return l.Stats().Received > 0 })
			if err := l.Close(); err != nil {
				t.Errorf("close: %v", err)
			}
			t.Logf("lab up in %v, telemetry flowing %v later", up.Round(time.Millisecond), flow.Round(time.Millisecond))
			if left := lab.Leftovers(prefix, runDir); len(left) > 0 {
				t.Errorf("left behind after Close: %v", left)
			}
		})
	}
	t.Run("with a process left running in the edge namespace", func(t *testing.T) {
		l, err := lab.Start(context.Background(), lab.Options{NoTelemetry: true})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { l.Close() })
		cmd := l.Command(context.Background(), lab.Edge, "sleep", "60")
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		if err := l.Close(); err != nil {
			t.Errorf("close: %v", err)
		}
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			t.Errorf("sleep in the edge namespace still running 5 s after Close")
		}
		if left := lab.Leftovers(l.Prefix(), l.RunDir()); len(left) > 0 {
			t.Errorf("left behind after Close: %v", left)
		}
	})
	t.Run("after a failed start", func(t *testing.T) {
		l, err := lab.Start(context.Background(), lab.Options{Broker: lab.BrokerMosquitto, MosquittoPath: "/nonexistent/mosquitto", Prefix: "ehlfail"})
		if err == nil {
			l.Close()
			t.Fatal("start with a missing mosquitto succeeded; want an error")
		}
		if left := lab.Leftovers("ehlfail", "/run/edgeheal-lab/ehlfail"); len(left) > 0 {
			t.Errorf("left behind after a failed start: %v", left)
		}
	})
}

func TestLabMoveCloudEndpointDarkensTunnelUntilTheNameIsResolvedAgain(t *testing.T) {
	l := labtest.New(t, lab.Options{OffloadOff: true})
	testsupport.WaitFor(t, 10*time.Second, "telemetry", func() bool { return l.Stats().Received > 10 })

	moved := time.Now()
	addr, err := l.MoveCloudEndpoint()
	if err != nil {
		t.Fatal(err)
	}
	if addr == l.EdgeUplinkAddr() || addr.String() == "192.0.2.1" || l.CloudPublicAddr() != addr {
		t.Fatalf("moved to %v (CloudPublicAddr %v); want a new cloud address", addr, l.CloudPublicAddr())
	}
	out, err := l.Exec(context.Background(), lab.Edge, "getent", "ahostsv4", lab.CloudHost)
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Fields(string(out)); len(got) == 0 || got[0] != addr.String() {
		t.Fatalf("%s resolves in the edge to %q; want %v", lab.CloudHost, out, addr)
	}
	time.Sleep(2 * time.Second)
	if st := l.StatsSince(moved.Add(200 * time.Millisecond)); st.Received != 0 {
		t.Errorf("telemetry after the move = %d received; want none (the edge still uses the old endpoint)", st.Received)
	}

	if out, err := l.Exec(context.Background(), lab.Edge, "wg-quick", "strip", l.EdgeWGConfig()); err != nil || !strings.Contains(string(out), lab.CloudHost) {
		t.Errorf("wg-quick strip %s = %q, %v; want a config naming %s", l.EdgeWGConfig(), out, err, lab.CloudHost)
	}

	// Re-resolving, as reresolve-dns.sh or edgeheal would.
	resolved := time.Now()
	_, err = l.Exec(context.Background(), lab.Edge, "wg", "set", l.EdgeWG(), "peer", l.CloudPublicKey().String(), "endpoint", lab.CloudHost+":51820")
	if err != nil {
		t.Fatal(err)
	}
	d := testsupport.WaitFor(t, 20*time.Second, "telemetry after re-resolving", func() bool { return l.StatsSince(resolved).Received > 0 })
	t.Logf("cloud moved to %v; telemetry back %v after the edge re-resolved %s", addr, d.Round(time.Millisecond), lab.CloudHost)
}

func TestLabRestartCloudWireGuardKeepsKeyAndPortButDropsSessions(t *testing.T) {
	l := labtest.New(t, lab.Options{OffloadOff: true})
	testsupport.WaitFor(t, 10*time.Second, "telemetry", func() bool { return l.Stats().Received > 10 })
	wg, err := wgctrl.New()
	if err != nil {
		t.Fatal(err)
	}
	defer wg.Close()

	if err := l.AddCloudPeers(100); err != nil {
		t.Fatal(err)
	}
	if dev, err := wg.Device(l.CloudWG()); err != nil || len(dev.Peers) != 101 {
		t.Fatalf("cloud device after adding 100 peers: %v peers, %v; want 101", len(dev.Peers), err)
	}
	if err := l.RestartCloudWireGuard(); err != nil {
		t.Fatal(err)
	}
	dev, err := wg.Device(l.CloudWG())
	if err != nil {
		t.Fatal(err)
	}
	if dev.PublicKey != l.CloudPublicKey() || dev.ListenPort != lab.WireGuardPort {
		t.Errorf("restarted cloud device key %v port %d; want %v %d", dev.PublicKey, dev.ListenPort, l.CloudPublicKey(), lab.WireGuardPort)
	}
	if len(dev.Peers) != 1 || !dev.Peers[0].LastHandshakeTime.IsZero() || dev.Peers[0].Endpoint != nil {
		t.Fatalf("restarted cloud peers = %+v; want the edge, with no session and no endpoint", dev.Peers)
	}

	// A forced handshake from the edge (remove and re-add the peer, as
	// edgeheal's handshake rung does) brings the tunnel back at once.
	edge, err := wg.Device(l.EdgeWG())
	if err != nil {
		t.Fatal(err)
	}
	p := edge.Peers[0]
	ka := 25 * time.Second
	forced := time.Now()
	err = wg.ConfigureDevice(l.EdgeWG(), wgtypes.Config{Peers: []wgtypes.PeerConfig{{PublicKey: p.PublicKey, Remove: true}}})
	if err == nil {
		err = wg.ConfigureDevice(l.EdgeWG(), wgtypes.Config{Peers: []wgtypes.PeerConfig{{
			PublicKey: p.PublicKey, Endpoint: p.Endpoint, AllowedIPs: p.AllowedIPs, PersistentKeepaliveInterval: &ka,
		}}})
	}
	if err != nil {
		t.Fatal(err)
	}
	d := testsupport.WaitFor(t, 10*time.Second, "telemetry after a forced handshake", func() bool { return l.StatsSince(forced).Received > 0 })
	t.Logf("cloud WireGuard restarted; telemetry back %v after a forced handshake", d.Round(time.Millisecond))
}

// connectTime is how long a TCP connect from the pod to the broker through
// the tunnel takes, or an error.
func connectTime(l *lab.Lab) (time.Duration, error) {
	var d time.Duration
	err := l.Do(lab.Pod, func() error {
		begin := time.Now()
		c, err := net.DialTimeout("tcp", l.BrokerTunnelAddr().String(), 2*time.Second)
		d = time.Since(begin)
		if err != nil {
			return err
		}
		return c.Close()
	})
	return d, err
}

func TestLabDelayAndLossShapeTheModemsTraffic(t *testing.T) {
	l := labtest.New(t, lab.Options{OffloadOff: true, NoTelemetry: true, Keepalive: time.Second})
	testsupport.WaitFor(t, 10*time.Second, "a handshake", func() bool { return handshakeDone(t, l) })
	if _, err := connectTime(l); err != nil {
		t.Fatalf("connecting through a passing modem: %v", err)
	}

	if err := l.Delay(150*time.Millisecond, 0, 0); err != nil {
		t.Fatal(err)
	}
	d, err := connectTime(l)
	if err != nil {
		t.Fatalf("connecting through a delaying modem: %v", err)
	}
	// SYN and SYN-ACK each cross the modem once: at least two delays.
	if d < 300*time.Millisecond {
		t.Errorf("connect through a 150 ms modem took %v; want at least 300 ms", d)
	}

	if err := l.Loss(100, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := connectTime(l); err == nil {
		t.Errorf("connect through a modem losing 100%% succeeded; want a timeout")
	}
	if err := l.Pass(); err != nil {
		t.Fatal(err)
	}
	if _, err := connectTime(l); err != nil {
		t.Errorf("connecting after pass: %v", err)
	}
}

func TestLabBrokerStopAndStartMakesATelemetryGap(t *testing.T) {
	l := labtest.New(t, lab.Options{OffloadOff: true})
	testsupport.WaitFor(t, 10*time.Second, "telemetry", func() bool { return l.Stats().Received > 10 })
	stopped := time.Now()
	if err := l.StopBroker(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * time.Second)
	if st := l.StatsSince(stopped.Add(200 * time.Millisecond)); st.Received != 0 {
		t.Errorf("telemetry with the broker stopped = %d received; want none", st.Received)
	}
	if err := l.StartBroker(); err != nil {
		t.Fatal(err)
	}
	started := time.Now()
	d := testsupport.WaitFor(t, 10*time.Second, "telemetry after the broker returned", func() bool { return l.StatsSince(started).Received > 0 })
	hs, err := l.EdgeHandshake()
	if err != nil || hs.IsZero() {
		t.Errorf("edge handshake = %v, %v; the tunnel should not care about the broker", hs, err)
	}
	t.Logf("broker back; telemetry %v later", d.Round(time.Millisecond))
}

// BenchmarkLabStart measures bringing a lab up (namespaces, links, relay,
// two wireguard-go devices, the embedded broker); Close is not timed.
func BenchmarkLabStart(b *testing.B) {
	testsupport.RequireRoot(b, "the lab: network namespaces, TUN, AF_PACKET")
	for b.Loop() {
		l, err := lab.Start(context.Background(), lab.Options{NoTelemetry: true})
		if err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		if err := l.Close(); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
}
