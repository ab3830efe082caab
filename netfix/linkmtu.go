package netfix

import (
	"context"
	"fmt"

	"github.com/vishvananda/netlink"
)

// LinkMTU is the part of *netlink.Handle that EnsureLinkMTU uses.
type LinkMTU interface {
	LinkByName(name string) (netlink.Link, error)
	LinkSetMTU(link netlink.Link, mtu int) error
}

var _ LinkMTU = (*netlink.Handle)(nil)

// EnsureLinkMTU sets iface's MTU to mtu unless it is already, and reads it
// back. Changing a WireGuard link's MTU keeps its sessions and its peers
// (kernel module and wireguard-go alike): packets larger than the new MTU
// are fragmented or, with DF, answered locally with ICMP "fragmentation
// needed", which the sender's own path-MTU discovery obeys. Changes is
// "mtu 1420 -> 1328". A missing link matches os.ErrNotExist.
func EnsureLinkMTU(ctx context.Context, links LinkMTU, iface string, mtu int, dryRun bool) (Result, error) {
	r := Result{Action: "link-mtu", Target: iface}
	if err := ctx.Err(); err != nil {
		return r, err
	}
	if mtu < 68 || mtu > 65535 {
		return r, fmt.Errorf("setting the MTU of %s: %d is not an MTU", iface, mtu)
	}
	link, err := links.LinkByName(iface)
	if err != nil {
		return r, fmt.Errorf("finding link %s: %w", iface, linkErr(iface, err))
	}
	before := link.Attrs().MTU
	if before == mtu {
		return r, nil
	}
	r.Changes = []string{fmt.Sprintf("mtu %d -> %d", before, mtu)}
	if dryRun {
		r.DryRun = true
		return r, nil
	}
	if err := links.LinkSetMTU(link, mtu); err != nil {
		return r, fmt.Errorf("setting the MTU of %s to %d: %w", iface, mtu, linkErr(iface, err))
	}
	r.Changed = true
	after, err := links.LinkByName(iface)
	if err != nil {
		return r, fmt.Errorf("reading back the MTU of %s: %w", iface, linkErr(iface, err))
	}
	if got := after.Attrs().MTU; got != mtu {
		return r, fmt.Errorf("the MTU of %s reads back %d after setting %d", iface, got, mtu)
	}
	return r, nil
}
