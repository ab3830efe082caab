package offload

import (
	"context"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/edgeheal/edgeheal/wire"
)

// Report is the offload guard's dry run, behind `edgeheal check`: the
// same selection and the same reconciler as the daemon's, changing nothing.
type Report struct {
	// Healthy is false when a guarded feature of a selected link is not as
	// configured or could not be read: the CLI exits 1.
	Healthy bool     `json:"healthy"`
	Uplinks []Uplink `json:"uplinks"`
}

// UplinkDetail is one selected link (or one uplink config that selects
// none: Link empty) and its guarded features.
type Uplink struct {
	Link       string           `json:"link,omitempty"`
	SelectedBy []string         `json:"selected_by"`
	Features   []GuardedFeature `json:"features,omitempty"`
	Wrong      []string         `json:"wrong,omitempty"` // the guarded features not as configured
	Error      string           `json:"error,omitempty"`
	check      wire.Check
}

// GuardedFeature is one guarded feature: how it is and how it is wanted.
type GuardedFeature struct {
	Name  string `json:"name"`
	State string `json:"state"` // "on", "off [fixed]", as ethtool -k prints it
	Want  string `json:"want"`  // "on" or "off"
	OK    bool   `json:"ok"`
}

// Check runs the guard's reconciler once over every link its uplinks
// select, as a dry run: it reads, plans and changes nothing, emits nothing
// and does not touch the state Run owns. An error means the links could
// not be listed at all; a link whose features could not be read is in the
// report with Error set, and makes it unhealthy.
func (g *Guard) Check(ctx context.Context) (Report, error) {
	rep := Report{Healthy: true, Uplinks: []Uplink{}}
	if len(g.uplinks) == 0 {
		return rep, nil
	}
	targets, _, err := readUplinks(g.os.Links, g.uplinks)
	if err != nil {
		return rep, fmt.Errorf("selecting uplinks: %w", err)
	}
	for _, t := range targets {
		o, ok := reconcile(ctx, g.os.NIC, g.os.Clock, t, "check", true)
		if err := ctx.Err(); err != nil {
			return rep, err
		}
		if !ok {
			continue // went away since the listing
		}
		d := detailOf(o)
		rep.Healthy = rep.Healthy && d.check.Healthy
		rep.Uplinks = append(rep.Uplinks, d)
	}
	for _, u := range unmatched(g.uplinks, targets) {
		rep.Uplinks = append(rep.Uplinks, Uplink{SelectedBy: []string{u.Name}, check: absentCheck(u)})
	}
	return rep, nil
}

func detailOf(o linkOutcome) Uplink {
	d := Uplink{Link: o.target.Name, SelectedBy: o.target.SelectedBy, Wrong: o.wrong()}
	for _, f := range o.plan.Guarded {
		d.Features = append(d.Features, GuardedFeature{Name: f.Name, State: featureState(f.State), Want: onOff(f.Want), OK: f.OK()})
	}
	state, healthy, detail := o.verdict()
	if state == uplinkError || state == uplinkDegraded {
		d.Error = detail
	}
	info := o.info()
	d.check = wire.Check{Kind: wire.KindUplink, Target: d.Link, State: state, Healthy: healthy, Detail: detail, Uplink: &info}
	return d
}

func onOff(on bool) string {
	if on {
		return "on"
	}
	return "off"
}

// Checks are the report's checks of kind "uplink", as the daemon's guard
// reports them.
func (r Report) Checks() []wire.Check {
	out := make([]wire.Check, 0, len(r.Uplinks))
	for _, u := range r.Uplinks {
		out = append(out, u.check)
	}
	return out
}

// WriteText prints the report as ethtool -k does, one block per uplink,
// with the wanted state of each feature that is wrong.
func (r Report) WriteText(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	if len(r.Uplinks) == 0 {
		fmt.Fprintln(tw, "no uplinks configured to guard")
	}
	for _, u := range r.Uplinks {
		if u.Link == "" {
			fmt.Fprintf(tw, "uplink %s: no link matches\n", strings.Join(u.SelectedBy, ", "))
			continue
		}
		verdict := "ok"
		if len(u.Wrong) > 0 {
			verdict = "WRONG: " + strings.Join(u.Wrong, ", ")
		}
		if u.Error != "" {
			verdict = "ERROR"
		}
		fmt.Fprintf(tw, "uplink %s (selected by %s): %s\n", u.Link, strings.Join(u.SelectedBy, ", "), verdict)
		for _, f := range u.Features {
			if f.OK {
				fmt.Fprintf(tw, "\t%s:\t%s\n", f.Name, f.State)
			} else {
				fmt.Fprintf(tw, "\t%s:\t%s\twant %s\n", f.Name, f.State, f.Want)
			}
		}
		if u.Error != "" {
			fmt.Fprintf(tw, "\terror: %s\n", u.Error)
		}
	}
	return tw.Flush()
}
