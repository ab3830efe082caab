package ethnl

import (
	"errors"
	"fmt"
	"os"
	"sync"

	"github.com/mdlayher/genetlink"
	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"
)

// State is one feature of a device, as the kernel reports it.
type State struct {
	Available   bool // in the driver's hw_features: it lets the feature be changed
	Requested   bool // wanted: what was last asked for
	Active      bool // on now
	NeverChange bool // NETIF_F_NEVER_CHANGE: never changeable, whatever the driver says
}

// Conn is a generic netlink socket to the kernel's ethtool family. It acts
// on the devices of the network namespace it was created in, whatever
// namespace the calling thread is in later. It is safe for concurrent use.
type Conn struct {
	c      *genetlink.Conn
	family uint16

	mu    sync.Mutex
	names map[string]featureNames // by device name
}

// featureNames is a device's feature-name table, valid while the name
// still belongs to the device with this index.
type featureNames struct {
	ifindex uint32
	names   []string
}

// Dial opens a socket in the calling thread's network namespace. On a
// kernel without the ethtool family (before Linux 5.6, or built without
// CONFIG_ETHTOOL_NETLINK), and where netlink sockets are refused
// (EAFNOSUPPORT), the error matches errors.ErrUnsupported.
func Dial() (*Conn, error) {
	// Not netlink.Config's Strict: it fails the dial where a socket option
	// is missing (NETLINK_GET_STRICT_CHK came in 4.20), and a kernel that
	// old must get as far as the family lookup, to fall back to the ioctl.
	gc, err := genetlink.Dial(nil)
	if err != nil {
		return nil, &Error{Op: "opening a generic netlink socket", err: err}
	}
	// The kernel's own words for an error ("no device matches name"), where
	// it has them (4.12 and later); without them an error is its errno.
	_ = gc.SetOption(netlink.ExtendedAcknowledge, true)
	c, err := newConn(gc)
	if err != nil {
		gc.Close()
		return nil, err
	}
	return c, nil
}

// newConn looks up the ethtool family on gc.
func newConn(gc *genetlink.Conn) (*Conn, error) {
	f, err := gc.GetFamily(unix.ETHTOOL_GENL_NAME)
	if err != nil {
		if errors.Is(err, unix.ENOENT) {
			return nil, errNoFamily
		}
		return nil, &Error{Op: "looking up the ethtool netlink family", err: err}
	}
	return &Conn{c: gc, family: f.ID, names: map[string]featureNames{}}, nil
}

var errNoFamily = fmt.Errorf("ethnl: the kernel has no ethtool netlink family (Linux 5.6 or later has it): %w", errors.ErrUnsupported)

// Close closes the socket.
func (c *Conn) Close() error {
	if err := c.c.Close(); err != nil {
		return &Error{Op: "closing", err: err}
	}
	return nil
}

// execute sends one request and returns the body of its one reply; with
// ack (a request that has no reply), it returns nil once the kernel
// acknowledged it.
//
// No deadline (2026-12, kernel 6.18): the kernel answers an ethtool request
// inside the sendmsg that carries it, so the reply is queued before a
// receive starts; what can take long is waiting for the RTNL lock in that
// sendmsg, which no socket deadline interrupts, as with the ioctl.
func (c *Conn) execute(cmd uint8, body []byte, ack bool) ([]byte, error) {
	flags := netlink.Request
	if ack {
		flags |= netlink.Acknowledge
	}
	msgs, err := c.c.Execute(genetlink.Message{
		Header: genetlink.Header{Command: cmd, Version: unix.ETHTOOL_GENL_VERSION},
		Data:   body,
	}, c.family, flags)
	switch {
	case err != nil:
		return nil, err
	case ack:
		return nil, nil
	case len(msgs) != 1:
		return nil, fmt.Errorf("%d replies to one request", len(msgs))
	}
	return msgs[0].Data, nil
}

// Features returns every feature the kernel names for the device ifname
// (ETHTOOL_MSG_FEATURES_GET, compact bitsets; the names come from a table
// read once per device, see the package doc). A missing device is an error
// matching os.ErrNotExist.
func (c *Conn) Features(ifname string) (map[string]State, error) {
	r, err := c.features(ifname)
	if err != nil {
		return nil, err
	}
	names, err := c.featureNames(ifname, r.ifindex)
	if err != nil {
		return nil, err
	}
	if len(names) != r.size {
		// Both are NETDEV_FEATURE_COUNT of the running kernel.
		c.forget(ifname)
		return nil, &Error{Op: "reading features", Device: ifname,
			err: fmt.Errorf("%d feature names for %d feature bits", len(names), r.size)}
	}
	return featureMap(r, names), nil
}

