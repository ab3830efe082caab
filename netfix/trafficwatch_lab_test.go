package netfix_test

import (
	"context"
	"io"
	"net"
	"net/netip"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/google/nftables"

	"github.com/edgeheal/edgeheal/internal/testsupport"
	"github.com/edgeheal/edgeheal/internal/testsupport/wgpair"
	"github.com/edgeheal/edgeheal/netfix"
)

// send connects from one namespace to a listener in the other and writes n
// bytes, which the listener reads to the end.
func send(t *testing.T, from, to *wgpair.NS, ln net.Listener, n int) {
	t.Helper()
	read := make(chan error, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			read <- err
			return
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(10 * time.Second))
		_, err = io.Copy(io.Discard, c)
		read <- err
	}()
	var c net.Conn
	if err := from.Do(func() error {
		var err error
		c, err = net.DialTimeout("tcp4", ln.Addr().String(), 5*time.Second)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := c.Write(make([]byte, n)); err != nil {
		t.Fatal(err)
	}
	c.Close()
	if err := <-read; err != nil {
		t.Fatal(err)
	}
}

func listen(t *testing.T, ns *wgpair.NS, addr string) net.Listener {
	t.Helper()
	var ln net.Listener
	if err := ns.Do(func() error {
		var err error
		ln, err = net.Listen("tcp4", addr+":0")
		return err
	}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	return ln
}

// The traffic watch through nftables' netlink, in an anonymous namespace:
// a connection opened through the watched link counts one open (either
// way), one to a skipped address and port counts nothing, a transfer of full-size
// segments counts large packets (and a small exchange none), a second
// Ensure changes nothing and keeps the counters, nft(8) shows the
// counters, the clamp's reader does not take the watch for a clamp, and a
// watch of no link removes the table.
func TestLabTrafficWatchCountsWhatAPathMTUWouldHurt(t *testing.T) {
	testsupport.RequireRoot(t, "nftables and veth pairs in network namespaces")
	a, b := wgpair.NewNS(t), wgpair.NewNS(t)
	an, _ := wgpair.Veth(t, a, "192.168.78.1/24", b, "192.168.78.2/24")
	nft, err := nftables.New(nftables.WithNetNSFd(int(a.NsHandle())))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	probe, other := listen(t, b, "192.168.78.2"), listen(t, b, "192.168.78.2")
	want := netfix.TrafficWatch{Table: netfix.WatchTable("wgx"), Links: []string{an},
		Skip: []netip.AddrPort{netip.MustParseAddrPort(probe.Addr().String())}}
	if r, err := netfix.EnsureTrafficWatch(ctx, nft, want, true); err != nil || r.Changed || !r.DryRun {
		t.Fatalf("dry run = %+v, %v", r, err)
	}
	if _, ok, err := netfix.ReadTrafficWatch(nft, want.Table); err != nil || ok {
		t.Fatalf("after a dry run the table exists = %v (%v)", ok, err)
	}
	if r, err := netfix.EnsureTrafficWatch(ctx, nft, want, false); err != nil || !r.Changed {
		t.Fatalf("EnsureTrafficWatch = %+v, %v", r, err)
	}
	counts := func() netfix.TrafficCounts {
		t.Helper()
		c, ok, err := netfix.ReadTrafficWatch(nft, want.Table)
		if err != nil || !ok {
			t.Fatalf("ReadTrafficWatch = %v, %v", ok, err)
		}
		return c
	}
	if c := counts(); c != (netfix.TrafficCounts{}) {
		t.Errorf("a new watch counts %+v", c)
	}

	send(t, a, b, probe, 100<<10) // edgeheal's own probe target: not counted
	if c := counts(); c != (netfix.TrafficCounts{}) {
		t.Errorf("a connection to the skipped %s counted %+v", probe.Addr(), c)
	}
	send(t, a, b, other, 100) // a small exchange: one open, nothing large
	if c := counts(); c.Opens != 1 || c.Large != 0 {
		t.Errorf("a small exchange counted %+v; want one open, nothing large", c)
	}
	send(t, a, b, other, 100<<10) // full-size segments
	c := counts()
	if c.Opens != 2 || c.Large == 0 { // segmentation offload makes few large packets of many
		t.Errorf("100 KiB of full-size segments counted %+v; want two opens and large packets", c)
	}
	send(t, b, a, listen(t, a, "192.168.78.1"), 100) // a connection opened from the far side
	if again := counts(); again.Opens != c.Opens+1 {
		t.Errorf("a connection from the far side counted %+v after %+v; want one more open", again, c)
	}
	c = counts()
	if r, err := netfix.EnsureTrafficWatch(ctx, nft, want, false); err != nil || r.Changed {
		t.Errorf("again = %+v, %v; want nothing to do", r, err)
	}
	if again := counts(); again != c {
		t.Errorf("an unchanged watch's counters went from %+v to %+v", c, again)
	}
	if clamps, err := netfix.ListMSSClamps(nft); err != nil || len(clamps) != 0 {
		t.Errorf("ListMSSClamps = %+v, %v; a watch is no clamp", clamps, err)
	}
	if path, err := exec.LookPath("nft"); err == nil {
		var out []byte
		_ = a.Do(func() error {
			out, err = exec.Command(path, "list", "table", "inet", want.Table).CombinedOutput()
			return nil
		})
		if err != nil || !strings.Contains(string(out), "meta length > 1280") || !strings.Contains(string(out), "counter packets") {
			t.Errorf("nft list table = %v:\n%s", err, out)
		}
		t.Logf("nft list table inet %s:\n%s", want.Table, out)
	}
	if r, err := netfix.EnsureTrafficWatch(ctx, nft, netfix.TrafficWatch{Table: want.Table}, false); err != nil || !r.Changed {
		t.Errorf("removing = %+v, %v", r, err)
	}
	if _, ok, err := netfix.ReadTrafficWatch(nft, want.Table); err != nil || ok {
		t.Errorf("after removing, the table exists = %v (%v)", ok, err)
	}
}

func TestTrafficWatchRefusesWhatItCannotWrite(t *testing.T) {
	for _, w := range []netfix.TrafficWatch{
		{Table: "wg0/watch", Links: []string{"eth0"}},
		{Table: netfix.ClampTable("wg0"), Links: []string{"eth0"}},
		{Table: netfix.WatchTable("wg0"), Links: []string{"eth0/x"}},
		{Table: netfix.WatchTable("wg0"), Links: []string{"eth0"}, Skip: []netip.AddrPort{netip.MustParseAddrPort("10.0.0.1:0")}},
	} {
		if err := w.Validate(); err == nil {
			t.Errorf("%+v: valid; want an error", w)
		}
	}
}
