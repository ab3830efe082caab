package agent

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestTunnelSplitHost(t *testing.T) {
	cur := &net.UDPAddr{IP: net.IPv4(203, 0, 113, 7), Port: 51820}
	tests := []struct {
		name     string
		host     string
		current  *net.UDPAddr
		wantName string
		wantPort int
		wantErr  bool
	}{
		{name: "a bare name keeps the current port", host: "hub.example.net", current: cur, wantName: "hub.example.net", wantPort: 51820},
		{name: "a name with a port uses that port", host: "hub.example.net:51999", current: cur, wantName: "hub.example.net", wantPort: 51999},
		{name: "a bracketed IPv6 literal with a port", host: "[2001:db8::1]:51820", wantName: "2001:db8::1", wantPort: 51820},
		{name: "a bare name without a current endpoint has no port", host: "hub.example.net", wantErr: true},
		{name: "a port out of range is an error", host: "hub.example.net:70000", current: cur, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			name, port, err := tunnelSplitHost(tt.host, tt.current)
			if (err != nil) != tt.wantErr {
				t.Fatalf("err = %v, want error %v", err, tt.wantErr)
			}
			if name != tt.wantName || port != tt.wantPort {
				t.Errorf("got %q %d, want %q %d", name, port, tt.wantName, tt.wantPort)
			}
		})
	}
}

func TestTunnelPickEndpoint(t *testing.T) {
	a := func(s string) netip.Addr { return netip.MustParseAddr(s) }
	cur := &net.UDPAddr{IP: net.IPv4(203, 0, 113, 7), Port: 51820}
	tests := []struct {
		name        string
		addrs       []netip.Addr
		port        int
		current     *net.UDPAddr
		want        string
		wantChanged bool
	}{
		{name: "the current address among the answers is kept (round-robin DNS must not flap)",
			addrs: []netip.Addr{a("203.0.113.9"), a("203.0.113.7")}, port: 51820, current: cur, want: "203.0.113.7:51820"},
		{name: "a moved gateway gets the new address",
			addrs: []netip.Addr{a("198.51.100.4")}, port: 51820, current: cur, want: "198.51.100.4:51820", wantChanged: true},
		{name: "the current address's family is preferred",
			addrs: []netip.Addr{a("2001:db8::4"), a("198.51.100.4")}, port: 51820, current: cur, want: "198.51.100.4:51820", wantChanged: true},
		{name: "a new port on the same address is a change",
			addrs: []netip.Addr{a("203.0.113.7")}, port: 51999, current: cur, want: "203.0.113.7:51999", wantChanged: true},
		{name: "without a current endpoint the first answer is taken",
			addrs: []netip.Addr{a("::ffff:198.51.100.4")}, port: 51820, want: "198.51.100.4:51820", wantChanged: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ep, changed := tunnelPickEndpoint(tt.addrs, tt.port, tt.current)
			got := struct {
				EP      string
				Changed bool
			}{ep.String(), changed}
			want := struct {
				EP      string
				Changed bool
			}{tt.want, tt.wantChanged}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("tunnelPickEndpoint (-want +got):\n%s", diff)
			}
		})
	}
}

func TestLearnedHostPathHoldsOnlyOnEvidence(t *testing.T) {
	ep := &net.UDPAddr{IP: net.ParseIP("192.0.2.1"), Port: 51820}
	var answer bool
	var fail error
	check := LearnedHostPath(func(context.Context, *net.UDPAddr) (bool, string, error) {
		return answer, "timeout", fail
	})
	steps := []struct {
		name   string
		answer bool
		fail   error
		wantOK bool
	}{
		{"an endpoint that never answered may just drop ICMP: not held", false, nil, true},
		{"a check that could not be made observed nothing: not held", false, errors.New("no ping socket"), true},
		{"an answer is a working path", true, nil, true},
		{"silence after an answer is a host path outage: held", false, nil, false},
		{"an answer again is a working path", true, nil, true},
	}
	for _, s := range steps {
		answer, fail = s.answer, s.fail
		ok, detail, err := check(context.Background(), ep)
		if err != nil || ok != s.wantOK {
			t.Errorf("%s: got ok=%v detail=%q err=%v, want ok=%v", s.name, ok, detail, err, s.wantOK)
		}
	}
}
