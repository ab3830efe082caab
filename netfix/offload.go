package netfix

import (
	"context"
	"errors"
	"fmt"
	"path"
	"slices"
	"sort"
	"strings"

	"github.com/edgeheal/edgeheal/internal/nicfeat"
)

// ActionOffloadOff is the Result.Action of EnsureTxChecksumOff and EnsureFeatures.
const ActionOffloadOff = "offload-off"

// TxChecksumPattern matches the kernel's TX checksum features
// (tx-checksum-ipv4, tx-checksum-ip-generic, tx-checksum-ipv6,
// tx-checksum-sctp, tx-checksum-fcoe-crc), whichever a driver lists. It is
// what ethtool(8) means by "tx" and "tx-checksumming".
const TxChecksumPattern = nicfeat.TxChecksumPattern

// FeatureState is one NIC feature as the kernel reports it (ETHTOOL_GFEATURES):
// Active, Requested, and Changeable (false: "[fixed]").
type FeatureState = nicfeat.State

// NIC reads and changes the features of links in one network namespace.
// Implementations return an error matching os.ErrNotExist when the link does
// not exist. Change may return nil without applying anything (a fixed
// feature, a driver that ignores the request): callers read back.
type NIC interface {
	// FeaturesWithState returns every feature the link's driver lists, by
	// kernel name (tx-checksum-ip-generic, rx-gro, ...).
	FeaturesWithState(link string) (map[string]FeatureState, error)
	// Change asks for each named kernel feature to be on (true) or off.
	Change(link string, features map[string]bool) error
}

// ErrUnknownFeature is matched (errors.Is) by the error for a configured
// feature name that is neither a kernel feature of the link nor an ethtool(8)
// group name, or whose value is not "on" or "off". It is a configuration
// error: the message lists the names the link has.
var ErrUnknownFeature = nicfeat.ErrUnknownFeature

// ErrNotApplied is matched by the error returned when the kernel accepted a
// feature change but reading the features back shows it did not take effect.
var ErrNotApplied = errors.New("change accepted but not applied")

// NotAppliedError is the error for features the kernel accepted a change of
// but that read back unchanged. It matches ErrNotApplied.
type NotAppliedError struct {
	Link     string
	Features []string // kernel names, sorted
	states   []string
}

func (e *NotAppliedError) Error() string {
	return fmt.Sprintf("changing features of %s: %v: %s", e.Link, ErrNotApplied, strings.Join(e.states, ", "))
}

// Is makes the error match ErrNotApplied.
func (e *NotAppliedError) Is(target error) bool { return target == ErrNotApplied }

// ErrConflict is matched by the error for configured features that ask for
// the same kernel feature to be both on and off, or for a TX checksum
// feature to be on while TX checksum is guarded off.
var ErrConflict = errors.New("conflicting feature settings")

// FeatureGroups returns the ethtool(8) group names this package expands,
// each mapped to the kernel feature glob it stands for (both the short
// and the long name are keys).
func FeatureGroups() map[string]string { return nicfeat.Groups() }

// ExpandFeature returns the kernel feature names that name stands for on a
// link with the features have: name itself if the link has it, or the
// members of an ethtool(8) group name (tx, tx-checksumming, sg, tso, gro,
// ...). An unknown name, or a group with no member on this link, is an
// error matching ErrUnknownFeature that lists the names the link has.
func ExpandFeature(name string, have map[string]FeatureState) ([]string, error) {
	return nicfeat.Expand(name, sortedNames(have))
}

// WantedFeatures turns the guard's configuration into the kernel feature
// states wanted on a link with the features have: every tx-checksum-* the
// driver lists off when txOff, plus extra (kernel or ethtool(8) group names,
// each "on" or "off"). It returns what it could resolve together with an
// error joining every problem (ErrUnknownFeature, ErrConflict), so that a
// typo in an extra feature never stops TX checksum offload being turned off.
func WantedFeatures(have map[string]FeatureState, txOff bool, extra map[string]string) (map[string]bool, error) {
	want := map[string]bool{}
	if txOff {
		for n := range have {
			if ok, _ := path.Match(TxChecksumPattern, n); ok {
				want[n] = false
			}
		}
	}
	var errs []error
	from := map[string]string{} // kernel name -> configured name that set it
	keys := make([]string, 0, len(extra))
	for k := range extra {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		var on bool
		switch v := strings.ToLower(strings.TrimSpace(extra[k])); v {
		case "on":
			on = true
		case "off":
		default:
			errs = append(errs, fmt.Errorf("%w %q: value %q is not on or off", ErrUnknownFeature, k, extra[k]))
			continue
		}
		names, err := ExpandFeature(k, have)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		for _, n := range names {
			if txOff && on && isTxChecksum(n) {
				errs = append(errs, fmt.Errorf("%w: %s: on (from %q) but tx_checksum is off", ErrConflict, n, k))
				continue
			}
			if prev, ok := from[n]; ok && want[n] != on {
				errs = append(errs, fmt.Errorf("%w: %s is %s from %q and %s from %q",
					ErrConflict, n, onOff(want[n]), prev, onOff(on), k))
				continue
			}
			want[n] = on
			from[n] = k
		}
	}
	return want, errors.Join(errs...)
}

