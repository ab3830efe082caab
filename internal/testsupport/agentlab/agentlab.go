// Package agentlab runs the agent's parts on the real OS backend
// (agent/system) in network namespaces the tests make: an anonymous
// namespace with veth uplinks (NS), or one of the full lab's namespaces
// (LabOS). Test code only; every namespace and link goes when the test
// ends.
package agentlab

import (
	"slices"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"

	"github.com/edgeheal/edgeheal/agent/core"
	"github.com/edgeheal/edgeheal/agent/system"
	"github.com/edgeheal/edgeheal/internal/testsupport"
	"github.com/edgeheal/edgeheal/internal/testsupport/wgpair"
	"github.com/edgeheal/edgeheal/lab"
	"github.com/edgeheal/edgeheal/netfix"
	"github.com/edgeheal/edgeheal/probes"
)

// OpenSystem opens the OS backend in ns and closes it when the test ends.
func OpenSystem(tb testing.TB, ns *wgpair.NS) core.OS {
	tb.Helper()
	sys, err := system.OpenAt(ns.NsHandle())
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { sys.Close() })
	return sys.OS()
}

// LabOS opens the OS backend in one of the full lab's namespaces.
func LabOS(tb testing.TB, l *lab.Lab, n lab.Node) core.OS {
	tb.Helper()
	ns, err := netns.GetFromPath(l.NetnsPath(n))
	if err != nil {
		tb.Fatal(err)
	}
	defer ns.Close()
	sys, err := system.OpenAt(ns)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { sys.Close() })
	return sys.OS()
}

// NS is an anonymous network namespace with the agent's OS bound to it,
// as the agent runs inside the edge namespace.
type NS struct {
	NS *wgpair.NS
	OS core.OS
}

// New makes the namespace; without root the test skips, saying so.
func New(tb testing.TB) *NS {
	tb.Helper()
	testsupport.RequireRoot(tb, "network namespaces and veth links")
	ns := wgpair.NewNS(tb)
	return &NS{NS: ns, OS: OpenSystem(tb, ns)}
}

// AddVeth adds a veth pair, name and "p"+name (a new uplink, as a modem
// re-plug makes one: TX checksum offload on).
func (l *NS) AddVeth(tb testing.TB, name string) {
	tb.Helper()
	la := netlink.NewLinkAttrs()
	la.Name = name
	if err := l.NS.Links.LinkAdd(&netlink.Veth{LinkAttrs: la, PeerName: "p" + name}); err != nil {
		tb.Fatalf("adding veth %s: %v", name, err)
	}
}

// DelLink deletes a link (and a veth's peer with it: the modem unplugged).
func (l *NS) DelLink(tb testing.TB, name string) {
	tb.Helper()
	link, err := l.NS.Links.LinkByName(name)
	if err != nil {
		tb.Fatal(err)
	}
	if err := l.NS.Links.LinkDel(link); err != nil {
		tb.Fatalf("deleting %s: %v", name, err)
	}
}

// TxOn returns the TX checksum features of link that are on.
func (l *NS) TxOn(tb testing.TB, link string) []string {
	tb.Helper()
	fs, err := l.OS.NIC.FeaturesWithState(link)
	if err != nil {
		tb.Fatal(err)
	}
	var on []string
	for n, st := range fs {
		if netfix.IsTxChecksum(n) && st.Active {
			on = append(on, n)
		}
	}
	slices.Sort(on)
	return on
}

// WaitOff polls until no TX checksum feature of link is on, for at most d.
func (l *NS) WaitOff(tb testing.TB, link string, d time.Duration) bool {
	tb.Helper()
	for deadline := time.Now().Add(d); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		if len(l.TxOn(tb, link)) == 0 {
			return true
		}
	}
	return false
}

// MustWaitOff fails the test when link's TX checksum offload is not off
// within d.
func (l *NS) MustWaitOff(tb testing.TB, link string, d time.Duration) {
	tb.Helper()
	if !l.WaitOff(tb, link, d) {
		tb.Fatalf("offload on %s not off within %s", link, d)
	}
}

// SyncedClock is the real clock with the kernel's sync flag overridden:
// this lab machine's kernel reports TIME_ERROR (no NTP daemon disciplines
// it, 2026-11), which the policy rightly treats as a reason to hold the
// bouncing rungs.
type SyncedClock struct{ core.Clock }

// Status is the real status, synchronised.
func (c SyncedClock) Status() (probes.ClockStatus, error) {
	cs, err := c.Clock.Status()
	cs.Synchronized = true
	return cs, err
}
