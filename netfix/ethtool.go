package netfix

import (
	"errors"
	"fmt"
	"os"
	"runtime"

	"github.com/safchain/ethtool"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// Ethtool is the NIC backed by the SIOCETHTOOL ioctl (github.com/safchain/ethtool).
//
// Its socket is bound to the network namespace it was created in: every
// call acts on the links of that namespace, whatever namespace the calling
// thread is in later. Create it inside the namespace the agent guards
// (NewEthtool in the agent's own, NewEthtoolAt for another). It is safe for
// concurrent use.
type Ethtool struct {
	e *ethtool.Ethtool
}

var _ NIC = (*Ethtool)(nil)

// NewEthtool returns an Ethtool bound to the network namespace of the
// calling thread (for a daemon that never leaves its namespace: the
// process's). Close it when done.
func NewEthtool() (*Ethtool, error) {
	e, err := ethtool.NewEthtool()
	if err != nil {
		return nil, fmt.Errorf("opening ethtool socket: %w", err)
	}
	return &Ethtool{e: e}, nil
}

// NewEthtoolAt returns an Ethtool bound to the namespace ns. It switches the
// calling goroutine's locked OS thread into ns only to create the socket and
// switches it back; if switching back fails, the thread stays locked (and so
// is discarded by the runtime) rather than run other goroutines in ns.
func NewEthtoolAt(ns netns.NsHandle) (*Ethtool, error) {
	runtime.LockOSThread()
	orig, err := netns.Get()
	if err != nil {
		runtime.UnlockOSThread()
		return nil, fmt.Errorf("reading the current network namespace: %w", err)
	}
	defer orig.Close()
	if err := netns.Set(ns); err != nil {
		runtime.UnlockOSThread()
		return nil, fmt.Errorf("entering network namespace %s: %w", ns, err)
	}
	e, err := NewEthtool()
	if rerr := netns.Set(orig); rerr != nil {
		// Never hand a thread left in a foreign namespace back to the scheduler.
		if e != nil {
			e.Close()
		}
		return nil, fmt.Errorf("returning to the original network namespace: %w", rerr)
	}
	runtime.UnlockOSThread()
	return e, err
}

// Close releases the socket.
func (e *Ethtool) Close() error {
	e.e.Close()
	return nil
}

// FeaturesWithState implements NIC. A missing link matches os.ErrNotExist.
func (e *Ethtool) FeaturesWithState(link string) (map[string]FeatureState, error) {
	fs, err := e.e.FeaturesWithState(link)
	if err != nil {
		return nil, mapLinkErr(link, err)
	}
	out := make(map[string]FeatureState, len(fs))
	for n, s := range fs {
		out[n] = FeatureState{
			Active:    s.Active,
			Requested: s.Requested,
			// The kernel's hw_features (Available) are the ones a driver
			// lets change; NETIF_F_NEVER_CHANGE ones never do. ethtool(8)
			// prints "[fixed]" for the rest.
			Changeable: s.Available && !s.NeverChanged,
		}
	}
	return out, nil
}

// Change implements NIC. Names must be kernel feature names (group names are
// expanded by EnsureTxChecksumOff). A missing link matches os.ErrNotExist.
func (e *Ethtool) Change(link string, features map[string]bool) error {
	if err := e.e.Change(link, features); err != nil {
		return mapLinkErr(link, err)
	}
	return nil
}

// mapLinkErr keeps ioctl errno values inside the adapter: ENODEV (no such
// interface in this namespace) becomes an error matching os.ErrNotExist.
func mapLinkErr(link string, err error) error {
	if errors.Is(err, unix.ENODEV) {
		return &noLinkError{link: link, err: err}
	}
	return err
}

// noLinkError is a missing link; it matches os.ErrNotExist and unwraps to the errno.
type noLinkError struct {
	link string
	err  error
}

func (e *noLinkError) Error() string        { return fmt.Sprintf("link %s not found: %v", e.link, e.err) }
func (e *noLinkError) Unwrap() error        { return e.err }
func (e *noLinkError) Is(target error) bool { return target == os.ErrNotExist }
