package netfix

import (
	"errors"
	"fmt"
	"path"
	"sort"
	"strings"
)

// FeatureState is one NIC feature as the kernel reports it
// (ETHTOOL_GFEATURES).
type FeatureState struct {
	Active     bool // on now
	Requested  bool // asked for (may differ from Active: another feature forces it)
	Changeable bool // the driver lets it change; ethtool(8) prints "[fixed]" otherwise
}

// TxChecksumPattern matches the kernel's TX checksum features
// (tx-checksum-ipv4, tx-checksum-ip-generic, tx-checksum-ipv6,
// tx-checksum-sctp, tx-checksum-fcoe-crc), whichever a driver lists. It is
// what ethtool(8) means by "tx" and "tx-checksumming".
const TxChecksumPattern = "tx-checksum-*"

// IsTxChecksum reports whether name is a TX checksum feature.
func IsTxChecksum(name string) bool {
	ok, _ := path.Match(TxChecksumPattern, name)
	return ok
}

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

// FeatureGroups returns the ethtool(8) group names this package expands,
// each mapped to the kernel feature glob it stands for (both the short
// and the long name are keys).
func FeatureGroups() map[string]string {
	m := make(map[string]string, 2*len(groups))
	for _, g := range groups {
		m[g.short] = g.pattern
		m[g.long] = g.pattern
	}
	return m
}

// ErrUnknownFeature is matched (errors.Is) by the error for a configured
// feature name that is neither a kernel feature of the link nor an ethtool(8)
// group name with members on it, or whose value is not "on" or "off". It is
// a configuration error: the message lists the names the link has.
var ErrUnknownFeature = errors.New("unknown feature")

// ExpandFeature returns the kernel feature names that name stands for on a
// link with the features have: name itself if the link has it, or the
// members of an ethtool(8) group name (tx, tx-checksumming, sg, tso, gro,
// ...), sorted. An unknown name, or a group with no member on this link,
// is an error matching ErrUnknownFeature that lists the names the link has.
func ExpandFeature(name string, have map[string]FeatureState) ([]string, error) {
	all := sortedKeys(have)
	if _, ok := have[name]; ok {
		return []string{name}, nil
	}
	pattern, ok := FeatureGroups()[name]
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
	sort.Strings(out)
	return out, nil
}
