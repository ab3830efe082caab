package netfix

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
)

// ActionOffloadOff is the Result.Action of EnsureOffload.
const ActionOffloadOff = "offload-off"

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

// OffloadWant is the desired state of one link's features: every TX
// checksum feature its driver lists off (TxChecksumOff), and Features
// (kernel or ethtool(8) group names, each "on" or "off").
type OffloadWant struct {
	TxChecksumOff bool
	Features      map[string]string
}

// GuardedFeature is one feature the want covers on a link: how it is and
// how it is wanted.
type GuardedFeature struct {
	Name  string
	State FeatureState
	Want  bool // on
}

// OK reports whether the feature is as wanted.
func (f GuardedFeature) OK() bool { return f.State.Active == f.Want }

// FeaturePlan is what EnsureOffload does on a link with the features it
// read: the one computation of the offload's desired state, which both the
// daemon and `edgeheal check` use.
type FeaturePlan struct {
	Guarded []GuardedFeature // every feature the want covers here, by name
	Change  map[string]bool  // the changeable features that are wrong, and their wanted state
	Changes []string         // the same as "name: old -> new", sorted
	Fixed   []string         // wrong features the driver does not let change: "name: on [fixed]"
	// Err joins the configuration problems (ErrUnknownFeature, ErrConflict).
	// What could be resolved is still planned: a typo in an extra feature
	// never stops TX checksum offload being turned off.
	Err error
}

// PlanOffload computes the plan for a link with the features have. It is
// pure.
func PlanOffload(have map[string]FeatureState, want OffloadWant) FeaturePlan {
	wanted := map[string]bool{}
	if want.TxChecksumOff {
		for n := range have {
			if IsTxChecksum(n) {
				wanted[n] = false
			}
		}
	}
	var errs []error
	from := map[string]string{} // kernel name -> configured name that set it
	for _, k := range sortedKeys(want.Features) {
		var on bool
		switch v := strings.ToLower(strings.TrimSpace(want.Features[k])); v {
		case "on":
			on = true
		case "off":
		default:
			errs = append(errs, fmt.Errorf("%w %q: value %q is not on or off", ErrUnknownFeature, k, want.Features[k]))
			continue
		}
		names, err := ExpandFeature(k, have)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		for _, n := range names {
			if want.TxChecksumOff && on && IsTxChecksum(n) {
				errs = append(errs, fmt.Errorf("%w: %s: on (from %q) but tx_checksum is off", ErrConflict, n, k))
				continue
			}
			if prev, ok := from[n]; ok && wanted[n] != on {
				errs = append(errs, fmt.Errorf("%w: %s is %s from %q and %s from %q",
					ErrConflict, n, onOff(wanted[n]), prev, onOff(on), k))
				continue
			}
			wanted[n] = on
			from[n] = k
		}
	}
	p := FeaturePlan{Change: map[string]bool{}, Err: errors.Join(errs...)}
	for _, n := range sortedKeys(wanted) {
		st := have[n]
		p.Guarded = append(p.Guarded, GuardedFeature{Name: n, State: st, Want: wanted[n]})
		switch {
		case st.Active == wanted[n]:
		case !st.Changeable:
			p.Fixed = append(p.Fixed, fmt.Sprintf("%s: %s [fixed]", n, onOff(st.Active)))
		default:
			p.Change[n] = wanted[n]
			p.Changes = append(p.Changes, fmt.Sprintf("%s: %s -> %s", n, onOff(st.Active), onOff(wanted[n])))
		}
	}
	return p
}

// EnsureOffload brings link's features to want: it reads them, plans
// (PlanOffload), changes what is wrong and changeable, and reads them back,
// because the ioctl can succeed without applying. It returns what it did
// and the plan it made from the first read.
//
// It is idempotent: with nothing to change it calls no Change and returns
// Changed false. With dryRun it changes nothing and lists in Changes what
// it would change (Result.DryRun set when something would). Features that
// need a change but are fixed by the driver are listed in Fixed and are not
// errors. Each Changes entry reads "name: old -> new".
//
// When Change fails, Changes lists what was attempted and Changed is false;
// when the read-back fails, Changed is true and Changes lists what was
// asked for. Otherwise Changes lists only what the read-back confirmed.
//
// Errors: a missing link matches os.ErrNotExist (from the NIC); a feature
// still wrong after the change matches ErrNotApplied and names it; the
// plan's configuration problems (ErrUnknownFeature, ErrConflict) are
// returned too, after everything else was applied.
func EnsureOffload(ctx context.Context, nic NIC, link string, want OffloadWant, dryRun bool) (Result, FeaturePlan, error) {
	r := Result{Action: ActionOffloadOff, Target: link}
	if err := ctx.Err(); err != nil {
		return r, FeaturePlan{}, err
	}
	before, err := nic.FeaturesWithState(link)
	if err != nil {
		return r, FeaturePlan{}, fmt.Errorf("reading features of %s: %w", link, err)
	}
	plan := PlanOffload(before, want)
	var configErr error
	if plan.Err != nil {
		configErr = fmt.Errorf("features configured for %s: %w", link, plan.Err)
	}
	r.Fixed = slices.Clone(plan.Fixed)
	r.Changes = slices.Clone(plan.Changes)
	if len(plan.Change) == 0 {
		return r, plan, configErr
	}
	if dryRun {
		r.DryRun = true
		return r, plan, configErr
	}
	if err := ctx.Err(); err != nil {
		r.Changes = nil
		return r, plan, errors.Join(err, configErr)
	}
	if err := nic.Change(link, plan.Change); err != nil {
		return r, plan, errors.Join(fmt.Errorf("changing features of %s: %w", link, err), configErr)
	}
	// The SFEATURES ioctl can return success and leave a feature as it was
	// (docs/lab.md, "ethtool": a change to a fixed feature returns nil), so
	// only the read-back says what happened.
	after, err := nic.FeaturesWithState(link)
	if err != nil {
		r.Changed = true // the change was accepted; whether it applied is unknown
		return r, plan, errors.Join(fmt.Errorf("reading back features of %s: %w", link, err), configErr)
	}
	var applied, stuck, stuckStates []string
	for _, n := range sortedKeys(plan.Change) {
		if after[n].Active == plan.Change[n] {
			applied = append(applied, fmt.Sprintf("%s: %s -> %s", n, onOff(!plan.Change[n]), onOff(plan.Change[n])))
			continue
		}
		stuck = append(stuck, n)
		stuckStates = append(stuckStates, fmt.Sprintf("%s still %s", n, onOff(after[n].Active)))
	}
	r.Changes = applied
	r.Changed = len(applied) > 0
	if len(stuck) > 0 {
		return r, plan, errors.Join(&NotAppliedError{Link: link, Features: stuck, states: stuckStates}, configErr)
	}
	return r, plan, configErr
}

// FeatureOfEntry returns the feature name of a Result.Changes or Result.Fixed
// entry ("tx-checksum-ip-generic: on -> off" → "tx-checksum-ip-generic").
func FeatureOfEntry(entry string) string {
	name, _, _ := strings.Cut(entry, ":")
	return name
}

func onOff(on bool) string {
	if on {
		return "on"
	}
	return "off"
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
