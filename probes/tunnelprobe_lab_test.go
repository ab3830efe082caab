package probes

import (
	"context"
	"net"
	"os"
	"runtime"
	"strconv"
	"testing"
	"time"

	"github.com/edgeheal/edgeheal/internal/testsupport"

	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/edgeheal/edgeheal/internal/testsupport/wgpair"
)

// probeFrom runs ProbeTunnel inside ns, where its socket must be created.
func probeFrom(t *testing.T, ns *wgpair.NS, target string, timeout time.Duration) ProbeResult {
	t.Helper()
	var r ProbeResult
	if err := ns.Do(func() error {
		r = ProbeTunnel(context.Background(), target, timeout)
		return nil
	}); err != nil {
		t.Fatalf("entering namespace: %v", err)
	}
	return r
}

func setPingGroupRange(t *testing.T, ns *wgpair.NS, v string) {
	t.Helper()
	// /proc/sys/net belongs to the namespace of the thread that opens it.
	if err := ns.Do(func() error {
		return os.WriteFile("/proc/sys/net/ipv4/ping_group_range", []byte(v), 0o644)
	}); err != nil {
		t.Fatalf("setting ping_group_range: %v", err)
	}
}

func TestLabProbeTunnel(t *testing.T) {
	testsupport.RequireRoot(t, "wireguard-go devices in network namespaces")
	p := wgpair.NewPair(t)
	var ln net.Listener
	if err := p.B.NS.Do(func() error {
		var err error
		ln, err = net.Listen("tcp", p.B.Tunnel.String()+":0")
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() { // accept and close, as a broker would
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	port := strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
	tcpOK := "tcp://" + p.B.Tunnel.String() + ":" + port
	icmpB := "icmp://" + p.B.Tunnel.String()

	// The first probe also brings the session up (one handshake, ~ms).
	tests := []struct {
		name      string
		pingRange string // ping_group_range in A: "1 0" (the default: nobody) forces the raw socket
		target    string
		want      ProbeResult // Latency and Detail not compared
	}{
		{name: "a TCP connect through the tunnel is ok", target: tcpOK,
			want: ProbeResult{OK: true, Class: "ok", Answered: true, Method: "tcp"}},
		{name: "a closed port through the tunnel is refused but answered", target: "tcp://" + p.B.Tunnel.String() + ":1",
			want: ProbeResult{Class: "refused", Answered: true, Method: "tcp"}},
		{name: "an ICMP echo through the tunnel uses a ping socket when allowed", pingRange: "0 2147483647", target: icmpB,
			want: ProbeResult{OK: true, Class: "ok", Answered: true, Method: "icmp"}},
		{name: "an ICMP echo falls back to a raw socket when ping sockets are not allowed", pingRange: "1 0", target: icmpB,
			want: ProbeResult{OK: true, Class: "ok", Answered: true, Method: "icmp-raw"}},
		{name: "an address without a route is no-route", target: "icmp://203.0.113.9",
			want: ProbeResult{Class: "no-route", Method: "icmp-raw"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.pingRange != "" {
				setPingGroupRange(t, p.A.NS, tt.pingRange)
			}
			got := probeFrom(t, p.A.NS, tt.target, 5*time.Second)
			if got.Err != nil {
				t.Fatalf("ProbeTunnel(%s) could not probe: %v", tt.target, got.Err)
			}
			t.Logf("%s: %s in %s %s", tt.target, got.Class, got.Latency, got.Detail)
			got.Latency, got.Detail = 0, ""
			if got != tt.want {
				t.Errorf("ProbeTunnel(%s) = %+v, want %+v", tt.target, got, tt.want)
			}
		})
	}

	// Blackhole the underlay: the tunnel goes dark and both probes time out.
	veth, err := p.B.NS.Links.LinkByName(p.B.Veth)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.B.NS.Links.LinkSetDown(veth); err != nil {
		t.Fatal(err)
	}
	for _, target := range []string{tcpOK, icmpB} {
		got := probeFrom(t, p.A.NS, target, 300*time.Millisecond)
		if got.Err != nil || got.OK || got.Class != "timeout" || got.Answered {
			t.Errorf("dark tunnel: ProbeTunnel(%s) = %+v, want a confirmed timeout", target, got)
		}
	}
	if err := p.B.NS.Links.LinkSetUp(veth); err != nil {
		t.Fatal(err)
	}
}

// TestLabProbeTunnelWithoutPrivilegeIsAnError: with neither ping sockets
// allowed nor CAP_NET_RAW, the ICMP probe cannot be made, and that must be
// an error (never acted on), not a confirmed failure.
func TestLabProbeTunnelWithoutPrivilegeIsAnError(t *testing.T) {
	testsupport.RequireRoot(t, "wireguard-go devices in network namespaces")
	ns := wgpair.NewNS(t)
	setPingGroupRange(t, ns, "1 0")
	done := make(chan ProbeResult, 1)
	errc := make(chan error, 1)
	go func() {
		// Capabilities are per thread: this one drops CAP_NET_RAW and is
		// never unlocked, so it exits with the goroutine.
		runtime.LockOSThread()
		if err := netns.Set(ns.NsHandle()); err != nil {
			errc <- err
			return
		}
		hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
		var data [2]unix.CapUserData
		if err := unix.Capget(&hdr, &data[0]); err != nil {
			errc <- err
			return
		}
		data[0].Effective &^= 1 << unix.CAP_NET_RAW
		if err := unix.Capset(&hdr, &data[0]); err != nil {
			errc <- err
			return
		}
		done <- ProbeTunnel(context.Background(), "icmp://127.0.0.1", time.Second)
	}()
	select {
	case err := <-errc:
		t.Fatalf("setting up the thread: %v", err)
	case r := <-done:
		if r.Err == nil || r.OK || r.Class != "error" {
			t.Fatalf("ProbeTunnel = %+v, want Err set and Class error", r)
		}
		t.Logf("as expected: %v", r.Err)
	}
}
