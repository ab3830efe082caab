// Package wgpair gives lab tests (root) real WireGuard tunnels: anonymous
// network namespaces, a veth pair between two of them, and a wireguard-go
// device in each, driven through its UAPI socket so that wgctrl (and so
// netfix and probes) configure it exactly like the kernel module.
//
// Everything a helper creates is removed in t.Cleanup, also after a
// failure: devices are closed, UAPI sockets unlinked, namespace handles
// closed (the kernel then deletes the namespace and its links). Nothing
// touches the host's namespace or interfaces; interface names carry a
// random suffix because UAPI sockets (/var/run/wireguard/<name>.sock) are
// shared by every namespace on the machine.
package wgpair

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.zx2c4.com/wireguard/conn"
	"golang.zx2c4.com/wireguard/device"
	"golang.zx2c4.com/wireguard/ipc"
	"golang.zx2c4.com/wireguard/tun"
	"golang.zx2c4.com/wireguard/wgctrl"
	"golang.zx2c4.com/wireguard/wgctrl/wgtypes"
)

// Name returns prefix followed by random hex, at most 15 characters (an
// interface name's limit).
func Name(prefix string) string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	s := prefix + hex.EncodeToString(b[:])
	if len(s) > 15 {
		s = s[:15]
	}
	return s
}

// NS is an anonymous network namespace with a netlink handle inside it.
type NS struct {
	Links *netlink.Handle // netlink.NewHandleAt(ns)
	h     netns.NsHandle
}

// NsHandle is the namespace's file handle (valid until the test ends).
func (ns *NS) NsHandle() netns.NsHandle { return ns.h }

// NewNS creates an anonymous network namespace with loopback up. It is
// removed when the test ends (once every socket in it is closed).
func NewNS(t testing.TB) *NS {
	t.Helper()
	var h netns.NsHandle
	err := onLockedThread(func() error {
		orig, err := netns.Get()
		if err != nil {
			return err
		}
		defer orig.Close()
		h, err = netns.New() // also switches this thread into it
		if serr := netns.Set(orig); serr != nil {
			return errLeftInNamespace{serr}
		}
		return err
	})
	if err != nil {
		t.Fatalf("creating network namespace: %v", err)
	}
	nh, err := netlink.NewHandleAt(h)
	if err != nil {
		h.Close()
		t.Fatalf("netlink handle in namespace: %v", err)
	}
	ns := &NS{Links: nh, h: h}
	t.Cleanup(func() {
		nh.Close()
		h.Close()
	})
	lo, err := nh.LinkByName("lo")
	if err == nil {
		err = nh.LinkSetUp(lo)
	}
	if err != nil {
		t.Fatalf("setting lo up: %v", err)
	}
	return ns
}

// errLeftInNamespace marks a thread that could not be switched back: it
// must stay locked so that it dies with its goroutine.
type errLeftInNamespace struct{ err error }

func (e errLeftInNamespace) Error() string {
	return "switching back to the original namespace: " + e.err.Error()
}

// onLockedThread runs fn in a fresh goroutine locked to its OS thread and
// unlocks the thread afterwards unless fn reported it could not switch it
// back, in which case the thread exits with the goroutine.
func onLockedThread(fn func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		err := fn()
		var left errLeftInNamespace
		if !errors.As(err, &left) {
			runtime.UnlockOSThread()
		}
		errc <- err
	}()
	return <-errc
}

// Do runs fn on an OS thread inside ns and switches the thread back. Create
// sockets or TUN devices in fn; they keep the namespace afterwards. fn must
// not start goroutines that need the namespace.
func (ns *NS) Do(fn func() error) error {
	return onLockedThread(func() error {
		orig, err := netns.Get()
		if err != nil {
			return err
		}
		defer orig.Close()
		if err := netns.Set(ns.h); err != nil {
			return fmt.Errorf("entering namespace: %w", err)
		}
		ferr := fn()
		if err := netns.Set(orig); err != nil {
			return errLeftInNamespace{err}
		}
		return ferr
	})
}

