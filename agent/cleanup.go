package agent

import (
	"context"
	"errors"
	"fmt"

	"github.com/edgeheal/edgeheal/agent/core"
	"github.com/edgeheal/edgeheal/netfix"
)

// Cleanup undoes what edgeheal changed on the node that outlives the
// agent, for an uninstall (`edgeheal cleanup`, run by the packages'
// maintainer scripts): every path-MTU table (nftables, inet edgeheal-*:
// the clamps and the traffic watches) goes, and a tunnel MTU edgeheal lowered goes back to what it
// was, if the tunnel still has the MTU edgeheal set (one that Flannel or
// an operator set since is theirs). It changes nothing else: the offload
// guard's and the keepalive's settings are the configuration the node
// wants, and a re-created link or a reboot resets them anyway. Safe to
// run twice and without the agent; the results say what changed.
func Cleanup(ctx context.Context, os core.OS) ([]netfix.Result, error) {
	nft, err := os.Nftables.Conn()
	if err != nil {
		return nil, fmt.Errorf("opening nftables: %w", err)
	}
	clamps, err := netfix.ListMSSClamps(nft)
	if err != nil {
		return nil, err
	}
	var out []netfix.Result
	var errs []error
	for _, c := range clamps {
		for _, l := range c.Links {
			if l.MTUBefore == 0 {
				continue
			}
			if mtu, err := os.PathMTU.LinkMTU(l.Link); err != nil || mtu != l.PathMTU {
				continue // gone, or set by someone else since
			}
			r, err := netfix.EnsureLinkMTU(ctx, os.MTU, l.Link, l.MTUBefore, false)
			if err != nil {
				errs = append(errs, err)
				continue
			}
			out = append(out, r)
		}
	}
	r, err := netfix.RemoveMSSClamps(ctx, nft)
	if err != nil {
		errs = append(errs, err)
	} else if r.Changed {
		out = append(out, r)
	}
	return out, errors.Join(errs...)
}
