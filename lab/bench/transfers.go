package bench

import (
	"context"
	"math"
	"sync"
	"time"

	"github.com/edgeheal/edgeheal/lab"
)

// Bulk transfers, what a path-MTU blackhole kills (S8): new 256 KiB TCP
// transfers through the tunnel (from the pod) and over the uplink (from
// the edge), both ways (lab.Transfer).

// TransferSize is the size of every bulk transfer.
const TransferSize = 256 << 10

// TransferKind is one kind of transfer: where it starts, which way.
type TransferKind struct {
	From lab.Node
	Dir  lab.Direction
}

func (k TransferKind) String() string {
	way := "tunnel"
	if k.From == lab.Edge {
		way = "uplink"
	}
	return way + "-" + string(k.Dir)
}

// TransferKinds are the four: through the tunnel and over the uplink,
// down and up.
var TransferKinds = []TransferKind{{lab.Pod, lab.Download}, {lab.Pod, lab.Upload}, {lab.Edge, lab.Download}, {lab.Edge, lab.Upload}}

// TransferResult is one kind's transfers in S8.
type TransferResult struct {
	Kind string `json:"kind"`
	// BeforeSeconds is one transfer before the fault (0: it failed).
	BeforeSeconds float64 `json:"before_seconds"`
	// FirstSeconds is the fault to the end of the first new transfer that
	// completed (one started every TransferEvery, each its own
	// connection); nil: none within the window.
	FirstSeconds *float64 `json:"first_seconds,omitempty"`
	// LaterSeconds are the new transfers made one after another once one
	// had completed, each its own connection; LaterFailed those that did
	// not complete within TransferLimit.
	LaterSeconds []float64 `json:"later_seconds,omitempty"`
	LaterFailed  int       `json:"later_failed,omitempty"`
}

// How S8 tries: a new connection every TransferEvery, each given
// TransferLimit (more than the 6.5 s the kernel's MTU probing takes).
const (
	TransferEvery = 500 * time.Millisecond
	TransferLimit = 20 * time.Second
)

// transferOnce makes one transfer, bounded by TransferLimit.
func transferOnce(ctx context.Context, l *lab.Lab, k TransferKind) (time.Duration, error) {
	ctx, cancel := context.WithTimeout(ctx, TransferLimit)
	defer cancel()
	return l.Transfer(ctx, k.From, k.Dir, TransferSize)
}

// FirstTransfers starts a new transfer of each kind every TransferEvery,
// until one of each has completed or window has passed, and returns, per
// kind, when the first one completed (zero: none did). It waits for
// every transfer it started.
func FirstTransfers(ctx context.Context, l *lab.Lab, window time.Duration) []time.Time {
	done := make([]time.Time, len(TransferKinds))
	var mu sync.Mutex
	var wg sync.WaitGroup
	defer wg.Wait()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel() // the ones still trying are not needed any more
	deadline := time.Now().Add(window)
	tick := time.NewTicker(TransferEvery)
	defer tick.Stop()
	for time.Now().Before(deadline) {
		left := 0
		for i, k := range TransferKinds {
			mu.Lock()
			finished := !done[i].IsZero()
			mu.Unlock()
			if finished {
				continue
			}
			left++
			wg.Go(func() {
				if _, err := transferOnce(ctx, l, k); err == nil {
					mu.Lock()
					if done[i].IsZero() {
						done[i] = time.Now()
					}
					mu.Unlock()
				}
			})
		}
		if left == 0 {
			break
		}
		select {
		case <-ctx.Done():
			return done
		case <-tick.C:
		}
	}
	mu.Lock()
	defer mu.Unlock()
	return append([]time.Time(nil), done...)
}

// s8Later makes n more transfers of each kind that got through after the
// fault, one after another, the kinds side by side, into rs.
func s8Later(ctx context.Context, l *lab.Lab, rs []TransferResult, n int) {
	var wg sync.WaitGroup
	for i, k := range TransferKinds {
		if rs[i].FirstSeconds == nil {
			continue // none got through: the later ones would not either
		}
		wg.Go(func() {
			for range n {
				d, err := transferOnce(ctx, l, k)
				if ctx.Err() != nil {
					return
				}
				if err != nil {
					rs[i].LaterFailed++
					continue
				}
				rs[i].LaterSeconds = append(rs[i].LaterSeconds, math.Round(d.Seconds()*1000)/1000)
			}
		})
	}
	wg.Wait()
}
