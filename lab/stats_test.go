package lab

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestComputeStats(t *testing.T) {
	t0 := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	never := time.Time{}
	tests := []struct {
		name       string
		sent, recv []time.Time
		now        time.Time
		from       time.Time
		want       Stats
	}{
		{
			name: "everything delivered in time is no loss",
			sent: []time.Time{at(0), at(50), at(100)},
			recv: []time.Time{at(2), at(52), at(102)},
			now:  at(5000),
			want: Stats{Sent: 3, Received: 3},
		},
		{
			name: "a run of lost messages is one outage ending at the next arrival",
			sent: []time.Time{at(0), at(50), at(100), at(150), at(200)},
			recv: []time.Time{at(2), never, never, at(160), at(202)},
			now:  at(5000),
			want: Stats{
				Sent: 5, Received: 3, LossPct: 40,
				Outages:   []Outage{{Start: at(50), End: at(160), Lost: 2}},
				FirstLost: at(50), FirstRecovered: at(160),
			},
		},
		{
			name: "a message later than LateAfter counts as lost",
			sent: []time.Time{at(0), at(50)},
			recv: []time.Time{at(1500), at(52)},
			now:  at(5000),
			want: Stats{
				Sent: 2, Received: 1, Late: 1, LossPct: 50,
				Outages:   []Outage{{Start: at(0), End: at(52), Lost: 1}},
				FirstLost: at(0), FirstRecovered: at(52),
			},
		},
		{
			name: "recent unreceived messages are pending, not lost",
			sent: []time.Time{at(0), at(4500)},
			recv: []time.Time{at(1), never},
			now:  at(5000),
			want: Stats{Sent: 2, Received: 1, Pending: 1},
		},
		{
			name: "an outage still going on has no end",
			sent: []time.Time{at(0), at(1000), at(2000)},
			recv: []time.Time{never, never, never},
			now:  at(5000),
			want: Stats{
				Sent: 3, LossPct: 100,
				Outages:   []Outage{{Start: at(0), Lost: 3}},
				FirstLost: at(0),
			},
		},
		{
			name: "messages sent before from are ignored",
			sent: []time.Time{at(0), at(100)},
			recv: []time.Time{never, at(101)},
			now:  at(5000),
			from: at(100),
			want: Stats{Sent: 1, Received: 1},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := computeStats(tt.sent, tt.recv, tt.now, time.Second, tt.from)
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("computeStats (-want +got):\n%s", diff)
			}
		})
	}
}

// snmp is the Udp part of /proc/net/snmp, captured with
// `edgeheal-lab exec cloud -- cat /proc/net/snmp` (kernel 6.18, 2026-11-29)
// after the offload fault dropped one handshake initiation; UdpLite's
// InCsumErrors was set to 7 by hand so that the parser must pick the
// right row.
const snmp = `Udp: InDatagrams NoPorts InErrors OutDatagrams RcvbufErrors SndbufErrors InCsumErrors IgnoredMulti MemErrors
Udp: 18 0 1 13 0 0 1 0 0
UdpLite: InDatagrams NoPorts InErrors OutDatagrams RcvbufErrors SndbufErrors InCsumErrors IgnoredMulti MemErrors
UdpLite: 0 0 0 0 0 0 7 0 0
`

func TestUDPInCsumErrors(t *testing.T) {
	got, err := udpInCsumErrors([]byte(snmp))
	if err != nil || got != 1 {
		t.Errorf("udpInCsumErrors = %d, %v; want 1, nil", got, err)
	}
	if _, err := udpInCsumErrors([]byte("Ip: a\nIp: 1\n")); err == nil {
		t.Errorf("udpInCsumErrors of a file without Udp = nil error; want one")
	}
}

func TestFaultValidate(t *testing.T) {
	tests := []struct {
		name  string
		f     Fault
		valid bool
	}{
		{"pass is valid", Fault{Kind: FaultPass}, true},
		{"the zero fault is pass", Fault{}, true},
		{"loss of 30 percent is valid", Fault{Kind: FaultLoss, LossPct: 30}, true},
		{"loss over 100 percent is not", Fault{Kind: FaultLoss, LossPct: 101}, false},
		{"jitter larger than the delay is not", Fault{Kind: FaultDelay, Delay: time.Millisecond, Jitter: time.Second}, false},
		{"an unknown kind is not", Fault{Kind: "flood"}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := tt.f.Validate(); (err == nil) != tt.valid {
				t.Errorf("Validate(%+v) = %v; want valid %v", tt.f, err, tt.valid)
			}
		})
	}
}