// Veth links a and b with a veth pair, gives each end an address (CIDR
// strings like "192.168.77.1/24") and sets both up. It returns the names
// of the two ends.
func Veth(t testing.TB, a *NS, aAddr string, b *NS, bAddr string) (string, string) {
	t.Helper()
	an, bn := Name("va"), Name("vb")
	v := &netlink.Veth{
		LinkAttrs:     netlink.LinkAttrs{Name: an},
		PeerName:      bn,
		PeerNamespace: netlink.NsFd(int(b.h)),
	}
	if err := a.Links.LinkAdd(v); err != nil {
		t.Fatalf("adding veth pair: %v", err)
	}
	for _, e := range []struct {
		ns         *NS
		name, addr string
	}{{a, an, aAddr}, {b, bn, bAddr}} {
		l, err := e.ns.Links.LinkByName(e.name)
		if err != nil {
			t.Fatalf("finding %s: %v", e.name, err)
		}
		AddAddr(t, e.ns, e.name, e.addr)
		if err := e.ns.Links.LinkSetUp(l); err != nil {
			t.Fatalf("setting %s up: %v", e.name, err)
		}
	}
	return an, bn
}

// AddAddr adds a CIDR address to link in ns.
func AddAddr(t testing.TB, ns *NS, link, cidr string) {
	t.Helper()
	l, err := ns.Links.LinkByName(link)
	if err != nil {
		t.Fatalf("finding %s: %v", link, err)
	}
	a, err := netlink.ParseAddr(cidr)
	if err != nil {
		t.Fatalf("parsing %s: %v", cidr, err)
	}
	if err := ns.Links.AddrAdd(l, a); err != nil {
		t.Fatalf("adding %s to %s: %v", cidr, link, err)
	}
}

// Device is a wireguard-go device on a TUN inside a namespace, with its
// UAPI socket, so that wgctrl.Client.Device/ConfigureDevice work on Name.
type Device struct {
	Name string
	NS   *NS
	Key  wgtypes.Key // private key
	Port int

	dev  *device.Device
	uapi net.Listener
	wg   sync.WaitGroup
	log  *syncBuffer
}

// NewDevice creates a wireguard-go device named name (see Name) in ns,
// with a fresh private key and listen port, and its link up. It is closed
// and its UAPI socket removed when the test ends.
func NewDevice(t testing.TB, ns *NS, name string, port int) *Device {
	t.Helper()
	var tdev tun.Device
	if err := ns.Do(func() error {
		var err error
		tdev, err = tun.CreateTUN(name, device.DefaultMTU)
		return err
	}); err != nil {
		t.Fatalf("creating TUN %s: %v", name, err)
	}
	d := &Device{Name: name, NS: ns, Port: port, log: &syncBuffer{}}
	logger := &device.Logger{
		Verbosef: device.DiscardLogf,
		Errorf:   func(format string, args ...any) { d.log.printf("error: "+format, args...) },
	}
	// The bind's UDP sockets and the MTU lookups must happen inside the
	// namespace; wireguard-go makes both from whatever thread it runs on.
	d.dev = device.NewDevice(&nsTUN{Device: tdev, ns: ns}, &nsBind{Bind: conn.NewDefaultBind(), ns: ns}, logger)
	t.Cleanup(func() {
		d.close()
		if t.Failed() && d.log.Len() > 0 {
			t.Logf("wireguard-go %s log:\n%s", name, d.log.String())
		}
	})
	f, err := ipc.UAPIOpen(name)
	if err != nil {
		t.Fatalf("opening UAPI socket for %s: %v", name, err)
	}
	d.uapi, err = ipc.UAPIListen(name, f)
	f.Close()
	if err != nil {
		t.Fatalf("listening on UAPI socket for %s: %v", name, err)
	}
	d.wg.Add(1)
	go func() {
		defer d.wg.Done()
		for {
			c, err := d.uapi.Accept()
			if err != nil {
				return
			}
			d.wg.Add(1)
			go func() {
				defer d.wg.Done()
				d.dev.IpcHandle(c)
			}()
		}
	}()
	k, err := wgtypes.GeneratePrivateKey()
	if err != nil {
		t.Fatal(err)
	}
	d.Key = k
	if err := d.dev.IpcSet(fmt.Sprintf("private_key=%s\nlisten_port=%d\n", hex.EncodeToString(k[:]), port)); err != nil {
		t.Fatalf("configuring %s: %v", name, err)
	}
	l, err := ns.Links.LinkByName(name)
	if err != nil {
		t.Fatalf("finding %s: %v", name, err)
	}
	if err := ns.Links.LinkSetUp(l); err != nil {
		t.Fatalf("setting %s up: %v", name, err)
	}
	// The TUN's "up" event reaches wireguard-go asynchronously; a packet
	// sent before it is dropped, and the next handshake attempt is 5 s
	// later. Up is idempotent and opens the bind now.
	if err := d.dev.Up(); err != nil {
		t.Fatalf("bringing %s up: %v", name, err)
	}
	return d
}

