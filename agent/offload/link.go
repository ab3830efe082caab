package offload

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/edgeheal/edgeheal/agent/core"
	"github.com/edgeheal/edgeheal/netfix"
	"github.com/edgeheal/edgeheal/probes"
	"github.com/edgeheal/edgeheal/wire"
)

// uplinkState is what the guard knows about one selected link.
type uplinkState struct {
	link       probes.Link
	state      string
	healthy    bool
	detail     string
	since      time.Time
	lastAction string
	info       wire.UplinkInfo
	// Event deduplication: an event is sent when these change, so a
	// dry run or a stuck feature does not repeat every floor tick.
	lastWrong string
	lastFixed string
	lastErr   string
	fight     fight // fixes in quick succession: something else keeps turning it on
}

// Check states of an uplink.
const (
	uplinkOK       = "ok"
	uplinkDrift    = "drift"    // dry run: a guarded feature is in the wrong state
	uplinkFixed    = "fixed"    // a guarded feature is wrong and the driver does not allow changing it
	uplinkDegraded = "degraded" // the change was accepted and did not apply
	uplinkError    = "error"    // the features could not be read or changed, or a config error
	uplinkAbsent   = "absent"   // the selector matches no link now
)

// linkOutcome is what reconciling one link found and did.
type linkOutcome struct {
	target  uplinkTarget
	trigger string
	start   time.Time
	took    time.Duration
	res     netfix.Result
	plan    netfix.FeaturePlan
	err     error
	dryRun  bool
}

// reconcile brings one link to what its configs want (netfix.EnsureOffload),
// or with dryRun only reads and plans. It is the one reconciler of
// offload: the daemon calls it, and `edgeheal check` calls it with dryRun.
// ok is false for a link that vanished before it could be read.
func reconcile(ctx context.Context, nic netfix.NIC, clock core.Clock, t uplinkTarget, trigger string, dryRun bool) (o linkOutcome, ok bool) {
	o = linkOutcome{target: t, trigger: trigger, start: clock.Now(), dryRun: dryRun}
	o.res, o.plan, o.err = netfix.EnsureOffload(ctx, nic, t.Name, t.Want, dryRun)
	o.took = clock.Now().Sub(o.start)
	if errors.Is(o.err, os.ErrNotExist) {
		return o, false // gone between the event or listing and the read: nothing to guard
	}
	if ctx.Err() != nil && errors.Is(o.err, ctx.Err()) {
		return o, false
	}
	return o, true
}

// wrong lists the guarded features found in the wrong state: those it
// changed or would change, and those that did not apply.
func (o linkOutcome) wrong() []string {
	set := map[string]bool{}
	for _, c := range o.res.Changes {
		set[netfix.FeatureOfEntry(c)] = true
	}
	if na := o.notApplied(); na != nil {
		for _, f := range na.Features {
			set[f] = true
		}
	}
	return slices.Sorted(maps.Keys(set))
}

func (o linkOutcome) fixed() []string {
	var out []string
	for _, f := range o.res.Fixed {
		out = append(out, netfix.FeatureOfEntry(f))
	}
	return out
}

func (o linkOutcome) notApplied() *netfix.NotAppliedError {
	var na *netfix.NotAppliedError
	errors.As(o.err, &na)
	return na
}

// verdict is the check a link gets from an outcome: the same function for
// the daemon and `edgeheal check`, so both say the same about a node.
func (o linkOutcome) verdict() (state string, healthy bool, detail string) {
	switch {
	case o.notApplied() != nil:
		return uplinkDegraded, false, o.err.Error()
	case o.err != nil:
		return uplinkError, false, o.err.Error()
	case len(o.res.Fixed) > 0:
		return uplinkFixed, false, strings.Join(o.res.Fixed, ", ") + ": the driver does not allow changing it"
	case o.res.DryRun:
		return uplinkDrift, false, "dry run, would change: " + strings.Join(o.res.Changes, ", ")
	case o.res.Changed:
		return uplinkOK, true, "fixed: " + strings.Join(o.res.Changes, ", ")
	}
	return uplinkOK, true, ""
}

