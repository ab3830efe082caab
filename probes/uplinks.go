package probes

import (
	"context"
	"fmt"
	"path"
	"slices"
)

// DefaultRoute is the uplink selector for the interfaces of the IPv4 and
// IPv6 default routes (configs.DefaultRoute).
const DefaultRoute = "default-route"

// Link is a network interface as the uplink selection sees it.
type Link struct {
	Name  string `json:"name"`
	Index int    `json:"index"`
	Up    bool   `json:"up"` // administratively up (IFF_UP)
}

// LinkLister lists the links of one network namespace.
type LinkLister interface {
	Links() ([]Link, error)
	// DefaultRouteLinks returns the indexes of the links that carry an IPv4
	// or IPv6 default route in the main table (each nexthop of a multipath
	// route counts).
	DefaultRouteLinks() ([]int, error)
}

// LinkEvent is one change seen by a link and route subscription.
type LinkEvent struct {
	Link         Link  // the link that appeared, changed or went (link events)
	Deleted      bool  // the link was removed
	DefaultRoute bool  // a default route was added or removed (Link is zero)
	Err          error // the subscription broke; the channel closes after this event
}

// LinkWatcher is a LinkLister that can also be subscribed to.
type LinkWatcher interface {
	LinkLister
	// Subscribe delivers link changes (every RTM_NEWLINK and RTM_DELLINK)
	// and default-route changes on the returned channel, until ctx is done
	// or the subscription breaks (then a last event with Err is sent). The
	// channel is closed only after every goroutine of the subscription has
	// ended: read it until it is closed.
	Subscribe(ctx context.Context) (<-chan LinkEvent, error)
}

// ValidUplinkSelector reports whether sel is usable: "default-route", an
// exact link name, or a glob in path.Match syntax (wwan*, usb*, eth[01]).
func ValidUplinkSelector(sel string) error {
	if sel == "" {
		return fmt.Errorf("empty uplink name")
	}
	if sel == DefaultRoute {
		return nil
	}
	if _, err := path.Match(sel, ""); err != nil {
		return fmt.Errorf("uplink name %q: bad glob: %w", sel, err)
	}
	return nil
}

// MatchUplink reports whether selector sel selects l; defaultRoute holds
// the indexes of the default-route links (needed only for "default-route").
func MatchUplink(sel string, l Link, defaultRoute map[int]bool) bool {
	if sel == DefaultRoute {
		return defaultRoute[l.Index]
	}
	if sel == l.Name {
		return true
	}
	ok, _ := path.Match(sel, l.Name)
	return ok
}

// SelectedLink is a link chosen by one or more uplink selectors.
type SelectedLink struct {
	Link
	Selectors []int // indexes into the selectors that chose it, ascending
}

// SelectUplinks returns the links of ll that selectors choose, ordered by
// link name, each once. It reads the default routes only when a selector
// is "default-route". An error means the links could not be listed.
func SelectUplinks(ll LinkLister, selectors []string) ([]SelectedLink, error) {
	links, err := ll.Links()
	if err != nil {
		return nil, fmt.Errorf("listing links: %w", err)
	}
	var dr map[int]bool
	if slices.Contains(selectors, DefaultRoute) {
		idx, err := ll.DefaultRouteLinks()
		if err != nil {
			return nil, fmt.Errorf("listing default routes: %w", err)
		}
		dr = make(map[int]bool, len(idx))
		for _, i := range idx {
			dr[i] = true
		}
	}
	return selectFrom(links, selectors, dr), nil
}

func selectFrom(links []Link, selectors []string, dr map[int]bool) []SelectedLink {
	var out []SelectedLink
	for _, l := range links {
		var by []int
		for i, sel := range selectors {
			if MatchUplink(sel, l, dr) {
				by = append(by, i)
			}
		}
		if len(by) > 0 {
			out = append(out, SelectedLink{Link: l, Selectors: by})
		}
	}
	slices.SortFunc(out, func(a, b SelectedLink) int {
		switch {
		case a.Name < b.Name:
			return -1
		case a.Name > b.Name:
			return 1
		}
		return 0
	})
	return out
}
