package configs

import (
	"fmt"
	"strconv"
	"strings"
)

// DefaultRebindPorts is tunnels[].rebind_ports when a file does not set it
// (element-defaults.yaml): 70 ports next to WireGuard's customary 51820 and
// 51821, so a firewall rule for the tunnel's replies is one short range.
const DefaultRebindPorts = "51830-51899"

// PortRange is an inclusive range of UDP ports.
type PortRange struct{ Lo, Hi int }

// Contains reports whether port is in the range.
func (r PortRange) Contains(port int) bool { return port >= r.Lo && port <= r.Hi }

func (r PortRange) String() string {
	if r.Lo == r.Hi {
		return strconv.Itoa(r.Lo)
	}
	return fmt.Sprintf("%d-%d", r.Lo, r.Hi)
}

// ParsePortRange parses "LO-HI" or a single "PORT" (1..65535, LO <= HI).
// An empty string is the zero range and no error: the rung is off.
func ParsePortRange(s string) (PortRange, error) {
	if s == "" {
		return PortRange{}, nil
	}
	lo, hi, isRange := strings.Cut(s, "-")
	if !isRange {
		hi = lo
	}
	var r PortRange
	var err error
	if r.Lo, err = parsePort(lo); err != nil {
		return PortRange{}, fmt.Errorf("%q: %w", s, err)
	}
	if r.Hi, err = parsePort(hi); err != nil {
		return PortRange{}, fmt.Errorf("%q: %w", s, err)
	}
	if r.Lo > r.Hi {
		return PortRange{}, fmt.Errorf("%q: the range is empty (%d > %d); write it LO-HI", s, r.Lo, r.Hi)
	}
	return r, nil
}

func parsePort(s string) (int, error) {
	n, err := strconv.Atoi(strings.TrimSpace(s))
	if err != nil || n < 1 || n > 65535 {
		return 0, fmt.Errorf("%q is not a UDP port (1..65535)", s)
	}
	return n, nil
}
