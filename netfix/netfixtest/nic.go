package netfixtest

import (
	"cmp"
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"
	"sync"

	"github.com/edgeheal/edgeheal/netfix"
)

// NIC is a fake netfix.NIC: links with features, in memory. It logs every
// call (see Calls) and is safe for concurrent use. A missing link gives an
// error matching os.ErrNotExist, as the real adapter does.
type NIC struct {
	mu    sync.Mutex
	links map[string]map[string]netfix.FeatureState
	// ignore holds links whose Change succeeds without applying anything:
	// the driver that accepts the ioctl and does nothing.
	ignore map[string]bool
	errs   map[string]error // link -> error returned by every call
	chErrs map[string]error // link -> error returned by Change only
	calls  []string
	// OnChange, if set, is called (without the lock held) after a Change
	// was applied, with the link and the requested features.
	OnChange func(link string, features map[string]bool)
}

var _ netfix.NIC = (*NIC)(nil)

// NewNIC returns a fake with no links.
func NewNIC() *NIC {
	return &NIC{
		links:  map[string]map[string]netfix.FeatureState{},
		ignore: map[string]bool{},
		errs:   map[string]error{},
		chErrs: map[string]error{},
	}
}

// Veth returns the TX-checksum-relevant part of a fresh veth's features
// (kernel 6.18, `ethtool -k` of a new veth, 2026-11): ip-generic and sctp
// on and changeable, ipv4/ipv6/fcoe-crc off and fixed; plus the members of
// the sg, tso, gso and gro groups and a fixed rx-lro.
func Veth() map[string]netfix.FeatureState {
	on := netfix.FeatureState{Active: true, Requested: true, Changeable: true}
	off := netfix.FeatureState{Changeable: true}
	fixedOff := netfix.FeatureState{}
	return map[string]netfix.FeatureState{
		"rx-checksum":                on,
		"tx-checksum-ipv4":           fixedOff,
		"tx-checksum-ip-generic":     on,
		"tx-checksum-ipv6":           fixedOff,
		"tx-checksum-fcoe-crc":       fixedOff,
		"tx-checksum-sctp":           on,
		"tx-scatter-gather":          on,
		"tx-scatter-gather-fraglist": on,
		"tx-tcp-segmentation":        on,
		"tx-tcp6-segmentation":       on,
		"tx-tcp-ecn-segmentation":    on,
		"tx-generic-segmentation":    on,
		"rx-gro":                     off,
		"rx-lro":                     fixedOff,
		"highdma":                    on,
	}
}

// SetLink adds or replaces a link with a copy of features.
func (n *NIC) SetLink(link string, features map[string]netfix.FeatureState) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.links[link] = maps.Clone(features)
}

// SetFeature sets one feature's active and requested state, as `ethtool -K`
// by someone else or a driver reset would. It panics on a missing link.
func (n *NIC) SetFeature(link, feature string, on bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	fs, ok := n.links[link]
	if !ok {
		panic("netfixtest: no link " + link)
	}
	st := fs[feature]
	st.Active, st.Requested = on, on
	fs[feature] = st
}

// RemoveLink deletes a link.
func (n *NIC) RemoveLink(link string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	delete(n.links, link)
}

// IgnoreChanges makes Change on link return nil without applying anything.
func (n *NIC) IgnoreChanges(link string, ignore bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.ignore[link] = ignore
}

// FailWith makes every call on link return err (nil clears it).
func (n *NIC) FailWith(link string, err error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if err == nil {
		delete(n.errs, link)
		return
	}
	n.errs[link] = err
}

// FailChangeWith makes Change on link return err (nil clears it), as a
// driver that refuses the request (EOPNOTSUPP, EPERM) does; reads still work.
func (n *NIC) FailChangeWith(link string, err error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if err == nil {
		delete(n.chErrs, link)
		return
	}
	n.chErrs[link] = err
}

// Features returns a copy of link's features (nil if it does not exist), without logging a call.
func (n *NIC) Features(link string) map[string]netfix.FeatureState {
	n.mu.Lock()
	defer n.mu.Unlock()
	return maps.Clone(n.links[link])
}

// Calls returns the calls made so far, oldest first, e.g.
// "FeaturesWithState eth0", "Change eth0 rx-gro=on tx-checksum-ip-generic=off".
func (n *NIC) Calls() []string {
	n.mu.Lock()
	defer n.mu.Unlock()
	return slices.Clone(n.calls)
}

// ResetCalls forgets the calls logged so far.
func (n *NIC) ResetCalls() {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.calls = nil
}

// FeaturesWithState implements netfix.NIC.
func (n *NIC) FeaturesWithState(link string) (map[string]netfix.FeatureState, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.calls = append(n.calls, "FeaturesWithState "+link)
	if err := n.errs[link]; err != nil {
		return nil, err
	}
	fs, ok := n.links[link]
	if !ok {
		return nil, fmt.Errorf("link %s: %w", link, os.ErrNotExist)
	}
	return maps.Clone(fs), nil
}

// Change implements netfix.NIC like the kernel's SFEATURES: an unknown name
// is an error; a fixed feature is silently left as it is; with
// IgnoreChanges nothing is applied and nil is returned.
func (n *NIC) Change(link string, features map[string]bool) error {
	n.mu.Lock()
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(features)) {
		parts = append(parts, fmt.Sprintf("%s=%s", k, map[bool]string{true: "on", false: "off"}[features[k]]))
	}
	n.calls = append(n.calls, "Change "+link+" "+strings.Join(parts, " "))
	if err := cmp.Or(n.errs[link], n.chErrs[link]); err != nil {
		n.mu.Unlock()
		return err
	}
	fs, ok := n.links[link]
	if !ok {
		n.mu.Unlock()
		return fmt.Errorf("link %s: %w", link, os.ErrNotExist)
	}
	for k := range features {
		if _, ok := fs[k]; !ok {
			n.mu.Unlock()
			return fmt.Errorf("unsupported feature %q", k)
		}
	}
	if !n.ignore[link] {
		for k, on := range features {
			if st := fs[k]; st.Changeable {
				st.Active, st.Requested = on, on
				fs[k] = st
			}
		}
	}
	hook := n.OnChange
	n.mu.Unlock()
	if hook != nil {
		hook(link, maps.Clone(features))
	}
	return nil
}
