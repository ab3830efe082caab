package probes

import (
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// fixture returns testdata/proc-net-snmp without its comment lines.
func snmpFixture(t testing.TB) string {
	t.Helper()
	b, err := os.ReadFile("testdata/proc-net-snmp")
	if err != nil {
		t.Fatal(err)
	}
	var keep []string
	for _, l := range strings.Split(string(b), "\n") {
		if !strings.HasPrefix(l, "#") {
			keep = append(keep, l)
		}
	}
	return strings.Join(keep, "\n")
}

func TestParseSNMPReadsACapturedFile(t *testing.T) {
	s, err := ParseSNMP(strings.NewReader(snmpFixture(t)))
	if err != nil {
		t.Fatal(err)
	}
	u, err := s.UDP()
	if err != nil {
		t.Fatal(err)
	}
	want := UDPCounters{InDatagrams: 75, OutDatagrams: 76}
	if diff := cmp.Diff(want, u); diff != "" {
		t.Errorf("udp (-want +got):\n%s", diff)
	}
	if got := s["Tcp"]["MaxConn"]; got != -1 {
		t.Errorf("Tcp MaxConn = %d, want -1", got)
	}
	var protos []string
	for p := range s {
		protos = append(protos, p)
	}
	if len(protos) != 6 {
		t.Errorf("protocols = %v, want Ip Icmp IcmpMsg Tcp Udp UdpLite", protos)
	}
}

func TestParseSNMP(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		want    UDPCounters
		wantErr string
	}{
		{"checksum errors are read", "Udp: InDatagrams InErrors InCsumErrors\nUdp: 10 3 3\n", UDPCounters{InDatagrams: 10, InErrors: 3, InCsumErrors: 3}, ""},
		{"a counter past int64 is clamped, not rejected", "Udp: InDatagrams\nUdp: 18446744073709551615\n", UDPCounters{InDatagrams: 1<<63 - 1}, ""},
		{"a header without values is an error", "Udp: InDatagrams NoPorts\n", UDPCounters{}, "without values"},
		{"a count mismatch is an error", "Udp: InDatagrams NoPorts\nUdp: 1\n", UDPCounters{}, "2 names and 1 values"},
		{"values of another protocol are an error", "Udp: InDatagrams\nTcp: 1\n", UDPCounters{}, "want Udp values"},
		{"a non-number is an error", "Udp: InDatagrams\nUdp: x\n", UDPCounters{}, "InDatagrams"},
		{"no Udp section is an error", "Tcp: InSegs\nTcp: 1\n", UDPCounters{}, "no Udp section"},
		{"a duplicated section is an error", "Udp: A\nUdp: 1\nUdp: A\nUdp: 2\n", UDPCounters{}, "twice"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := ParseSNMP(strings.NewReader(tt.in))
			var u UDPCounters
			if err == nil {
				u, err = s.UDP()
			}
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want one containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, u); diff != "" {
				t.Errorf("udp (-want +got):\n%s", diff)
			}
		})
	}
}

func TestReadUDPCountersFromThisMachine(t *testing.T) {
	// /proc/net/snmp always has a Udp line on Linux; the numbers are this
	// host's, so only the shape is checked.
	if _, err := ReadUDPCounters(""); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadUDPCounters("/nonexistent/snmp"); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing file: err = %v, want one matching os.ErrNotExist", err)
	}
}

func FuzzParseSNMP(f *testing.F) {
	f.Add(snmpFixture(f))
	f.Add("Udp: InDatagrams\nUdp: 1\n")
	f.Add("Udp: InDatagrams\nUdp: -1\n")
	f.Fuzz(func(t *testing.T, in string) {
		s, err := ParseSNMP(strings.NewReader(in))
		if err != nil {
			return
		}
		// Whatever parsed must hold only names that were in the input.
		for proto, m := range s {
			if !strings.Contains(in, proto+":") {
				t.Errorf("protocol %q not in the input", proto)
			}
			for name := range m {
				if !strings.Contains(in, name) {
					t.Errorf("counter %q not in the input", name)
				}
			}
		}
		if _, err := s.UDP(); err != nil && s["Udp"] != nil {
			t.Errorf("UDP() failed with a Udp section: %v", err)
		}
	})
}
