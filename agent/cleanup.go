package agent

import (
	"context"
	"errors"
	"fmt"
	"slices"

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
	out, errs := restoreMTUs(ctx, os, clamps, false)
	r, err := netfix.RemoveMSSClamps(ctx, nft)
	if err != nil {
		errs = append(errs, err)
	} else if r.Changed {
		out = append(out, r)
	}
	return out, errors.Join(errs...)
}

// Forget undoes what edgeheal left on the node for tunnels the config no
// longer has (keep are those it has): each one's clamp table goes, with
// the MTU it lowered put back as Cleanup does, and its traffic watch. A
// tunnel still configured keeps its tables: its monitor takes them over,
// or removes them itself when its check or repair is off. Run at every
// start and reload; dryRun changes nothing and says what it would.
func Forget(ctx context.Context, os core.OS, keep []string, dryRun bool) ([]netfix.Result, error) {
	nft, err := os.Nftables.Conn()
	if err != nil {
		return nil, fmt.Errorf("opening nftables: %w", err)
	}
	gone := func(table string) bool { return !slices.Contains(keep, netfix.TableTunnel(table)) }
	clamps, err := netfix.ListMSSClamps(nft)
	if err != nil {
		return nil, err
	}
	clamps = slices.DeleteFunc(clamps, func(c netfix.MSSClamp) bool { return !gone(c.Table) })
	out, errs := restoreMTUs(ctx, os, clamps, dryRun)
	for _, c := range clamps {
		r, err := netfix.EnsureMSSClamp(ctx, nft, netfix.MSSClamp{Table: c.Table}, dryRun)
		out, errs = collect(out, errs, r, err)
	}
	watches, err := netfix.ListTrafficWatches(nft)
	if err != nil {
		return out, errors.Join(append(errs, err)...)
	}
	for _, w := range watches {
		if gone(w) {
			r, err := netfix.EnsureTrafficWatch(ctx, nft, netfix.TrafficWatch{Table: w}, dryRun)
			out, errs = collect(out, errs, r, err)
		}
	}
	return out, errors.Join(errs...)
}

// restoreMTUs puts back the MTU of every link a clamp lowered, if the link
// still has the MTU edgeheal set (one that Flannel or an operator set
// since is theirs).
func restoreMTUs(ctx context.Context, os core.OS, clamps []netfix.MSSClamp, dryRun bool) ([]netfix.Result, []error) {
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
			r, err := netfix.EnsureLinkMTU(ctx, os.MTU, l.Link, l.MTUBefore, dryRun)
			out, errs = collect(out, errs, r, err)
		}
	}
	return out, errs
}

// collect adds a result that changed something (or would, in a dry run)
// or its error.
func collect(out []netfix.Result, errs []error, r netfix.Result, err error) ([]netfix.Result, []error) {
	switch {
	case err != nil:
		errs = append(errs, err)
	case r.Changed || (r.DryRun && len(r.Changes) > 0):
		out = append(out, r)
	}
	return out, errs
}
