package system

// The ethtool seam: an ethtool netlink socket (ethnl) or, on kernels
// without that family (before 5.6), a SIOCETHTOOL socket
// (github.com/safchain/ethtool), bound to the namespace it was made in,
// reading and changing link features by kernel name. ethtool(8)'s group
// names are expanded by netfix before they reach it.

import (
	"errors"
	"fmt"
	"os"

	"github.com/safchain/ethtool"
	"golang.org/x/sys/unix"

	"github.com/edgeheal/edgeheal/agent/system/ethnl"
	"github.com/edgeheal/edgeheal/netfix"
)

// ethtoolSocket reads and changes link features. Every call acts on the
// links of the namespace the socket was created in, whatever namespace the
// calling thread is in later. It is safe for concurrent use.
type ethtoolSocket struct {
	e  *ethtool.Ethtool // the ioctl, when nl is nil
	nl *ethnl.Conn
}

// openEthtool opens a socket in the calling thread's namespace: ethtool
// netlink where the kernel has it, else the ioctl. The choice is made
// here, once for the socket's life.
func openEthtool() (*ethtoolSocket, error) {
	nl, err := ethnl.Dial()
	if err == nil {
		return &ethtoolSocket{nl: nl}, nil
	}
	if !errors.Is(err, errors.ErrUnsupported) {
		return nil, fmt.Errorf("opening an ethtool netlink socket: %w", err)
	}
	return openEthtoolIoctl()
}

// openEthtoolIoctl opens a SIOCETHTOOL socket in the calling thread's
// namespace.
func openEthtoolIoctl() (*ethtoolSocket, error) {
	e, err := ethtool.NewEthtool()
	if err != nil {
		return nil, fmt.Errorf("opening an ethtool socket: %w", err)
	}
	return &ethtoolSocket{e: e}, nil
}

func (s *ethtoolSocket) Close() error {
	if s.nl != nil {
		return s.nl.Close()
	}
	s.e.Close()
	return nil
}

// ethtoolNIC is netfix.NIC on the namespace's ethtool socket.
type ethtoolNIC struct{ s *System }

var _ netfix.NIC = ethtoolNIC{}

// FeaturesWithState returns every feature the link's driver lists. A
// missing link is an error matching os.ErrNotExist.
func (n ethtoolNIC) FeaturesWithState(link string) (map[string]netfix.FeatureState, error) {
	sock, err := n.s.eth.use()
	if err != nil {
		return nil, err
	}
	if sock.nl != nil {
		return netlinkFeatures(sock.nl, link)
	}
	fs, err := sock.e.FeaturesWithState(link)
	if err != nil {
		return nil, linkErr(link, err)
	}
	out := make(map[string]netfix.FeatureState, len(fs))
	for name, st := range fs {
		// The kernel's hw_features (Available) are the ones a driver lets
		// change; NETIF_F_NEVER_CHANGE ones never do.
		out[name] = netfix.FeatureState{Active: st.Active, Requested: st.Requested, Changeable: st.Available && !st.NeverChanged}
	}
	return out, nil
}

// Change asks the kernel to set features (kernel names only). It can return
// nil and not apply a change (a fixed feature, a dependency): netfix reads
// back. A missing link is an error matching os.ErrNotExist.
func (n ethtoolNIC) Change(link string, features map[string]bool) error {
	sock, err := n.s.eth.use()
	if err != nil {
		return err
	}
	if sock.nl != nil {
		return netlinkErr(link, sock.nl.Change(link, features))
	}
	if err := sock.e.Change(link, features); err != nil {
		return linkErr(link, err)
	}
	return nil
}

// linkErr keeps errno values inside the adapter: ENODEV (no such interface
// in this namespace) becomes an error matching os.ErrNotExist.
func linkErr(link string, err error) error {
	if errors.Is(err, unix.ENODEV) {
		return &noLinkError{link: link, err: err}
	}
	return fmt.Errorf("ethtool on %s: %w", link, err)
}

type noLinkError struct {
	link string
	err  error
}

func (e *noLinkError) Error() string { return fmt.Sprintf("link %s not found: %v", e.link, e.err) }
func (e *noLinkError) Unwrap() error { return e.err }

// Is makes a missing link match os.ErrNotExist.
func (e *noLinkError) Is(target error) bool { return target == os.ErrNotExist }
