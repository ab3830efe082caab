package agent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/edgeheal/edgeheal/configs"
	"github.com/edgeheal/edgeheal/probes"
)

// UplinkReport is the one-shot offload check behind `edgeheal check`.
type UplinkReport struct {
	// Healthy is false when a guarded feature of a selected link is not as
	// configured (on, for the TX checksum features) or could not be read:
	// the CLI exits 1.
	Healthy bool           `json:"healthy"`
	Uplinks []UplinkDetail `json:"uplinks"`
}

// UplinkDetail is one selected link (or one uplink config that selects
// none: Link empty) and its relevant features.
type UplinkDetail struct {
	Link       string   `json:"link,omitempty"`
	SelectedBy []string `json:"selected_by"`
	// TxChecksumGuarded is true when a selector keeps TX checksum off.
	TxChecksumGuarded bool `json:"tx_checksum_guarded"`
	// Features are the guarded features: every tx-checksum-* the driver
	// lists (when tx_checksum is off) and the configured extra features.
	Features []GuardedFeature `json:"features,omitempty"`
	// Wrong lists the guarded features not as configured.
	Wrong []string `json:"wrong,omitempty"`
	Error string   `json:"error,omitempty"`
}

// GuardedFeature is one guarded feature: what it is and what is wanted.
type GuardedFeature struct {
	probes.Feature
	Want string `json:"want"` // "on" or "off"
	OK   bool   `json:"ok"`
}

// CheckUplinks lists every link the uplink configs select with its guarded
// features, read-only, through links and nic (both bound to the namespace
// to check). An uplink config with tx_checksum "leave" and no features is
// skipped; one that selects no link is listed without Link. An error means
// the links could not be listed at all; a link whose features could not be
// read is in the report with Error set, and makes it unhealthy.
func CheckUplinks(ctx context.Context, uplinks []configs.Uplink, links probes.LinkLister, nic probes.FeatureReader) (UplinkReport, error) {
	rep := UplinkReport{Healthy: true, Uplinks: []UplinkDetail{}}
	var ups []configs.Uplink
	var names []string
	for _, u := range uplinks {
		if u.TxChecksum == "leave" && len(u.Features) == 0 {
			continue
		}
		ups = append(ups, u)
		names = append(names, u.Name)
	}
	if len(ups) == 0 {
		return rep, nil
	}
	selected, err := probes.SelectUplinks(links, names)
	if err != nil {
		return rep, err
	}
	covered := map[int]bool{}
	for _, s := range selected {
		if err := ctx.Err(); err != nil {
			return rep, err
		}
		d := UplinkDetail{Link: s.Name}
		txOff := false
		features := map[string]string{}
		for _, i := range s.Selectors {
			covered[i] = true
			d.SelectedBy = append(d.SelectedBy, ups[i].Name)
			if ups[i].TxChecksum != "leave" {
				txOff = true
				d.TxChecksumGuarded = true
			}
			maps.Copy(features, ups[i].Features)
		}
		fs, err := nic.Features(s.Name)
		if errors.Is(err, os.ErrNotExist) {
			continue // went away since the listing
		}
		if err != nil {
			d.Error = err.Error()
			rep.Healthy = false
			rep.Uplinks = append(rep.Uplinks, d)
			continue
		}
		byName := map[string]probes.Feature{}
		for _, f := range fs {
			byName[f.Name] = f
		}
		want := map[string]string{}
		if txOff {
			for _, f := range fs {
				if probes.IsTxChecksum(f.Name) {
					want[f.Name] = "off"
				}
			}
		}
		var problems []string
		for _, k := range slices.Sorted(maps.Keys(features)) {
			v := strings.ToLower(features[k])
			ns, err := probes.ExpandFeatureName(k, fs)
			if err != nil {
				problems = append(problems, err.Error())
				continue
			}
			for _, n := range ns {
				if txOff && probes.IsTxChecksum(n) {
					continue // the guard keeps them off whatever an extra says
				}
				want[n] = v
			}
		}
		for _, n := range slices.Sorted(maps.Keys(want)) {
			f := byName[n]
			ok := f.On == (want[n] == "on")
			d.Features = append(d.Features, GuardedFeature{Feature: f, Want: want[n], OK: ok})
			if !ok {
				d.Wrong = append(d.Wrong, n)
			}
		}
		if len(problems) > 0 {
			d.Error = strings.Join(problems, "; ")
		}
		if len(d.Wrong) > 0 || d.Error != "" {
			rep.Healthy = false
		}
		rep.Uplinks = append(rep.Uplinks, d)
	}
	for i, u := range ups {
		if !covered[i] {
			rep.Uplinks = append(rep.Uplinks, UplinkDetail{SelectedBy: []string{u.Name}})
		}
	}
	return rep, nil
}

// Checks turns the report into checks of kind "uplink", as the agent's
// OffloadGuard reports them.
func (r UplinkReport) Checks() []Check {
	var out []Check
	for _, u := range r.Uplinks {
		info := &UplinkInfo{SelectedBy: u.SelectedBy, TxChecksumGuarded: u.TxChecksumGuarded}
		c := Check{Kind: KindUplink, Target: u.Link, State: uplinkOK, Healthy: true, Uplink: info}
		for _, f := range u.Features {
			if info.Features == nil {
				info.Features = map[string]string{}
			}
			info.Features[f.Name] = f.State()
		}
		switch {
		case u.Link == "":
			c.Target, c.State, c.Detail = strings.Join(u.SelectedBy, ","), uplinkAbsent, "no link matches"
		case u.Error != "":
			c.State, c.Healthy, c.Detail = uplinkError, false, u.Error
		case len(u.Wrong) > 0:
			c.State, c.Healthy = uplinkDrift, false
			var parts []string
			for _, f := range u.Features {
				if !f.OK {
					parts = append(parts, fmt.Sprintf("%s (want %s)", f, f.Want))
				}
			}
			c.Detail = strings.Join(parts, ", ")
		}
		out = append(out, c)
	}
	return out
}

// WriteText prints the report as ethtool -k does, one block per uplink,
// with the wanted state of each feature that is wrong.
func (r UplinkReport) WriteText(w io.Writer) error {
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
				fmt.Fprintf(tw, "\t%s:\t%s\n", f.Name, f.State())
			} else {
				fmt.Fprintf(tw, "\t%s:\t%s\twant %s\n", f.Name, f.State(), f.Want)
			}
		}
		if u.Error != "" {
			fmt.Fprintf(tw, "\terror: %s\n", u.Error)
		}
	}
	return tw.Flush()
}
