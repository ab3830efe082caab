package probes

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
)

// SNMP is /proc/net/snmp parsed: protocol ("Ip", "Icmp", "Tcp", "Udp",
// "UdpLite", ...) → counter name → value. Values are signed because some
// are (Tcp MaxConn is -1).
type SNMP map[string]map[string]int64

// UDPCounters are the Udp line of /proc/net/snmp (kernel 6.x names).
// InCsumErrors rising on the receiving side means datagrams arrived with
// bad checksums: the symptom of the TX checksum offload fault.
type UDPCounters struct {
	InDatagrams  uint64 `json:"in_datagrams"`
	NoPorts      uint64 `json:"no_ports"`
	InErrors     uint64 `json:"in_errors"`
	OutDatagrams uint64 `json:"out_datagrams"`
	RcvbufErrors uint64 `json:"rcvbuf_errors"`
	SndbufErrors uint64 `json:"sndbuf_errors"`
	InCsumErrors uint64 `json:"in_csum_errors"`
	IgnoredMulti uint64 `json:"ignored_multi"`
	MemErrors    uint64 `json:"mem_errors"`
}

// ParseSNMP reads the /proc/net/snmp format: for each protocol a line of
// names and then a line of values, both prefixed by "Proto:". A values line
// that does not match its header (other protocol, other count, not a
// number) is an error; an unknown protocol is kept like any other.
func ParseSNMP(r io.Reader) (SNMP, error) {
	out := SNMP{}
	s := bufio.NewScanner(r)
	s.Buffer(make([]byte, 0, 4096), 1<<20)
	line := 0
	for s.Scan() {
		line++
		head := s.Text()
		if strings.TrimSpace(head) == "" {
			continue
		}
		proto, names, ok := splitSNMPLine(head)
		if !ok {
			return nil, fmt.Errorf("snmp line %d: no \"Proto:\" prefix", line)
		}
		if !s.Scan() {
			return nil, fmt.Errorf("snmp line %d: %s header without values", line, proto)
		}
		line++
		vproto, values, ok := splitSNMPLine(s.Text())
		if !ok || vproto != proto {
			return nil, fmt.Errorf("snmp line %d: want %s values, got %q", line, proto, s.Text())
		}
		if len(values) != len(names) {
			return nil, fmt.Errorf("snmp line %d: %s has %d names and %d values", line, proto, len(names), len(values))
		}
		if _, dup := out[proto]; dup {
			return nil, fmt.Errorf("snmp line %d: %s appears twice", line, proto)
		}
		m := make(map[string]int64, len(names))
		for i, n := range names {
			v, err := strconv.ParseInt(values[i], 10, 64)
			if err != nil {
				// Counters are unsigned in the kernel: one past int64 still
				// parses as uint64 and is clamped rather than rejected.
				u, uerr := strconv.ParseUint(values[i], 10, 64)
				if uerr != nil {
					return nil, fmt.Errorf("snmp line %d: %s %s: %w", line, proto, n, err)
				}
				v = int64(min(u, 1<<63-1))
			}
			m[n] = v
		}
		out[proto] = m
	}
	if err := s.Err(); err != nil {
		return nil, fmt.Errorf("reading snmp: %w", err)
	}
	return out, nil
}

func splitSNMPLine(l string) (proto string, fields []string, ok bool) {
	proto, rest, ok := strings.Cut(l, ":")
	if !ok || proto == "" || strings.ContainsAny(proto, " \t") {
		return "", nil, false
	}
	return proto, strings.Fields(rest), true
}

// UDP returns the Udp counters; counters this kernel does not have are 0.
// A missing Udp section is an error.
func (s SNMP) UDP() (UDPCounters, error) {
	u, ok := s["Udp"]
	if !ok {
		return UDPCounters{}, fmt.Errorf("snmp has no Udp section")
	}
	get := func(n string) uint64 {
		if v := u[n]; v > 0 {
			return uint64(v)
		}
		return 0
	}
	return UDPCounters{
		InDatagrams: get("InDatagrams"), NoPorts: get("NoPorts"), InErrors: get("InErrors"),
		OutDatagrams: get("OutDatagrams"), RcvbufErrors: get("RcvbufErrors"), SndbufErrors: get("SndbufErrors"),
		InCsumErrors: get("InCsumErrors"), IgnoredMulti: get("IgnoredMulti"), MemErrors: get("MemErrors"),
	}, nil
}

// ReadUDPCounters reads the Udp counters from an snmp file: /proc/net/snmp
// for the reader's network namespace, /proc/<pid>/net/snmp for the
// namespace of pid. An empty path means /proc/net/snmp.
func ReadUDPCounters(path string) (UDPCounters, error) {
	if path == "" {
		path = "/proc/net/snmp"
	}
	f, err := os.Open(path)
	if err != nil {
		return UDPCounters{}, fmt.Errorf("reading udp counters: %w", err)
	}
	defer f.Close()
	s, err := ParseSNMP(f)
	if err != nil {
		return UDPCounters{}, fmt.Errorf("reading udp counters from %s: %w", path, err)
	}
	u, err := s.UDP()
	if err != nil {
		return UDPCounters{}, fmt.Errorf("reading udp counters from %s: %w", path, err)
	}
	return u, nil
}
