package netfix_test

import (
	"context"
	"net"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/google/nftables"
	"golang.org/x/sys/unix"

	"github.com/edgeheal/edgeheal/internal/testsupport"
	"github.com/edgeheal/edgeheal/internal/testsupport/wgpair"
	"github.com/edgeheal/edgeheal/netfix"
)

// peerMSS connects from one namespace to a listener in the other and
// returns the MSS each end sends with (TCP_MAXSEG of its socket).
func peerMSS(t *testing.T, from, to *wgpair.NS, addr string) (client, server int) {
	t.Helper()
	var ln net.Listener
	if err := to.Do(func() error {
		var err error
		ln, err = net.Listen("tcp4", addr+":0")
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, err := ln.Accept()
		if err == nil {
			accepted <- c
		}
		close(accepted)
	}()
	var c net.Conn
	if err := from.Do(func() error {
		var err error
		c, err = net.DialTimeout("tcp4", ln.Addr().String(), 5*time.Second)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	s, ok := <-accepted
	if !ok {
		t.Fatal("nothing accepted")
	}
	defer s.Close()
	return maxseg(t, c), maxseg(t, s)
}

func maxseg(t *testing.T, c net.Conn) int {
	t.Helper()
	rc, err := c.(*net.TCPConn).SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var v int
	var serr error
	if err := rc.Control(func(fd uintptr) { v, serr = unix.GetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_MAXSEG) }); err != nil || serr != nil {
		t.Fatal(err, serr)
	}
	return v
}

// The clamp through nftables' netlink, in an anonymous namespace: a SYN
// leaving the clamped link announces the clamped MSS, one arriving on it is
// clamped before the host's TCP reads it, a second Ensure changes nothing,
// the table reads back with what it does, nft(8) shows it as `tcp option
// maxseg size set`, and an empty clamp removes the table whole.
func TestLabEnsureMSSClampClampsSYNsBothWays(t *testing.T) {
	testsupport.RequireRoot(t, "nftables and veth pairs in network namespaces")
	a, b := wgpair.NewNS(t), wgpair.NewNS(t)
	an, _ := wgpair.Veth(t, a, "192.168.79.1/24", b, "192.168.79.2/24")
	if c, s := peerMSS(t, a, b, "192.168.79.2"); c < 1400 || s < 1400 {
		t.Fatalf("before the clamp the MSS is %d/%d; want a veth's (1448 or so)", c, s)
	}
	nft, err := nftables.New(nftables.WithNetNSFd(int(a.NsHandle())))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	want := netfix.MSSClamp{Table: netfix.ClampTable("wgx"), Links: []netfix.LinkClamp{{Link: an, PathMTU: 1328, MTUBefore: 1420}}}
	r, err := netfix.EnsureMSSClamp(ctx, nft, want, false)
	if err != nil || !r.Changed {
		t.Fatalf("EnsureMSSClamp = %+v, %v", r, err)
	}
	// a → b: a's SYN leaves through the clamp (mss-out): b sends at most 1288.
	if _, s := peerMSS(t, a, b, "192.168.79.2"); s > 1288 {
		t.Errorf("b sends segments of %d bytes to a; want at most 1288", s)
	}
	// b → a: b's SYN arrives through the clamp (mss-in): a sends at most 1288.
	if _, s := peerMSS(t, b, a, "192.168.79.1"); s > 1288 {
		t.Errorf("a sends segments of %d bytes to b; want at most 1288", s)
	}
	if r, err := netfix.EnsureMSSClamp(ctx, nft, want, false); err != nil || r.Changed {
		t.Errorf("again = %+v, %v; want nothing to do", r, err)
	}
	if got, ok, err := netfix.ReadMSSClamp(nft, want.Table); err != nil || !ok || len(got.Links) != 1 || got.Links[0] != want.Links[0] {
		t.Errorf("ReadMSSClamp = %+v, %v, %v", got, ok, err)
	}
	if path, err := exec.LookPath("nft"); err == nil {
		var out []byte
		_ = a.Do(func() error {
			out, err = exec.Command(path, "list", "table", "inet", want.Table).CombinedOutput()
			return nil
		})
		if err != nil || !strings.Contains(string(out), "tcp option maxseg size set 1288") || !strings.Contains(string(out), "tcp option maxseg size set 1268") {
			t.Errorf("nft list table = %v:\n%s", err, out)
		}
		t.Logf("nft list table inet %s:\n%s", want.Table, out)
	}
	if r, err := netfix.EnsureMSSClamp(ctx, nft, netfix.MSSClamp{Table: want.Table}, false); err != nil || !r.Changed {
		t.Errorf("removing = %+v, %v", r, err)
	}
	if _, ok, err := netfix.ReadMSSClamp(nft, want.Table); err != nil || ok {
		t.Errorf("after removing, the table exists = %v (%v)", ok, err)
	}
	if c, s := peerMSS(t, a, b, "192.168.79.2"); c < 1400 || s < 1400 {
		t.Errorf("after removing the clamp the MSS is %d/%d", c, s)
	}
}
