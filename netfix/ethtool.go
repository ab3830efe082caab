package netfix

import (
	"github.com/vishvananda/netns"

	"github.com/edgeheal/edgeheal/internal/nicfeat"
)

// Ethtool is the NIC backed by the SIOCETHTOOL ioctl (internal/nicfeat over
// github.com/safchain/ethtool).
//
// Its socket is bound to the network namespace it was created in: every
// call acts on the links of that namespace, whatever namespace the calling
// thread is in later. Create it inside the namespace the agent guards
// (NewEthtool in the agent's own, NewEthtoolAt for another). It is safe for
// concurrent use.
type Ethtool struct {
	s *nicfeat.Socket
}

var _ NIC = (*Ethtool)(nil)

// NewEthtool returns an Ethtool bound to the network namespace of the
// calling thread (for a daemon that never leaves its namespace: the
// process's). Close it when done.
func NewEthtool() (*Ethtool, error) {
	s, err := nicfeat.Open()
	if err != nil {
		return nil, err
	}
	return &Ethtool{s: s}, nil
}

// NewEthtoolAt returns an Ethtool bound to the namespace ns (see nicfeat.OpenAt).
func NewEthtoolAt(ns netns.NsHandle) (*Ethtool, error) {
	s, err := nicfeat.OpenAt(ns)
	if err != nil {
		return nil, err
	}
	return &Ethtool{s: s}, nil
}

// Close releases the socket.
func (e *Ethtool) Close() error { return e.s.Close() }

// FeaturesWithState implements NIC. A missing link matches os.ErrNotExist.
func (e *Ethtool) FeaturesWithState(link string) (map[string]FeatureState, error) {
	return e.s.Features(link)
}

// Change implements NIC. Names must be kernel feature names (group names are
// expanded by EnsureTxChecksumOff). A missing link matches os.ErrNotExist.
func (e *Ethtool) Change(link string, features map[string]bool) error {
	return e.s.Change(link, features)
}
