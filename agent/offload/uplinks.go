package offload

import (
	"maps"
	"path"
	"slices"
	"strings"

	"github.com/edgeheal/edgeheal/configs"
	"github.com/edgeheal/edgeheal/netfix"
	"github.com/edgeheal/edgeheal/probes"
)

// Uplink selection lives here and nowhere else: which links the uplink
// configs choose, and what is wanted of each. The offload guard and
// `edgeheal check` both read it.

// uplinkTarget is a link chosen by one or more uplink configs, and what is
// wanted of it.
type uplinkTarget struct {
	probes.Link
	By         []int    // indexes into the guarded uplink configs, ascending
	SelectedBy []string // their names
	Want       netfix.OffloadWant
}

// guardedUplinks drops the uplink configs that guard nothing (tx_checksum
// leave and no features). configs has validated them.
func guardedUplinks(ups []configs.Uplink) []configs.Uplink {
	var out []configs.Uplink
	for _, u := range ups {
		if u.TxChecksum == "leave" && len(u.Features) == 0 {
			continue
		}
		out = append(out, u)
	}
	return out
}

// needsDefaultRoute reports whether a selector is "default-route", so that
// the default routes must be read to select.
func needsDefaultRoute(ups []configs.Uplink) bool {
	return slices.ContainsFunc(ups, func(u configs.Uplink) bool { return u.Name == configs.DefaultRoute })
}

// matchUplink reports whether selector sel (an exact name, a glob, or
// "default-route") chooses l; dr holds the default-route link indexes.
// Only an exact name chooses a link a glob never does (notByGlob): a
// pattern such as "*" or "e*" is meant for uplinks, not for the loopback,
// a pod's veth, a bridge or a tunnel.
func matchUplink(sel string, l probes.Link, dr map[int]bool) bool {
	switch {
	case sel == configs.DefaultRoute:
		return dr[l.Index] && l.Kind != "loopback"
	case sel == l.Name:
		return true
	case notByGlob(l) != "":
		return false
	}
	ok, _ := path.Match(sel, l.Name)
	return ok
}

// notByGlob says why no glob chooses l ("loopback", "veth", "bridge",
// "tunnel (wireguard)", ...), "" when one may.
func notByGlob(l probes.Link) string {
	switch {
	case l.Kind == "loopback" || l.Kind == "veth" || l.Kind == "bridge":
		return l.Kind
	case tunnelKinds[l.Kind]:
		return "tunnel (" + l.Kind + ")"
	case virtualKinds[l.Kind]:
		return "virtual (" + l.Kind + ")"
	}
	return ""
}

// virtualKinds are devices that carry no traffic of their own to the
// world (traffic shaping, test and monitoring devices).
var virtualKinds = map[string]bool{"ifb": true, "dummy": true, "nlmon": true, "vrf": true, "vcan": true, "netdevsim": true}

// tunnelKinds are the link kinds of tunnels: their offloads are the
// kernel's business, and a pattern written for uplinks must not touch them.
var tunnelKinds = map[string]bool{
	"wireguard": true, "vxlan": true, "geneve": true, "ipip": true, "sit": true, "gre": true, "gretap": true,
	"ip6gre": true, "ip6gretap": true, "ip6tnl": true, "vti": true, "vti6": true, "tuntap": true, "erspan": true,
	"ip6erspan": true, "xfrm": true, "bareudp": true, "gtp": true,
}

// Matched is what one uplink selector chooses on this node: the links it
// selects, and those a glob of its passes over, with why.
type Matched struct {
	Selector string
	Links    []string
	Skipped  []string // "veth12ab (veth)"
}

// Match lists, for every uplink selector of ups, the links of this node
// it chooses and those its glob passes over (`edgeheal config check`).
func Match(links probes.LinkLister, ups []configs.Uplink) ([]Matched, error) {
	ls, err := links.Links()
	if err != nil {
		return nil, err
	}
	dr := map[int]bool{}
	if needsDefaultRoute(ups) {
		idx, err := links.DefaultRouteLinks()
		if err != nil {
			return nil, err
		}
		for _, i := range idx {
			dr[i] = true
		}
	}
	slices.SortFunc(ls, func(a, b probes.Link) int { return strings.Compare(a.Name, b.Name) })
	var out []Matched
	for _, u := range ups {
		m := Matched{Selector: u.Name}
		glob := strings.ContainsAny(u.Name, "*?[")
		for _, l := range ls {
			switch ok, _ := path.Match(u.Name, l.Name); {
			case matchUplink(u.Name, l, dr):
				m.Links = append(m.Links, l.Name)
			case glob && ok:
				m.Skipped = append(m.Skipped, l.Name+" ("+notByGlob(l)+")")
			}
		}
		out = append(out, m)
	}
	return out, nil
}

// selectUplink returns the targets for one link: nil when no config
// chooses it.
func selectUplink(ups []configs.Uplink, l probes.Link, dr map[int]bool) *uplinkTarget {
	t := &uplinkTarget{Link: l}
	for i, u := range ups {
		if matchUplink(u.Name, l, dr) {
			t.By = append(t.By, i)
			t.SelectedBy = append(t.SelectedBy, u.Name)
		}
	}
	if len(t.By) == 0 {
		return nil
	}
	t.Want = wantFor(ups, t.By)
	return t
}

// selectUplinks returns the links the configs choose, each once, sorted by
// name. It is pure.
func selectUplinks(ups []configs.Uplink, links []probes.Link, dr map[int]bool) []uplinkTarget {
	var out []uplinkTarget
	for _, l := range links {
		if t := selectUplink(ups, l, dr); t != nil {
			out = append(out, *t)
		}
	}
	slices.SortFunc(out, func(a, b uplinkTarget) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// wantFor merges the configs that choose a link: TX checksum is guarded off
// if any of them says off, and features merge in config order, a later
// config's value winning.
func wantFor(ups []configs.Uplink, by []int) netfix.OffloadWant {
	w := netfix.OffloadWant{Features: map[string]string{}}
	for _, i := range by {
		if ups[i].TxChecksum != "leave" {
			w.TxChecksumOff = true
		}
		maps.Copy(w.Features, ups[i].Features)
	}
	return w
}

// readUplinks lists the links (and the default routes, when a selector
// needs them) and selects. An error means nothing was observed.
func readUplinks(links probes.LinkLister, ups []configs.Uplink) ([]uplinkTarget, map[int]bool, error) {
	ls, err := links.Links()
	if err != nil {
		return nil, nil, err
	}
	var dr map[int]bool
	if needsDefaultRoute(ups) {
		idx, err := links.DefaultRouteLinks()
		if err != nil {
			return nil, nil, err
		}
		dr = map[int]bool{}
		for _, i := range idx {
			dr[i] = true
		}
	}
	return selectUplinks(ups, ls, dr), dr, nil
}

// unmatched returns the configs no target was chosen by.
func unmatched(ups []configs.Uplink, targets []uplinkTarget) []configs.Uplink {
	covered := map[int]bool{}
	for _, t := range targets {
		for _, i := range t.By {
			covered[i] = true
		}
	}
	var out []configs.Uplink
	for i, u := range ups {
		if !covered[i] {
			out = append(out, u)
		}
	}
	return out
}
