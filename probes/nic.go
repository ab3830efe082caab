package probes

import (
	"errors"
	"fmt"
	"os"
	"path"
	"runtime"
	"slices"
	"strings"

	"github.com/safchain/ethtool"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// Feature is one NIC feature as `ethtool -k` shows it.
type Feature struct {
	Name  string `json:"name"` // kernel name: tx-checksum-ip-generic, rx-gro, ...
	On    bool   `json:"on"`
	Fixed bool   `json:"fixed,omitempty"` // the driver does not let it change
}

// String is the feature as ethtool -k prints it: "name: on", "name: off [fixed]".
func (f Feature) String() string {
	s := f.Name + ": " + f.State()
	return s
}

// State is "on", "off", "on [fixed]" or "off [fixed]".
func (f Feature) State() string {
	s := "off"
	if f.On {
		s = "on"
	}
	if f.Fixed {
		s += " [fixed]"
	}
	return s
}

// FeatureReader reads the features of links in one network namespace.
// Features returns every feature the link's driver lists, sorted by name; a
// missing link is an error matching os.ErrNotExist.
type FeatureReader interface {
	Features(link string) ([]Feature, error)
}

// Ethtool is the FeatureReader backed by the SIOCETHTOOL ioctl
// (github.com/safchain/ethtool). It only reads.
//
// Its socket is bound to the network namespace it was created in, whatever
// namespace the calling thread is in later: create it inside the namespace
// to observe. It is safe for concurrent use.
type Ethtool struct {
	e *ethtool.Ethtool
}

var _ FeatureReader = (*Ethtool)(nil)

// NewEthtool returns an Ethtool bound to the calling thread's network
// namespace (for a process that never leaves it: the process's).
func NewEthtool() (*Ethtool, error) {
	e, err := ethtool.NewEthtool()
	if err != nil {
		return nil, fmt.Errorf("opening ethtool socket: %w", err)
	}
	return &Ethtool{e: e}, nil
}

// NewEthtoolAt returns an Ethtool bound to ns. The calling goroutine's
// locked thread enters ns only to create the socket; if it cannot switch
// back, it stays locked and the runtime discards it.
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

// Features implements FeatureReader.
func (e *Ethtool) Features(link string) ([]Feature, error) {
	fs, err := e.e.FeaturesWithState(link)
	if err != nil {
		if errors.Is(err, unix.ENODEV) {
			return nil, fmt.Errorf("link %s not found: %w", link, os.ErrNotExist)
		}
		return nil, fmt.Errorf("reading features of %s: %w", link, err)
	}
	out := make([]Feature, 0, len(fs))
	for n, s := range fs {
		// Available is the kernel's hw_features: what the driver lets change.
		out = append(out, Feature{Name: n, On: s.Active, Fixed: !s.Available || s.NeverChanged})
	}
	slices.SortFunc(out, func(a, b Feature) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// TxChecksumPattern matches the kernel's TX checksum feature names.
const TxChecksumPattern = "tx-checksum-*"

// featureGroups is ethtool(8)'s off_flag_def table (ethtool 6.1, checked
// 2026-11): -K group names and the kernel features they stand for. netfix
// keeps the same table (probes and netfix never import each other); a test
// in agent checks they agree.
var featureGroups = [][3]string{
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

// FeatureGroups returns the ethtool(8) -K group names (short and long) and
// the kernel feature glob each stands for.
func FeatureGroups() map[string]string {
	m := make(map[string]string, 2*len(featureGroups))
	for _, g := range featureGroups {
		m[g[0]] = g[2]
		m[g[1]] = g[2]
	}
	return m
}

// ExpandFeatureName returns the kernel names name stands for among fs:
// name itself if present, or the members of an ethtool(8) group name. An
// unknown name, or a group without members here, is an error listing the
// names fs has.
func ExpandFeatureName(name string, fs []Feature) ([]string, error) {
	var all []string
	for _, f := range fs {
		if f.Name == name {
			return []string{name}, nil
		}
		all = append(all, f.Name)
	}
	pattern, ok := FeatureGroups()[name]
	if !ok {
		return nil, fmt.Errorf("unknown feature %q: not a feature of the link nor an ethtool -K group name; the link has: %s",
			name, strings.Join(all, ", "))
	}
	var out []string
	for _, n := range all {
		if ok, _ := path.Match(pattern, n); ok {
			out = append(out, n)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("unknown feature %q: the link has no %s feature; it has: %s",
			name, pattern, strings.Join(all, ", "))
	}
	return out, nil
}

// IsTxChecksum reports whether name is a TX checksum feature.
func IsTxChecksum(name string) bool {
	ok, _ := path.Match(TxChecksumPattern, name)
	return ok
}
