// Package nicfeat is the one ethtool seam of edgeheal: a SIOCETHTOOL socket
// bound to a network namespace (github.com/safchain/ethtool underneath),
// and the ethtool(8) -K group names operators copy into configs, expanded
// to the kernel's feature names.
//
// probes (which only reads) and netfix (which changes) both build on it, so
// that they share one adapter without importing each other. It maps errno
// values at the boundary: a missing link matches os.ErrNotExist.
package nicfeat

import (
	"errors"
	"fmt"
	"os"
	"path"
	"runtime"
	"sort"
	"strings"

	"github.com/safchain/ethtool"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// TxChecksumPattern matches the kernel's TX checksum feature names
// (tx-checksum-ipv4, tx-checksum-ip-generic, tx-checksum-ipv6,
// tx-checksum-sctp, tx-checksum-fcoe-crc).
const TxChecksumPattern = "tx-checksum-*"

// IsTxChecksum reports whether name is a TX checksum feature.
func IsTxChecksum(name string) bool {
	ok, _ := path.Match(TxChecksumPattern, name)
	return ok
}

// State is one feature as the kernel reports it (ETHTOOL_GFEATURES).
type State struct {
	Active     bool // on now
	Requested  bool // asked for (may differ from Active: another feature forces it)
	Changeable bool // the driver lets it change; ethtool(8) prints "[fixed]" otherwise
}

// Socket reads and changes link features. Its socket is bound to the
// network namespace it was created in: every call acts on the links of that
// namespace, whatever namespace the calling thread is in later. It is safe
// for concurrent use.
type Socket struct {
	e *ethtool.Ethtool
}

// Open returns a Socket bound to the calling thread's network namespace
// (for a process that never leaves it: the process's).
func Open() (*Socket, error) {
	e, err := ethtool.NewEthtool()
	if err != nil {
		return nil, fmt.Errorf("opening ethtool socket: %w", err)
	}
	return &Socket{e: e}, nil
}

// OpenAt returns a Socket bound to ns. The calling goroutine's locked OS
// thread enters ns only to create the socket and switches back; if it
// cannot switch back, the thread stays locked, so the runtime discards it
// rather than run other goroutines in ns.
func OpenAt(ns netns.NsHandle) (*Socket, error) {
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
	s, err := Open()
	if rerr := netns.Set(orig); rerr != nil {
		if s != nil {
			s.Close()
		}
		return nil, fmt.Errorf("returning to the original network namespace: %w", rerr)
	}
	runtime.UnlockOSThread()
	return s, err
}

// Close releases the socket.
func (s *Socket) Close() error {
	s.e.Close()
	return nil
}

// Features returns every feature the link's driver lists. A missing link
// is an error matching os.ErrNotExist.
func (s *Socket) Features(link string) (map[string]State, error) {
	fs, err := s.e.FeaturesWithState(link)
	if err != nil {
		return nil, linkErr(link, err)
	}
	out := make(map[string]State, len(fs))
	for n, st := range fs {
		// The kernel's hw_features (Available) are the ones a driver lets
		// change; NETIF_F_NEVER_CHANGE ones never do.
		out[n] = State{Active: st.Active, Requested: st.Requested, Changeable: st.Available && !st.NeverChanged}
	}
	return out, nil
}

// Change asks the kernel to set features (kernel names only). It can return
// nil and not apply a change (a fixed feature, a dependency): read back.
// A missing link is an error matching os.ErrNotExist.
func (s *Socket) Change(link string, features map[string]bool) error {
	if err := s.e.Change(link, features); err != nil {
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

// groups is ethtool(8)'s off_flag_def table (ethtool 6.1, checked 2026-11):
// the -K names operators copy from scripts. The kernel's SFEATURES ioctl
// only knows kernel names, so they are expanded here.
var groups = []struct{ short, long, pattern string }{
	{"rx", "rx-checksumming", "rx-checksum"},
	{"tx", "tx-checksumming", TxChecksumPattern},
	{"sg", "scatter-gather", "tx-scatter-gather*"},
	{"tso", "tcp-segmentation-offload", "tx-tcp*-segmentation"},
	{"ufo", "udp-fragmentation-offload", "tx-udp-fragmentation"},
	{"gso", "generic-segmentation-offload", "tx-generic-segmentation"},
	{"gro", "generic-receive-offload", "rx-gro"},
	{"lro", "large-receive-offload", "rx-lro"},
	{"rxvlan", "rx-vlan-offload", "rx-vlan-hw-parse"},
	{"txvlan", "tx-vlan-offload", "tx-vlan-hw-insert"},
	{"ntuple", "ntuple-filters", "rx-ntuple-filter"},
	{"rxhash", "receive-hashing", "rx-hashing"},
}

// Groups returns the ethtool(8) group names (short and long) and the kernel
// feature glob each stands for.
func Groups() map[string]string {
	m := make(map[string]string, 2*len(groups))
	for _, g := range groups {
		m[g.short] = g.pattern
		m[g.long] = g.pattern
	}
	return m
}

// ErrUnknownFeature is matched by Expand's error for a name that is neither
// a feature of the link nor a group with members on it.
var ErrUnknownFeature = errors.New("unknown feature")

// Expand returns the kernel feature names name stands for on a link that
// has the features have: name itself if the link has it, or the members of
// an ethtool(8) group name, sorted. Otherwise an error matching
// ErrUnknownFeature that lists the names the link has.
func Expand(name string, have []string) ([]string, error) {
	all := append([]string(nil), have...)
	sort.Strings(all)
	for _, n := range all {
		if n == name {
			return []string{name}, nil
		}
	}
	pattern, ok := Groups()[name]
	if !ok {
		return nil, fmt.Errorf("%w %q: not a feature of the link nor an ethtool -K group name; the link has: %s",
			ErrUnknownFeature, name, strings.Join(all, ", "))
	}
	var out []string
	for _, n := range all {
		if ok, _ := path.Match(pattern, n); ok {
			out = append(out, n)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%w %q: the link has no %s feature; it has: %s",
			ErrUnknownFeature, name, pattern, strings.Join(all, ", "))
	}
	return out, nil
}
