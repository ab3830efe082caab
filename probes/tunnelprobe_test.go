package probes

import (
	"context"
	"net"
	"strconv"
	"testing"
	"time"
)

func TestParseTunnelTarget(t *testing.T) {
	tests := []struct {
		name, target, scheme, addr string
		wantErr                    bool
	}{
		{name: "a tcp target with an IPv4 address", target: "tcp://10.0.0.1:1883", scheme: "tcp", addr: "10.0.0.1:1883"},
		{name: "a tcp target with an IPv6 address", target: "tcp://[fd00::1]:443", scheme: "tcp", addr: "[fd00::1]:443"},
		{name: "an icmp target", target: "icmp://10.0.0.1", scheme: "icmp", addr: "10.0.0.1:0"},
		{name: "an icmp target with a bracketed IPv6 address", target: "icmp://[fd00::1]", scheme: "icmp", addr: "[fd00::1]:0"},
		{name: "an IPv4-mapped address is IPv4", target: "icmp://::ffff:10.0.0.1", scheme: "icmp", addr: "10.0.0.1:0"},
		{name: "a host name is refused", target: "tcp://cloud.example:1883", wantErr: true},
		{name: "tcp without a port is refused", target: "tcp://10.0.0.1", wantErr: true},
		{name: "tcp port 0 is refused", target: "tcp://10.0.0.1:0", wantErr: true},
		{name: "icmp with a port is refused", target: "icmp://10.0.0.1:7", wantErr: true},
		{name: "an unknown scheme is refused", target: "udp://10.0.0.1:53", wantErr: true},
		{name: "no scheme is refused", target: "10.0.0.1", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			scheme, addr, err := parseTunnelTarget(tt.target)
			if (err != nil) != tt.wantErr {
				t.Fatalf("err = %v, want error %v", err, tt.wantErr)
			}
			if err == nil && (scheme != tt.scheme || addr.String() != tt.addr) {
				t.Errorf("got %s %s, want %s %s", scheme, addr, tt.scheme, tt.addr)
			}
		})
	}
}

func FuzzParseTunnelTarget(f *testing.F) {
	for _, s := range []string{"tcp://10.0.0.1:1883", "icmp://[fd00::1]", "icmp://", "tcp://:", "x://y"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		scheme, addr, err := parseTunnelTarget(s)
		if err != nil {
			return
		}
		if scheme != "tcp" && scheme != "icmp" || !addr.Addr().IsValid() || (scheme == "tcp") != (addr.Port() != 0) {
			t.Fatalf("parseTunnelTarget(%q) = %q, %s", s, scheme, addr)
		}
	})
}

func TestProbeTunnelTCPOnLoopback(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ctx := context.Background()

	r := ProbeTunnel(ctx, "tcp://127.0.0.1:"+strconv.Itoa(port), time.Second)
	if !r.OK || r.Err != nil || r.Class != "ok" || !r.Answered || r.Method != "tcp" {
		t.Errorf("listening port: %+v, want ok", r)
	}
	ln.Close()
	r = ProbeTunnel(ctx, "tcp://127.0.0.1:"+strconv.Itoa(port), time.Second)
	if r.OK || r.Err != nil || r.Class != "refused" || !r.Answered {
		t.Errorf("closed port: %+v, want a confirmed refused that was answered", r)
	}
}

func TestProbeTunnelCouldNotProbe(t *testing.T) {
	ctx := context.Background()
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	tests := []struct {
		name    string
		ctx     context.Context
		target  string
		timeout time.Duration
	}{
		{name: "a bad target is an error, not a failure", ctx: ctx, target: "tcp://cloud:1", timeout: time.Second},
		{name: "a zero timeout is an error", ctx: ctx, target: "tcp://127.0.0.1:1", timeout: 0},
		{name: "a cancelled context is an error", ctx: cancelled, target: "tcp://127.0.0.1:1", timeout: time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := ProbeTunnel(tt.ctx, tt.target, tt.timeout)
			if r.Err == nil || r.OK || r.Class != "error" || r.Answered {
				t.Errorf("ProbeTunnel = %+v, want Err set and Class error", r)
			}
		})
	}
}
