package agent

import (
	"fmt"
	"slices"
	"sync"

	"github.com/edgeheal/edgeheal/probes"
)

// The conditions outside a tunnel that gate its repairs, as pure
// functions over what was observed: whether the host's own uplink works,
// and whether a probe's answer counts.

// tunnelProbeOK reports whether a probe through a tunnel shows it carries
// packets both ways. A far end that answered with a refusal (TCP RST)
// proves that as well as an answer does, whatever listens behind it; a
// probe that could not be made (Err) shows nothing and is never OK.
func tunnelProbeOK(r probes.ProbeResult) bool {
	return r.Err == nil && (r.OK || r.Answered)
}

// defaultRouteUp says whether a default route exists and one of its links
// is up, from the links and the default routes' link indexes.
func defaultRouteUp(links []probes.Link, drIdx []int) (bool, string) {
	if len(drIdx) == 0 {
		return false, "no default route"
	}
	var names []string
	for _, l := range links {
		if slices.Contains(drIdx, l.Index) {
			names = append(names, l.Name)
			if l.Up {
				return true, ""
			}
		}
	}
	return false, fmt.Sprintf("default route link %v is down", names)
}

// hostPaths remembers which endpoints have answered the host's own probe
// (an ICMP echo outside the tunnel), so that the host path holds repairs
// only on evidence: an endpoint that has answered before and is silent now
// means the host's own path is down (a modem blackhole, a cell outage),
// and the ladder waits. An endpoint that has never answered may simply not
// answer ICMP (many gateways drop it), and a probe that could not be made
// (no ping socket permission, no CAP_NET_RAW) observed nothing: both count
// as a working path, with the reason in the detail, rather than holding
// every repair forever. Safe for concurrent use.
type hostPaths struct {
	mu       sync.Mutex
	answered map[string]bool // by endpoint address
}

// judge turns the host probe of the endpoint at addr into "the host path
// works" (ok) or not, with what to say about it.
func (h *hostPaths) judge(addr string, r probes.ProbeResult) (ok bool, detail string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	switch {
	case r.Err != nil:
		return true, "host path not checked: " + r.Err.Error()
	case r.OK || r.Answered:
		if h.answered == nil {
			h.answered = map[string]bool{}
		}
		h.answered[addr] = true
		return true, r.Class
	case !h.answered[addr]:
		return true, "host path not checked: the endpoint has never answered ICMP"
	}
	return false, r.Class
}