// info is what the link's check shows: who selected it and its guarded
// features as read.
func (o linkOutcome) info() wire.UplinkInfo {
	i := wire.UplinkInfo{SelectedBy: o.target.SelectedBy, TxChecksumGuarded: o.target.Want.TxChecksumOff}
	for _, f := range o.plan.Guarded {
		if i.Features == nil {
			i.Features = map[string]string{}
		}
		i.Features[f.Name] = featureState(f.State)
	}
	return i
}

// featureState is a feature as ethtool -k prints it: "on", "off [fixed]".
func featureState(st netfix.FeatureState) string {
	s := "off"
	if st.Active {
		s = "on"
	}
	if !st.Changeable {
		s += " [fixed]"
	}
	return s
}

// job is one link to bring to its configured state, and why.
type job struct {
	target  uplinkTarget
	trigger string
}

// enforce fixes every link of a batch first and only then records what it
// found, in the same order: the second link of a re-plugged pair is not
// left exposed while the first one's events, check and log line are made.
// It returns the results of the links it acted on and their errors
// joined; a link that vanished is neither. Called with g.pass held.
func (g *Guard) enforce(ctx context.Context, jobs []job) ([]netfix.Result, error) {
	outcomes := make([]linkOutcome, 0, len(jobs))
	for _, j := range jobs {
		o, ok := reconcile(ctx, g.os.NIC, g.os.Clock, j.target, j.trigger, g.dryRun)
		if !ok {
			g.forget(j.target.Name)
			continue
		}
		outcomes = append(outcomes, o)
	}
	var results []netfix.Result
	var errs []error
	for _, o := range outcomes {
		results = append(results, o.res)
		if err := g.record(o); err != nil {
			errs = append(errs, err)
		}
	}
	return results, errors.Join(errs...)
}

// record keeps what reconciling one link found (its check, what is news
// about it) and reports it: events, a tunnel nudge, a log line. Called
// with g.pass held.
func (g *Guard) record(o linkOutcome) error {
	t, trigger := o.target, o.trigger
	g.mu.Lock()
	st, known := g.state[t.Name]
	if !known || st.link.Index != t.Index {
		st = &uplinkState{since: o.start}
		g.state[t.Name] = st
	}
	st.link = t.Link
	evs := st.events(o)
	st.record(o)
	nudge := o.res.Changed && st.fight.nudge(o.start)
	fighting := st.fight.fighting()
	g.mu.Unlock()

	for _, ev := range evs {
		g.emit(ev)
	}
	if nudge && g.onChanged != nil {
		g.onChanged(t.Name)
	}
	log := g.log.With("link", t.Name)
	switch {
	case o.err != nil:
		log.Error("enforcing offload settings", "trigger", trigger, "error", o.err)
		return fmt.Errorf("uplink %s: %w", t.Name, o.err)
	case o.res.Changed && fighting:
		log.Debug("offload settings restored again (a fight)", "trigger", trigger, "changes", o.res.Changes, "took_seconds", o.took.Seconds())
	case o.res.Changed:
		log.Info("offload settings restored", "trigger", trigger, "changes", o.res.Changes, "took_seconds", o.took.Seconds())
	case o.res.DryRun:
		log.Info("dry run: offload settings would change", "trigger", trigger, "changes", o.res.Changes)
	}
	return nil
}

