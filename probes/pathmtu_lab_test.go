package probes

import (
	"context"
	"errors"
	"net/netip"
	"os"
	"testing"
	"time"

	"github.com/edgeheal/edgeheal/internal/testsupport"
	"github.com/edgeheal/edgeheal/internal/testsupport/wgpair"
)

// sizesFrom runs ProbeSizes inside ns.
func sizesFrom(t *testing.T, ns *wgpair.NS, target netip.Addr, sizes ...int) SizesResult {
	t.Helper()
	var r SizesResult
	if err := ns.Do(func() error {
		r = ProbeSizes(context.Background(), target, SizeProbe{Sizes: sizes, Timeout: time.Second, Settle: 250 * time.Millisecond})
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return r
}

// Sized DF echoes over a link of MTU 1400, through a ping socket and a raw
// one: every size up to the link's MTU comes back, a larger one the kernel
// refuses to send (LocalTooBig: it says nothing of the path), and the
// route and link MTU reads name the link.
func TestLabProbeSizesAndTheMTUsTheyAreJudgedAgainst(t *testing.T) {
	testsupport.RequireRoot(t, "veth pairs in network namespaces")
	a, b := wgpair.NewNS(t), wgpair.NewNS(t)
	an, _ := wgpair.Veth(t, a, "192.168.78.1/24", b, "192.168.78.2/24")
	l, err := a.Links.LinkByName(an)
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Links.LinkSetMTU(l, 1400); err != nil {
		t.Fatal(err)
	}
	target := netip.MustParseAddr("192.168.78.2")
	for _, pingRange := range []string{"0 2147483647", "1 0"} { // ping socket, then raw
		setPingGroupRange(t, a, pingRange)
		r := sizesFrom(t, a, target, 44, 1000, 1400, 1401)
		if r.Err != nil {
			t.Fatalf("ping_group_range %q: %v", pingRange, r.Err)
		}
		if r.Largest() != 1400 || r.SmallestMissed() != 0 {
			t.Errorf("%s: largest %d, smallest missed %d: %+v", r.Method, r.Largest(), r.SmallestMissed(), r.Answers)
		}
		if a, _ := r.Answer(1401); !a.LocalTooBig || a.Answered {
			t.Errorf("%s: 1401 over a 1400 link = %+v, want refused locally", r.Method, a)
		}
	}
	n, err := newNetlinkIn(t, a)
	if err != nil {
		t.Fatal(err)
	}
	if rl, err := n.RouteTo(target); err != nil || rl.Link != an || rl.MTU != 1400 {
		t.Errorf("RouteTo = %+v, %v", rl, err)
	}
	if m, err := n.LinkMTU(an); err != nil || m != 1400 {
		t.Errorf("LinkMTU = %d, %v", m, err)
	}
	if _, err := n.LinkMTU("nosuch0"); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("LinkMTU of a missing link: %v, want os.ErrNotExist", err)
	}
	if r := sizesFrom(t, a, netip.MustParseAddr("192.168.78.9"), 44, 1400); r.Err != nil || r.Answered() {
		t.Errorf("a silent target = %+v", r)
	}
}

func newNetlinkIn(t *testing.T, ns *wgpair.NS) (*Netlink, error) {
	t.Helper()
	n, err := NewNetlinkAt(ns.NsHandle())
	if err == nil {
		t.Cleanup(func() { n.Close() })
	}
	return n, err
}
