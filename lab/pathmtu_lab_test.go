package lab_test

import (
	"context"
	"net/netip"
	"testing"
	"time"

	"github.com/edgeheal/edgeheal/internal/testsupport/labtest"
	"github.com/edgeheal/edgeheal/lab"
	"github.com/edgeheal/edgeheal/probes"
)

// transfer makes one 256 KiB transfer and reports whether it completed
// within limit.
func transfer(t *testing.T, l *lab.Lab, from lab.Node, dir lab.Direction, limit time.Duration) (time.Duration, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	return l.Transfer(ctx, from, dir, 256<<10)
}

// ping sends one echo of size bytes (the whole IP packet) with DF set from
// node to addr and reports whether it was answered.
func ping(t *testing.T, l *lab.Lab, from lab.Node, addr netip.Addr, size int) bool {
	t.Helper()
	var r probes.SizesResult
	err := l.Do(from, func() error {
		r = probes.ProbeSizes(context.Background(), addr, probes.SizeProbe{Sizes: []int{size}, Timeout: time.Second})
		return r.Err
	})
	if err != nil {
		t.Fatal(err)
	}
	return r.Answered()
}

// The path-MTU blackhole as the lab makes it (docs/lab.md, "Faults"): with
// `fault mtu 1400` the tunnel keeps every small packet (handshakes,
// telemetry, pings) while a 256 KiB transfer, either way, through the
// tunnel and over the uplink, never completes; `fault pass` lifts it.
func TestLabPathMTUFaultKillsBulkTransfersOnly(t *testing.T) {
	l := labtest.New(t, lab.Options{OffloadOff: true, Keepalive: 5 * time.Second})
	if ok, err := waitFlowing(l, 20*time.Second); !ok {
		t.Fatalf("telemetry does not flow: %v", err)
	}
	paths := []struct {
		from lab.Node
		dir  lab.Direction
	}{{lab.Pod, lab.Download}, {lab.Pod, lab.Upload}, {lab.Edge, lab.Download}, {lab.Edge, lab.Upload}}
	for _, p := range paths {
		if d, err := transfer(t, l, p.from, p.dir, 10*time.Second); err != nil {
			t.Fatalf("before the fault, %s %s: %v", p.from, p.dir, err)
		} else {
			t.Logf("before the fault, %s %s: %v", p.from, p.dir, d)
		}
	}
	cloudTunnel, cloudPublic := l.CloudTunnelAddr(), l.CloudPublicAddr()
	if err := l.PathMTU(1400, 0); err != nil {
		t.Fatal(err)
	}
	if f, _ := l.Fault(); f.Kind != lab.FaultMTU || f.MTU != 1400 {
		t.Fatalf("fault = %+v", f)
	}
	for _, p := range paths {
		if d, err := transfer(t, l, p.from, p.dir, 3*time.Second); err == nil {
			t.Errorf("with the fault, %s %s completed in %v; want it stuck", p.from, p.dir, d)
		}
	}
	// Over the uplink the boundary is the fault's; through the tunnel it is
	// 60 bytes lower (IPv4, UDP and WireGuard's header and tag) and
	// WireGuard pads each packet to a multiple of 16 (below the link's MTU).
	for _, c := range []struct {
		from lab.Node
		addr netip.Addr
		size int
		ok   bool
	}{
		{lab.Edge, cloudPublic, 1400, true}, {lab.Edge, cloudPublic, 1401, false},
		{lab.Pod, cloudTunnel, 1328, true}, {lab.Pod, cloudTunnel, 1329, false}, {lab.Pod, cloudTunnel, 1340, false},
		{lab.Pod, cloudTunnel, 200, true},
	} {
		if got := ping(t, l, c.from, c.addr, c.size); got != c.ok {
			t.Errorf("DF echo of %d bytes from %s to %s answered = %v, want %v", c.size, c.from, c.addr, got, c.ok)
		}
	}
	if ok, err := waitTelemetry(l); err != nil || !ok {
		t.Errorf("small telemetry stopped under the fault (%v)", err)
	}
	if err := l.Pass(); err != nil {
		t.Fatal(err)
	}
	for _, p := range paths {
		if _, err := transfer(t, l, p.from, p.dir, 10*time.Second); err != nil {
			t.Errorf("after fault pass, %s %s: %v", p.from, p.dir, err)
		}
	}
}

// waitFlowing waits until telemetry arrives.
func waitFlowing(l *lab.Lab, limit time.Duration) (bool, error) {
	deadline := time.Now().Add(limit)
	for time.Now().Before(deadline) {
		if ok, err := waitTelemetry(l); ok || err != nil {
			return ok, err
		}
		time.Sleep(100 * time.Millisecond)
	}
	return false, nil
}

// waitTelemetry reports whether telemetry was delivered in the last second.
func waitTelemetry(l *lab.Lab) (bool, error) {
	from := time.Now().Add(-2 * time.Second)
	n := 0
	for _, s := range l.Samples(from) {
		if !s.Received.IsZero() {
			n++
		}
	}
	return n > 0, nil
}
