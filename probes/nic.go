package probes

import (
	"fmt"
	"slices"
	"strings"

	"github.com/vishvananda/netns"

	"github.com/edgeheal/edgeheal/internal/nicfeat"
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
// (internal/nicfeat over github.com/safchain/ethtool). It only reads.
//
// Its socket is bound to the network namespace it was created in, whatever
// namespace the calling thread is in later: create it inside the namespace
// to observe. It is safe for concurrent use.
type Ethtool struct {
	s *nicfeat.Socket
}

var _ FeatureReader = (*Ethtool)(nil)

// NewEthtool returns an Ethtool bound to the calling thread's network
// namespace (for a process that never leaves it: the process's).
func NewEthtool() (*Ethtool, error) {
	s, err := nicfeat.Open()
	if err != nil {
		return nil, err
	}
	return &Ethtool{s: s}, nil
}

// NewEthtoolAt returns an Ethtool bound to ns (see nicfeat.OpenAt).
func NewEthtoolAt(ns netns.NsHandle) (*Ethtool, error) {
	s, err := nicfeat.OpenAt(ns)
	if err != nil {
		return nil, err
	}
	return &Ethtool{s: s}, nil
}

// Close releases the socket.
func (e *Ethtool) Close() error { return e.s.Close() }

// Features implements FeatureReader.
func (e *Ethtool) Features(link string) ([]Feature, error) {
	fs, err := e.s.Features(link)
	if err != nil {
		return nil, fmt.Errorf("reading features of %s: %w", link, err)
	}
	out := make([]Feature, 0, len(fs))
	for n, st := range fs {
		out = append(out, Feature{Name: n, On: st.Active, Fixed: !st.Changeable})
	}
	slices.SortFunc(out, func(a, b Feature) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// TxChecksumPattern matches the kernel's TX checksum feature names.
const TxChecksumPattern = nicfeat.TxChecksumPattern

// FeatureGroups returns the ethtool(8) -K group names (short and long) and
// the kernel feature glob each stands for.
func FeatureGroups() map[string]string { return nicfeat.Groups() }

// ExpandFeatureName returns the kernel names name stands for among fs:
// name itself if present, or the members of an ethtool(8) group name. An
// unknown name, or a group without members here, is an error listing the
// names fs has.
func ExpandFeatureName(name string, fs []Feature) ([]string, error) {
	names := make([]string, len(fs))
	for i, f := range fs {
		names[i] = f.Name
	}
	return nicfeat.Expand(name, names)
}

// IsTxChecksum reports whether name is a TX checksum feature.
func IsTxChecksum(name string) bool { return nicfeat.IsTxChecksum(name) }