func (d *Device) close() {
	if d.uapi != nil {
		d.uapi.Close() // unlinks the socket
	}
	d.dev.Close()
	d.wg.Wait()
	os.Remove("/var/run/wireguard/" + d.Name + ".sock")
}

// nsBind opens the bind's sockets inside a namespace.
type nsBind struct {
	conn.Bind
	ns *NS
}

func (b *nsBind) Open(port uint16) (fns []conn.ReceiveFunc, actual uint16, err error) {
	err = b.ns.Do(func() error {
		var oerr error
		fns, actual, oerr = b.Bind.Open(port)
		return oerr
	})
	return fns, actual, err
}

// nsTUN reads the TUN's MTU inside its namespace (wireguard-go looks it up
// by name with a fresh socket each time).
type nsTUN struct {
	tun.Device
	ns *NS
}

func (t *nsTUN) MTU() (mtu int, err error) {
	err = t.ns.Do(func() error {
		var merr error
		mtu, merr = t.Device.MTU()
		return merr
	})
	return mtu, err
}

// Node is one end of a Pair.
type Node struct {
	NS       *NS
	Dev      *Device
	Veth     string     // the underlay link
	Underlay netip.Addr // address on Veth
	Tunnel   netip.Addr // address on the WireGuard link
}

// Endpoint is the node's WireGuard UDP endpoint.
func (n *Node) Endpoint() *net.UDPAddr {
	return &net.UDPAddr{IP: n.Underlay.AsSlice(), Port: n.Dev.Port}
}

// PublicKey is the node's WireGuard public key.
func (n *Node) PublicKey() wgtypes.Key { return n.Dev.Key.PublicKey() }

// Pair is two namespaces A and B joined by a veth pair (underlay
// 192.168.<x>.1 and .2/24), each with a wireguard-go device (tunnel
// 10.<x>.0.1 and .2/24) that has the other as its only peer, with a
// preshared key, endpoints on both sides and no keepalive. x is random, so
// that logs of parallel tests differ; the namespaces keep them apart
// anyway.
type Pair struct {
	A, B   *Node
	PSK    wgtypes.Key
	Client *wgctrl.Client
}

