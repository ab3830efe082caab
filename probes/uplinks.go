package probes

import (
	"context"
)

// Link is a network interface as the uplink selection sees it.
type Link struct {
	Name  string `json:"name"`
	Index int    `json:"index"`
	Up    bool   `json:"up"` // administratively up (IFF_UP)
	// NoCarrier is set when the kernel reports the link operationally down
	// (no carrier: a modem that lost its cell, a cable out). An unknown
	// operational state (tunnels, some drivers) counts as carrier.
	NoCarrier bool `json:"no_carrier,omitempty"`
	// Kind is the kernel's link kind (netlink's IFLA_INFO_KIND: veth,
	// bridge, wireguard, vxlan, ...), "loopback" for a loopback device,
	// and "" for a plain device (a NIC, a modem).
	Kind string `json:"kind,omitempty"`
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
