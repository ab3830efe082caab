package tunnel

import (
	"fmt"
	"net"
	"net/netip"
	"strconv"
)

// The reresolve rung's decisions: which name to resolve with which port,
// and which of the answers becomes the peer's endpoint. Pure, so a table
// covers them; the lookup and the change are the ladder's (climb.go).

// splitEndpointHost splits endpoint_host into a name and a port, taking the
// port of the current endpoint when the host has none.
func splitEndpointHost(host string, current *net.UDPAddr) (string, int, error) {
	name, port := host, 0
	if h, p, err := net.SplitHostPort(host); err == nil {
		n, err := strconv.Atoi(p)
		if err != nil || n <= 0 || n > 65535 {
			return "", 0, fmt.Errorf("re-resolving %s: bad port %q", host, p)
		}
		name, port = h, n
	}
	if port == 0 && current != nil {
		port = current.Port
	}
	if port == 0 {
		return "", 0, fmt.Errorf("re-resolving %s: no port in endpoint_host and the peer has no endpoint", host)
	}
	return name, port, nil
}

// pickEndpoint chooses the endpoint among resolved addresses: the current
// one if it is among them with the same port (changed false: round-robin
// DNS must not make the endpoint flap), else the first address of the
// current one's family, else the first. addrs must not be empty.
func pickEndpoint(addrs []netip.Addr, port int, current *net.UDPAddr) (*net.UDPAddr, bool) {
	pick := addrs[0].Unmap()
	if current != nil {
		cur, _ := netip.AddrFromSlice(current.IP)
		cur = cur.Unmap()
		for _, a := range addrs {
			if a.Unmap() == cur && port == current.Port {
				return current, false
			}
		}
		for _, a := range addrs {
			if a.Unmap().Is4() == cur.Is4() {
				pick = a.Unmap()
				break
			}
		}
	}
	return net.UDPAddrFromAddrPort(netip.AddrPortFrom(pick, uint16(port))), true
}