// NewPair builds a Pair. Its WireGuard client is closed when the test ends.
func NewPair(t testing.TB) *Pair {
	t.Helper()
	var rb [1]byte
	_, _ = rand.Read(rb[:])
	x := int(rb[0]%200) + 20
	p := &Pair{A: &Node{NS: NewNS(t)}, B: &Node{NS: NewNS(t)}}
	p.A.Underlay = netip.AddrFrom4([4]byte{192, 168, byte(x), 1})
	p.B.Underlay = netip.AddrFrom4([4]byte{192, 168, byte(x), 2})
	p.A.Veth, p.B.Veth = Veth(t, p.A.NS, p.A.Underlay.String()+"/24", p.B.NS, p.B.Underlay.String()+"/24")
	c, err := wgctrl.New()
	if err != nil {
		t.Fatalf("wgctrl: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	p.Client = c
	p.tunnel(t, x, 51820)
	return p
}

// Another is a second tunnel between the same two namespaces, over the
// same underlay: devices of their own (tunnel 10.<y>.0.1 and .2/24, ports
// 51822 and 51823), as a node with two WireGuard interfaces has.
func (p *Pair) Another(t testing.TB) *Pair {
	t.Helper()
	q := &Pair{
		A:      &Node{NS: p.A.NS, Veth: p.A.Veth, Underlay: p.A.Underlay},
		B:      &Node{NS: p.B.NS, Veth: p.B.Veth, Underlay: p.B.Underlay},
		Client: p.Client,
	}
	y := int(p.A.Tunnel.As4()[1])%200 + 21
	q.tunnel(t, y, 51822)
	return q
}

// tunnel makes the pair's devices and peers: tunnel addresses 10.<x>.0.1
// and .2/24, A listening on port and B on port+1.
func (p *Pair) tunnel(t testing.TB, x, port int) {
	t.Helper()
	p.A.Tunnel = netip.AddrFrom4([4]byte{10, byte(x), 0, 1})
	p.B.Tunnel = netip.AddrFrom4([4]byte{10, byte(x), 0, 2})
	p.A.Dev = NewDevice(t, p.A.NS, Name("wgta"), port)
	p.B.Dev = NewDevice(t, p.B.NS, Name("wgtb"), port+1)
	AddAddr(t, p.A.NS, p.A.Dev.Name, p.A.Tunnel.String()+"/24")
	AddAddr(t, p.B.NS, p.B.Dev.Name, p.B.Tunnel.String()+"/24")
	psk, err := wgtypes.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	p.PSK = psk
	for _, e := range []struct{ self, other *Node }{{p.A, p.B}, {p.B, p.A}} {
		err := p.Client.ConfigureDevice(e.self.Dev.Name, wgtypes.Config{Peers: []wgtypes.PeerConfig{{
			PublicKey:         e.other.PublicKey(),
			PresharedKey:      &psk,
			Endpoint:          e.other.Endpoint(),
			ReplaceAllowedIPs: true,
			AllowedIPs:        []net.IPNet{{IP: e.other.Tunnel.AsSlice(), Mask: net.CIDRMask(32, 32)}},
		}}})
		if err != nil {
			t.Fatalf("configuring %s: %v", e.self.Dev.Name, err)
		}
	}
}

// DefaultRoute gives A a default route over the underlay via B, as an
// edge node's goes over its uplink (the agent holds repairs without one).
func (p *Pair) DefaultRoute(t testing.TB) {
	t.Helper()
	veth, err := p.A.NS.Links.LinkByName(p.A.Veth)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.A.NS.Links.RouteAdd(&netlink.Route{LinkIndex: veth.Attrs().Index, Gw: p.B.Underlay.AsSlice()}); err != nil {
		t.Fatalf("adding the default route in A: %v", err)
	}
}

// Peer returns self's view of its only peer.
func (p *Pair) Peer(t testing.TB, self *Node) wgtypes.Peer {
	t.Helper()
	d, err := p.Client.Device(self.Dev.Name)
	if err != nil {
		t.Fatalf("reading %s: %v", self.Dev.Name, err)
	}
	if len(d.Peers) != 1 {
		t.Fatalf("%s has %d peers, want 1", self.Dev.Name, len(d.Peers))
	}
	return d.Peers[0]
}

// WaitHandshake polls self's peer every 5 ms until its last handshake is
// after since, for at most limit, and returns when it happened.
func (p *Pair) WaitHandshake(t testing.TB, self *Node, since time.Time, limit time.Duration) time.Time {
	t.Helper()
	deadline := time.Now().Add(limit)
	for time.Now().Before(deadline) {
		if hs := p.Peer(t, self).LastHandshakeTime; hs.After(since) {
			return hs
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatalf("no handshake on %s after %s within %s", self.Dev.Name, since.Format(time.RFC3339Nano), limit)
	return time.Time{}
}

// Ping sends traffic from a to b's tunnel address over UDP (one datagram
// every 10 ms, up to limit) until b receives one, and fails the test if it
// never does. It brings a session up without needing keepalive.
func (p *Pair) Ping(t testing.TB, from, to *Node, limit time.Duration) {
	t.Helper()
	if _, ok := p.Deliver(t, from, to, limit); !ok {
		t.Fatalf("no datagram from %s to %s through the tunnel within %s", from.Tunnel, to.Tunnel, limit)
	}
}

// Deliver is Ping without failing: it reports how long the first datagram
// took to arrive (from the first send), and whether one did within limit.
func (p *Pair) Deliver(t testing.TB, from, to *Node, limit time.Duration) (time.Duration, bool) {
	t.Helper()
	var srv net.PacketConn
	if err := to.NS.Do(func() error {
		var err error
		srv, err = net.ListenPacket("udp4", to.Tunnel.String()+":0")
		return err
	}); err != nil {
		t.Fatalf("listening in %s: %v", to.Dev.Name, err)
	}
	defer srv.Close()
	var cl net.PacketConn
	if err := from.NS.Do(func() error {
		var err error
		cl, err = net.ListenPacket("udp4", ":0")
		return err
	}); err != nil {
		t.Fatalf("socket in %s: %v", from.Dev.Name, err)
	}
	defer cl.Close()
	start := time.Now()
	deadline := start.Add(limit)
	buf := make([]byte, 64)
	for time.Now().Before(deadline) {
		if _, err := cl.WriteTo([]byte("ping"), srv.LocalAddr()); err != nil {
			t.Fatalf("sending through tunnel: %v", err)
		}
		srv.SetReadDeadline(time.Now().Add(10 * time.Millisecond))
		if n, _, err := srv.ReadFrom(buf); err == nil && bytes.Equal(buf[:n], []byte("ping")) {
			return time.Since(start), true
		}
	}
	return limit, false
}

// syncBuffer collects wireguard-go's error log for failed tests.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) printf(format string, args ...any) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.b.Len() < 64<<10 {
		fmt.Fprintf(&s.b, format+"\n", args...)
	}
}

func (s *syncBuffer) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Len()
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