// featureMap names the bits of r; names has one entry per bit.
func featureMap(r featuresReply, names []string) map[string]State {
	out := make(map[string]State, len(names))
	for i, n := range names {
		if n == "" { // a bit the kernel leaves unnamed (unused)
			continue
		}
		out[n] = State{Available: r.hw.has(i), Requested: r.wanted.has(i), Active: r.active.has(i), NeverChange: r.nochange.has(i)}
	}
	return out
}

// features reads ifname's four feature bitsets.
func (c *Conn) features(ifname string) (featuresReply, error) {
	fail := func(err error) (featuresReply, error) {
		e := &Error{Op: "reading features", Device: ifname, err: err}
		if errors.Is(e, os.ErrNotExist) {
			c.forget(ifname)
		}
		return featuresReply{}, e
	}
	body, err := encodeFeaturesGet(ifname, unix.ETHTOOL_FLAG_COMPACT_BITSETS)
	if err != nil {
		return fail(err)
	}
	reply, err := c.execute(unix.ETHTOOL_MSG_FEATURES_GET, body, false)
	if err != nil {
		return fail(err)
	}
	r, err := decodeFeaturesReply(reply)
	if err != nil {
		return fail(err)
	}
	return r, nil
}

// featureNames returns the feature-name table of the device ifname, which
// has index ifindex now: the cached one while the name belongs to the same
// device, else one read with ETHTOOL_MSG_STRSET_GET.
func (c *Conn) featureNames(ifname string, ifindex uint32) ([]string, error) {
	c.mu.Lock()
	cached, ok := c.names[ifname]
	c.mu.Unlock()
	if ok && cached.ifindex == ifindex {
		return cached.names, nil
	}
	fail := func(err error) ([]string, error) {
		return nil, &Error{Op: "reading feature names", Device: ifname, err: err}
	}
	body, err := encodeStrsetGet(ifindex)
	if err != nil {
		return fail(err)
	}
	reply, err := c.execute(unix.ETHTOOL_MSG_STRSET_GET, body, false)
	if err != nil {
		return fail(err)
	}
	names, err := decodeStrset(reply)
	if err != nil {
		return fail(err)
	}
	c.mu.Lock()
	c.names[ifname] = featureNames{ifindex: ifindex, names: names}
	c.mu.Unlock()
	return names, nil
}

// forget drops the name table of a device that is gone or was misread.
func (c *Conn) forget(ifname string) {
	c.mu.Lock()
	delete(c.names, ifname)
	c.mu.Unlock()
}

// Change asks the kernel to turn each named feature of the device ifname
// on (true) or off (false), and leaves every other feature alone
// (ETHTOOL_MSG_FEATURES_SET with the names alone: no name table is read).
// The kernel may accept a change and not apply it (a feature the driver
// does not let change, one that depends on another): read back. A name the
// kernel does not know is an error matching ErrUnknownFeature that names
// it; a missing device matches os.ErrNotExist.
func (c *Conn) Change(ifname string, change map[string]bool) error {
	if len(change) == 0 {
		return nil
	}
	body, err := encodeFeaturesSet(ifname, change)
	if err == nil {
		_, err = c.execute(unix.ETHTOOL_MSG_FEATURES_SET, body, true)
	}
	if err == nil {
		return nil
	}
	e := &Error{Op: "changing features", Device: ifname, err: err}
	if errors.Is(e, errors.ErrUnsupported) {
		// The kernel says "bit name not found" (EOPNOTSUPP). Say which.
		if unknown := c.unknownNames(ifname, change); len(unknown) > 0 {
			e.unknown = unknown
		}
	}
	return e
}

// unknownNames returns the names in change that ifname's feature table
// lacks; nil if the table cannot be read.
func (c *Conn) unknownNames(ifname string, change map[string]bool) []string {
	r, err := c.features(ifname)
	if err != nil {
		return nil
	}
	names, err := c.featureNames(ifname, r.ifindex)
	if err != nil {
		return nil
	}
	known := make(map[string]bool, len(names))
	for _, n := range names {
		known[n] = n != ""
	}
	var unknown []string
	for n := range change {
		if !known[n] {
			unknown = append(unknown, n)
		}
	}
	return unknown
}
