package tunnel

import (
	"errors"
	"fmt"
	"time"

	"github.com/edgeheal/edgeheal/configs"
)

// The rebind rung's pure decisions. A carrier NAT (or an LTE router) that
// lost the path of a UDP mapping keeps the conntrack entry of the tunnel's
// flow pinned to the dead path, and WireGuard's own retries, from the same
// source port, keep that entry alive: the tunnel stays dark while the host
// path works (docs/lab.md, "Carrier NAT": WireGuard alone dark for all of
// 60 s under nat-stuck, a new listen port back in 274 ms). Only a new
// source port gets a new mapping; the far side roams to it on the first
// authenticated packet.

// rebindPending is how long a forced handshake has to complete before the
// rebind rule calls it failed. Over a working path it completes within
// milliseconds (docs/operations/tunnels.md, "Why remove and re-add forces a
// handshake": 3–6 ms after the call); 2 s leaves room for a slow cellular
// round trip and stays under WireGuard's own retry, REKEY_TIMEOUT 5 s
// (docs/operations/tunnels.md, "WireGuard facts").
const rebindPending = 2 * time.Second

// rebindTries is how many ports of the range one rebind tries to bind.
const rebindTries = 8

// ErrRebindNotIndicated marks a rebind rung the evidence does not call for:
// it is skipped (no budget, no wait), with the reason.
var errRebindNotIndicated = errors.New("rebind not indicated")

// rebindInput is what the rebind rule reads; the caller observed it.
type rebindInput struct {
	Now      time.Time
	UplinkOK bool        // the uplink's own state
	Path     pathVerdict // the host path to the peer's endpoint, outside the tunnel
	// ForcedAt is when this incident's last forced handshake (or rebind)
	// returned; zero: none yet.
	ForcedAt  time.Time
	Handshake time.Time // the peer's last completed handshake
	TxSince   int64     // bytes sent to the peer since ForcedAt (initiations, queued data)
	RxSince   int64     // bytes received from it since
	Port      int       // the tunnel's listen port now
	Endpoint  string    // the peer's endpoint
}

// rebindVerdict is the rule's answer: run it, wait (the handshake may
// still complete), or neither (the rung does not apply; Why says why).
type rebindVerdict struct {
	Run  bool
	Wait bool
	Why  string
}

// rebindDecide is the rule that chooses the rebind rung: a forced handshake
// did not help (none completed within rebindPending of it) while the host
// path to the endpoint works and the handshake's initiations are leaving
// (tx grew) with nothing at all coming back (rx flat). That is the
// signature of a NAT mapping stuck on the tunnel's source port: the path
// works for new flows (the host path answers) and not for this one. A dark
// uplink or an unknown path is not blamed on a NAT: the ladder holds or
// moves on. Packets from the peer arriving, or the handshake completing,
// show the mapping carries this flow. The budget is the ladder's
// (ladderDecide): rebind is disruptive.
func rebindDecide(in rebindInput) rebindVerdict {
	no := func(format string, args ...any) rebindVerdict {
		return rebindVerdict{Why: fmt.Sprintf(format, args...)}
	}
	switch {
	case !in.UplinkOK:
		return no("the uplink is down: no NAT mapping to blame")
	case in.Path != pathWorks:
		return no("the host path to %s is not known to work (%s): a stuck mapping cannot be told from an outage", in.Endpoint, in.Path)
	case in.ForcedAt.IsZero():
		return no("no forced handshake has been tried in this incident")
	case in.Handshake.After(in.ForcedAt):
		return no("the forced handshake completed: the path carries this flow")
	case in.Now.Sub(in.ForcedAt) < rebindPending:
		return rebindVerdict{Wait: true, Why: fmt.Sprintf("forced handshake still pending (%s of %s)", in.Now.Sub(in.ForcedAt).Round(100*time.Millisecond), rebindPending)}
	case in.TxSince <= 0:
		return no("nothing was sent since the forced handshake: no initiation left")
	case in.RxSince > 0:
		return no("packets from the peer arrive (rx +%d bytes): the mapping carries this flow", in.RxSince)
	}
	return rebindVerdict{Run: true, Why: fmt.Sprintf("the forced handshake's initiations left (tx +%d bytes in %s) and nothing came back while the host path works: the NAT mapping of %s is stuck",
		in.TxSince, in.Now.Sub(in.ForcedAt).Round(100*time.Millisecond), rebindMapping(in.Port, in.Endpoint))}
}

// rebindMapping names the tunnel's flow as the NAT maps it.
func rebindMapping(port int, endpoint string) string {
	return fmt.Sprintf("udp local port %d → %s", port, endpoint)
}

// rebindCandidates are up to n ports of r to try, in order: the ones after
// current (wrapping around), so that successive rebinds walk the range and
// never pick the port the tunnel has now. A current port outside r (Flannel's
// 51820) starts at r.Lo.
func rebindCandidates(r configs.PortRange, current, n int) []int {
	size := r.Hi - r.Lo + 1
	if r.Lo <= 0 || size <= 0 || n <= 0 {
		return nil
	}
	start := r.Lo
	if r.Contains(current) {
		start = current + 1
	}
	var out []int
	for i := 0; i < size && len(out) < n; i++ {
		p := r.Lo + (start-r.Lo+i)%size
		if p != current {
			out = append(out, p)
		}
	}
	return out
}