// events says what is news in o: a drift not reported yet, an action (or
// its failure) and a feature the driver keeps wrong.
func (st *uplinkState) events(o linkOutcome) []core.Event {
	var evs []core.Event
	name := o.target.Name
	if o.res.Changed && !o.res.DryRun {
		// A fix: the first of a run is news; the next ones within a minute
		// are a fight, reported as one (fight.go).
		if news, fev := st.fight.fix(name, o.start); !news {
			if fev != nil {
				fev.ID = core.NewEventID()
				evs = append(evs, *fev)
			}
			st.lastAction = fmt.Sprintf("%s changed at %s (fight)", actionOffloadOff, o.start.UTC().Format(time.RFC3339))
			return evs
		}
	} else if fev := st.fight.calm(name, o.start); fev != nil {
		fev.ID = core.NewEventID()
		evs = append(evs, *fev)
	}
	wrong := o.wrong()
	key := strings.Join(wrong, ",")
	if len(wrong) > 0 && key != st.lastWrong {
		evs = append(evs, core.Event{
			ID: core.NewEventID(), Time: o.start, Kind: wire.EventOffloadDrift, Target: name,
			Summary: fmt.Sprintf("%s: guarded offload features in the wrong state: %s (%s)", name, strings.Join(wrong, ", "), o.trigger),
			Evidence: map[string]any{
				"features": wrong, "changes": o.res.Changes, "trigger": o.trigger, "uplink": o.target.SelectedBy,
				"detected_at": o.start.UTC().Format(time.RFC3339Nano), "dry_run": o.dryRun,
			},
		})
	}
	if len(wrong) > 0 && key != st.lastWrong || (o.err != nil && o.err.Error() != st.lastErr) {
		evs = append(evs, st.actionEvent(o))
	}
	if fixed := o.fixed(); len(fixed) > 0 && strings.Join(fixed, ",") != st.lastFixed {
		evs = append(evs, core.Event{
			ID: core.NewEventID(), Time: o.start, Kind: wire.EventOffloadDrift, Target: name,
			Summary: fmt.Sprintf("%s: %s in the wrong state and fixed by the driver: cannot be changed", name, strings.Join(fixed, ", ")),
			Evidence: map[string]any{"fixed": o.res.Fixed, "trigger": o.trigger, "uplink": o.target.SelectedBy,
				"detected_at": o.start.UTC().Format(time.RFC3339Nano)},
		})
	}
	return evs
}

func (st *uplinkState) actionEvent(o linkOutcome) core.Event {
	name := o.target.Name
	result, summary := "changed", fmt.Sprintf("%s: %s", name, strings.Join(o.res.Changes, ", "))
	switch {
	case o.err != nil:
		result, summary = "failed", fmt.Sprintf("%s: %v", name, o.err)
	case o.res.DryRun:
		result, summary = "dry-run", fmt.Sprintf("%s: would change %s", name, strings.Join(o.res.Changes, ", "))
	}
	ev := core.Event{
		ID: core.NewEventID(), Time: o.start, Kind: wire.EventAction, Target: name, Action: actionOffloadOff,
		Result: result, Duration: o.took.Seconds(), Summary: summary,
		Evidence: map[string]any{"changes": o.res.Changes, "trigger": o.trigger},
	}
	if len(o.res.Fixed) > 0 {
		ev.Evidence["fixed"] = o.res.Fixed
	}
	if o.err != nil {
		ev.Evidence["error"] = o.err.Error()
	}
	st.lastAction = fmt.Sprintf("%s %s at %s", actionOffloadOff, result, o.start.UTC().Format(time.RFC3339))
	return ev
}

// record keeps what o says for the check and for deduplication: after a
// successful change the features are right again, so the next drift is
// news; in a dry run or when the change did not apply they stay wrong, and
// repeating that every tick is not.
func (st *uplinkState) record(o linkOutcome) {
	remaining := strings.Join(o.wrong(), ",") // dry run, or the change failed
	switch {
	case o.notApplied() != nil:
		remaining = strings.Join(o.notApplied().Features, ",")
	case o.res.Changed:
		remaining = ""
	}
	st.lastWrong = remaining
	st.lastFixed = strings.Join(o.fixed(), ",")
	st.lastErr = ""
	if o.err != nil {
		st.lastErr = o.err.Error()
	}
	state, healthy, detail := o.verdict()
	if f := st.fight.detail(); f != "" && detail != "" {
		detail += "; " + f
	} else if f != "" {
		detail = f
	}
	if state != st.state {
		st.since = o.start
	}
	st.state, st.healthy, st.detail = state, healthy, detail
	st.info = o.info()
	st.info.Fighting = st.fight.fighting()
}