// EnsureTxChecksumOff turns off every changeable TX checksum feature of link
// that its driver lists (tx-checksum-ipv4, -ip-generic, -ipv6, -sctp,
// -fcoe-crc) and applies extra (kernel or ethtool(8) group names, "on" or
// "off"), then reads the features back, because the ioctl can succeed
// without applying.
//
// It is idempotent: with nothing to change it calls no Change and returns
// Changed false. With dryRun it changes nothing and lists in Changes what it
// would change (Result.DryRun set when something would). Features that need
// a change but are fixed by the driver are listed in Fixed ("name: on
// [fixed]") and are not errors. Each Changes entry reads "name: old -> new".
//
// When Change fails, Changes lists what was attempted and Changed is false;
// when the read-back fails, Changed is true and Changes lists what was
// asked for. Otherwise Changes lists only what the read-back confirmed.
//
// Errors: a missing link matches os.ErrNotExist (from the NIC); a feature
// still wrong after the change matches ErrNotApplied and names it; a bad
// extra feature matches ErrUnknownFeature or ErrConflict, and is returned
// only after everything else was applied.
func EnsureTxChecksumOff(ctx context.Context, nic NIC, link string, extra map[string]string, dryRun bool) (Result, error) {
	return ensure(ctx, nic, link, true, extra, dryRun)
}

// EnsureFeatures is EnsureTxChecksumOff without the TX checksum part: it
// applies only want (the guard's tx_checksum: leave with extra features).
// Its contract is otherwise the same.
func EnsureFeatures(ctx context.Context, nic NIC, link string, want map[string]string, dryRun bool) (Result, error) {
	return ensure(ctx, nic, link, false, want, dryRun)
}

func ensure(ctx context.Context, nic NIC, link string, txOff bool, extra map[string]string, dryRun bool) (Result, error) {
	r := Result{Action: ActionOffloadOff, Target: link}
	if err := ctx.Err(); err != nil {
		return r, err
	}
	before, err := nic.FeaturesWithState(link)
	if err != nil {
		return r, fmt.Errorf("reading features of %s: %w", link, err)
	}
	want, configErr := WantedFeatures(before, txOff, extra)
	if configErr != nil {
		configErr = fmt.Errorf("features configured for %s: %w", link, configErr)
	}

	change := map[string]bool{}
	for _, n := range sortedKeys(want) {
		st := before[n]
		if st.Active == want[n] {
			continue
		}
		if !st.Changeable {
			r.Fixed = append(r.Fixed, fmt.Sprintf("%s: %s [fixed]", n, onOff(st.Active)))
			continue
		}
		change[n] = want[n]
		r.Changes = append(r.Changes, fmt.Sprintf("%s: %s -> %s", n, onOff(st.Active), onOff(want[n])))
	}
	if len(change) == 0 {
		return r, configErr
	}
	if dryRun {
		r.DryRun = true
		return r, configErr
	}
	if err := ctx.Err(); err != nil {
		r.Changes = nil
		return r, errors.Join(err, configErr)
	}
	if err := nic.Change(link, change); err != nil {
		return r, errors.Join(fmt.Errorf("changing features of %s: %w", link, err), configErr)
	}
	// The SFEATURES ioctl can return success and leave a feature as it was
	// (LAB-NOTES: a change to a fixed feature returns nil), so only the
	// read-back says what happened.
	after, err := nic.FeaturesWithState(link)
	if err != nil {
		r.Changed = true // the change was accepted; whether it applied is unknown
		return r, errors.Join(fmt.Errorf("reading back features of %s: %w", link, err), configErr)
	}
	var applied, stuck, stuckStates []string
	for _, n := range sortedKeys(change) {
		if after[n].Active == change[n] {
			applied = append(applied, fmt.Sprintf("%s: %s -> %s", n, onOff(!change[n]), onOff(change[n])))
			continue
		}
		stuck = append(stuck, n)
		stuckStates = append(stuckStates, fmt.Sprintf("%s still %s", n, onOff(after[n].Active)))
	}
	r.Changes = applied
	r.Changed = len(applied) > 0
	if len(stuck) > 0 {
		return r, errors.Join(&NotAppliedError{Link: link, Features: stuck, states: stuckStates}, configErr)
	}
	return r, configErr
}

// FeatureOfEntry returns the feature name of a Result.Changes or Result.Fixed
// entry ("tx-checksum-ip-generic: on -> off" → "tx-checksum-ip-generic").
func FeatureOfEntry(entry string) string {
	name, _, _ := strings.Cut(entry, ":")
	return name
}

func isTxChecksum(name string) bool { return nicfeat.IsTxChecksum(name) }

func onOff(on bool) string {
	if on {
		return "on"
	}
	return "off"
}

func sortedNames(m map[string]FeatureState) []string {
	return sortedKeys(m)
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
