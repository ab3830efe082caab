package tunnel

import (
	"fmt"
	"slices"

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
	carrierless := false
	for _, l := range links {
		if slices.Contains(drIdx, l.Index) {
			names = append(names, l.Name)
			if l.Up && !l.NoCarrier {
				return true, ""
			}
			carrierless = carrierless || l.Up
		}
	}
	if carrierless {
		return false, fmt.Sprintf("default route link %v has no carrier", names)
	}
	return false, fmt.Sprintf("default route link %v is down", names)
}
