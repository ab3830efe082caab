package tunnel

import (
	"errors"
	"net"
	"net/netip"
	"testing"
	"time"

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
	links := []probes.Link{{Name: "wwan0", Index: 3, Up: true}, {Name: "eth0", Index: 2}, {Name: "wwan1", Index: 4, Up: true, NoCarrier: true}}
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
		{"an up link without carrier carries nothing", []int{4}, false, "default route link [wwan1] has no carrier"},
		{"one with carrier is enough", []int{4, 3}, true, ""},
	} {
		up, detail := defaultRouteUp(links, tt.dr)
		if up != tt.want || detail != tt.detail {
			t.Errorf("%s: %v %q, want %v %q", tt.name, up, detail, tt.want, tt.detail)
		}
	}
}

func TestPathBookJudgesSilenceOnlyWithEvidence(t *testing.T) {
	t0 := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	answer := probes.ProbeResult{OK: true, Answered: true, Class: "ok"}
	refused := probes.ProbeResult{Answered: true, Class: "refused"}
	silence := probes.ProbeResult{Class: "timeout"}
	const ep = "icmp://192.0.2.1"
	var b pathBook
	steps := []struct {
		name    string
		at      time.Duration
		learn   *bool // a background probe with this tunnelOK, instead of a judgement
		confirm *bool // a round's word on the tunnel, instead of a judgement
		r       probes.ProbeResult
		want    pathVerdict
	}{
		{name: "an endpoint that never answered may just drop ICMP: unknown", r: silence, want: pathUnknown},
		{name: "a probe that could not be made observed nothing: unknown", r: probes.ProbeResult{Err: errors.New("no ping socket")}, want: pathUnknown},
		{name: "the learner's answer while the tunnel works", at: 10 * time.Second, learn: ptr(true), r: answer},
		{name: "silence after an answer is an outage", at: 20 * time.Second, r: silence, want: pathDown},
		{name: "an answer again: the path works (and came back)", at: 40 * time.Second, r: answer, want: pathWorks},
		{name: "a refusal is an answer too", at: 41 * time.Second, r: refused, want: pathWorks},
		{name: "a silence just before an outage began", at: 45 * time.Second, learn: ptr(true), r: silence},
		{name: "the round after it found the tunnel dark", at: 46 * time.Second, confirm: ptr(false)},
		{name: "so it was the outage: silence now is still an outage", at: 47 * time.Second, r: silence, want: pathDown},
		{name: "an answer again", at: 48 * time.Second, r: answer, want: pathWorks},
		{name: "silence while the tunnel worked", at: 50 * time.Second, learn: ptr(true), r: silence},
		{name: "and the round after it found the tunnel still working: ICMP says nothing here", at: 51 * time.Second, confirm: ptr(true)},
		{name: "so the next silence is unknown, not an outage", at: 60 * time.Second, r: silence, want: pathUnknown},
		{name: "answered again, learnt while the tunnel worked", at: 70 * time.Second, learn: ptr(true), r: answer},
		{name: "silence long after the last answer is unknown", at: 70*time.Second + pathMemory + time.Second, r: silence, want: pathUnknown},
	}
	for _, s := range steps {
		now := t0.Add(s.at)
		if s.learn != nil {
			b.learn(ep, s.r, *s.learn, now)
			continue
		}
		if s.confirm != nil {
			b.confirm(ep, *s.confirm, now)
			continue
		}
		if got, detail := b.judge(ep, s.r, now); got != s.want {
			t.Errorf("%s: %s (%s), want %s", s.name, got, detail, s.want)
		}
	}
	if got := b.backAt(ep); !got.Equal(t0.Add(48 * time.Second)) {
		t.Errorf("backAt = %v, want when it answered again after the last outage (+48s)", got)
	}
	if got, _ := b.judge("icmp://192.0.2.9", silence, t0); got != pathUnknown {
		t.Errorf("another endpoint's silence: %s, want unknown: it never answered", got)
	}
}

func ptr[T any](v T) *T { return &v }

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
