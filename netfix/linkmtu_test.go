package netfix_test

import (
	"context"
	"errors"
	"os"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/edgeheal/edgeheal/netfix"
	"github.com/edgeheal/edgeheal/netfix/netfixtest"
)

func TestEnsureLinkMTU(t *testing.T) {
	ctx := context.Background()
	links := netfixtest.NewMTUs(map[string]int{"wg0": 1420})
	r, err := netfix.EnsureLinkMTU(ctx, links, "wg0", 1328, false)
	if err != nil || !r.Changed || !cmp.Equal(r.Changes, []string{"mtu 1420 -> 1328"}) || links.MTU("wg0") != 1328 {
		t.Errorf("first = %+v, %v; mtu %d", r, err, links.MTU("wg0"))
	}
	if r, err := netfix.EnsureLinkMTU(ctx, links, "wg0", 1328, false); err != nil || r.Changed || len(r.Changes) != 0 {
		t.Errorf("again = %+v, %v; want nothing to do", r, err)
	}
	if r, err := netfix.EnsureLinkMTU(ctx, links, "wg0", 1420, true); err != nil || r.Changed || !r.DryRun || links.MTU("wg0") != 1328 {
		t.Errorf("dry run = %+v, %v; mtu %d", r, err, links.MTU("wg0"))
	}
	if _, err := netfix.EnsureLinkMTU(ctx, links, "wg9", 1328, false); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing link: err = %v, want os.ErrNotExist", err)
	}
	links.Ignore = true
	if _, err := netfix.EnsureLinkMTU(ctx, links, "wg0", 1400, false); err == nil {
		t.Error("a change that did not apply was not an error")
	}
}
