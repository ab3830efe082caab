package agent

import (
	"errors"
	"net"
	"net/netip"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/edgeheal/edgeheal/probes"
)

func TestTunnelProbeOK(t *testing.T) {
	for _, tt := range []struct {
		name string
		r    probes.ProbeResult
		want bool
	}{
		{"an answer", probes.ProbeResult{OK: true, Answered: true, Class: "ok"}, true},
		{"a refusal proves the tunnel carries packets both ways", probes.ProbeResult{Answered: true, Class: "refused"}, true},
		{"a timeout is a miss", probes.ProbeResult{Class: "timeout"}, false},
		{"a probe that could not be made shows nothing", probes.ProbeResult{Answered: true, Err: errors.New("no socket")}, false},
	} {
		if got := tunnelProbeOK(tt.r); got != tt.want {
			t.Errorf("%s: %v, want %v", tt.name, got, tt.want)
		}
	}
}

func TestDefaultRouteUp(t *testing.T) {
	links := []probes.Link{{Name: "wwan0", Index: 3, Up: true}, {Name: "eth0", Index: 2}}
	for _, tt := range []struct {
		name   string
		dr     []int
		want   bool
		detail string
	}{
		{"a default route on an up link", []int{3}, true, ""},
		{"no default route", nil, false, "no default route"},
		{"the default route's link is down", []int{2}, false, "default route link [eth0] is down"},
		{"one of two default route links up is enough", []int{2, 3}, true, ""},
	} {
		up, detail := defaultRouteUp(links, tt.dr)
		if up != tt.want || detail != tt.detail {
			t.Errorf("%s: %v %q, want %v %q", tt.name, up, detail, tt.want, tt.detail)
		}
	}
}

func TestHostPathsHoldOnlyOnEvidence(t *testing.T) {
	var h hostPaths
	answer := probes.ProbeResult{OK: true, Answered: true, Class: "ok"}
	silence := probes.ProbeResult{Class: "timeout"}
	steps := []struct {
		name   string
		r      probes.ProbeResult
		wantOK bool
	}{
		{"an endpoint that never answered may just drop ICMP: not held", silence, true},
		{"a probe that could not be made observed nothing: not held", probes.ProbeResult{Err: errors.New("no ping socket")}, true},
		{"an answer is a working path", answer, true},
		{"silence after an answer is a host path outage: held", silence, false},
		{"an answer again is a working path", answer, true},
	}
	for _, s := range steps {
		if ok, detail := h.judge("192.0.2.1", s.r); ok != s.wantOK {
			t.Errorf("%s: ok=%v (%s), want %v", s.name, ok, detail, s.wantOK)
		}
	}
	if ok, _ := h.judge("192.0.2.9", silence); !ok {
		t.Error("another endpoint's silence is not evidence: it never answered")
	}
}

func TestSplitEndpointHost(t *testing.T) {
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
			name, port, err := splitEndpointHost(tt.host, tt.current)
			if (err != nil) != tt.wantErr {
				t.Fatalf("err = %v, want error %v", err, tt.wantErr)
			}
			if name != tt.wantName || port != tt.wantPort {
				t.Errorf("got %q %d, want %q %d", name, port, tt.wantName, tt.wantPort)
			}
		})
	}
}

func TestPickEndpoint(t *testing.T) {
	a := func(s string) netip.Addr { return netip.MustParseAddr(s) }
	cur := &net.UDPAddr{IP: net.IPv4(203, 0, 113, 7), Port: 51820}
	type result struct {
		EP      string
		Changed bool
	}
	tests := []struct {
		name    string
		addrs   []netip.Addr
		port    int
		current *net.UDPAddr
		want    result
	}{
		{"the current address among the answers is kept (round-robin DNS must not flap)",
			[]netip.Addr{a("203.0.113.9"), a("203.0.113.7")}, 51820, cur, result{"203.0.113.7:51820", false}},
		{"a moved gateway gets the new address", []netip.Addr{a("198.51.100.4")}, 51820, cur, result{"198.51.100.4:51820", true}},
		{"the current address's family is preferred",
			[]netip.Addr{a("2001:db8::4"), a("198.51.100.4")}, 51820, cur, result{"198.51.100.4:51820", true}},
		{"a new port on the same address is a change", []netip.Addr{a("203.0.113.7")}, 51999, cur, result{"203.0.113.7:51999", true}},
		{"without a current endpoint the first answer is taken", []netip.Addr{a("::ffff:198.51.100.4")}, 51820, nil, result{"198.51.100.4:51820", true}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ep, changed := pickEndpoint(tt.addrs, tt.port, tt.current)
			if diff := cmp.Diff(tt.want, result{ep.String(), changed}); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}
