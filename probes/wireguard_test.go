package probes

import (
	"errors"
	"fmt"
	"net"
	"os"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"golang.zx2c4.com/wireguard/wgctrl/wgtypes"
)

// fakeReader returns a fixed device and counts calls.
type fakeReader struct {
	dev   *wgtypes.Device
	calls int
}

func (f *fakeReader) Device(name string) (*wgtypes.Device, error) {
	f.calls++
	if f.dev == nil || f.dev.Name != name {
		return nil, os.ErrNotExist
	}
	return f.dev, nil
}

func key(b byte) wgtypes.Key {
	var k wgtypes.Key
	for i := range k {
		k[i] = b
	}
	return k
}

func TestReadPeers(t *testing.T) {
	hs := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	_, allowed, _ := net.ParseCIDR("10.0.0.1/32")
	ep := &net.UDPAddr{IP: net.IPv4(192, 0, 2, 1), Port: 51820}
	f := &fakeReader{dev: &wgtypes.Device{
		Name:       "wg0",
		PrivateKey: key(9),
		Peers: []wgtypes.Peer{
			{PublicKey: key(1), PresharedKey: key(8), Endpoint: ep, LastHandshakeTime: hs, ReceiveBytes: 10, TransmitBytes: 20,
				PersistentKeepaliveInterval: 25 * time.Second, AllowedIPs: []net.IPNet{*allowed}},
			{PublicKey: key(2)},
		},
	}}
	got, err := ReadPeers(f, "wg0")
	if err != nil {
		t.Fatal(err)
	}
	want := []PeerStats{
		{PublicKey: key(1), Endpoint: ep, LastHandshake: hs, RxBytes: 10, TxBytes: 20, Keepalive: 25 * time.Second, AllowedIPs: []net.IPNet{*allowed}},
		{PublicKey: key(2)},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("ReadPeers (-want +got):\n%s", diff)
	}
	if f.calls != 1 {
		t.Errorf("Device called %d times, want 1", f.calls)
	}
	if _, err := ReadPeers(f, "wg9"); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing interface: err = %v, want os.ErrNotExist", err)
	}
}

func hubDevice(n int) *wgtypes.Device {
	d := &wgtypes.Device{Name: "wg0", Peers: make([]wgtypes.Peer, n)}
	for i := range d.Peers {
		var k wgtypes.Key
		copy(k[:], fmt.Sprintf("%032d", i))
		_, a, _ := net.ParseCIDR(fmt.Sprintf("10.%d.%d.0/24", i/256, i%256))
		d.Peers[i] = wgtypes.Peer{PublicKey: k, Endpoint: &net.UDPAddr{IP: net.IPv4(192, 0, 2, 1), Port: 51820 + i%1000},
			ReceiveBytes: int64(i), TransmitBytes: int64(i), PersistentKeepaliveInterval: 25 * time.Second, AllowedIPs: []net.IPNet{*a}}
	}
	return d
}

// BenchmarkReadPeers5000 is one read of a hub with 5,000 peers (the wgctrl
// round trip itself is not included: the fake returns a ready device).
func BenchmarkReadPeers5000(b *testing.B) {
	f := &fakeReader{dev: hubDevice(5000)}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := ReadPeers(f, "wg0"); err != nil {
			b.Fatal(err)
		}
	}
}
