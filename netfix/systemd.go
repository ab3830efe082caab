package netfix

import (
	"context"
	"fmt"

	"github.com/coreos/go-systemd/v22/dbus"
)

// Systemd is the part of go-systemd's *dbus.Conn that RestartUnit uses.
// A connection from dbus.NewSystemdConnectionContext (systemd's private
// socket, no dbus-daemon needed) is enough.
type Systemd interface {
	ListUnitsByNamesContext(ctx context.Context, units []string) ([]dbus.UnitStatus, error)
	ResetFailedUnitContext(ctx context.Context, name string) error
	RestartUnitContext(ctx context.Context, name string, mode string, ch chan<- string) (int, error)
}

var _ Systemd = (*dbus.Conn)(nil)

// RestartUnit restarts unit through systemd's D-Bus API: it reads the unit
// first (a unit systemd does not know matches os.ErrNotExist; a masked unit
// is an error), resets it if it is in the failed state (otherwise a unit
// that hit its start limit refuses to start), queues a restart job in
// "replace" mode on a buffered channel (go-systemd's send never blocks,
// even after RestartUnit returned), waits for the job's result or ctx, and
// reads the unit again: it must be active. A job result other than "done"
// or a unit not active afterwards is an error.
//
// RestartUnit is disruptive and not idempotent by nature: Changed is true
// whenever a restart job was queued. It does not retry or sleep; the
// caller bounds the wait with ctx (systemd keeps running the job if ctx
// ends first).
func RestartUnit(ctx context.Context, sd Systemd, unit string, dryRun bool) (Result, error) {
	r := Result{Action: "restart-unit", Target: unit}
	if err := ctx.Err(); err != nil {
		return r, err
	}
	before, err := unitStatus(ctx, sd, unit)
	if err != nil {
		return r, err
	}
	switch before.LoadState {
	case "not-found":
		return r, fmt.Errorf("restarting %s: %w", unit, &notFound{what: "unit " + unit})
	case "masked":
		return r, fmt.Errorf("restarting %s: unit is masked", unit)
	}
	if before.ActiveState == "failed" {
		r.Changes = append(r.Changes, "reset failed state")
	}
	r.Changes = append(r.Changes, fmt.Sprintf("restart (was %s/%s)", before.ActiveState, before.SubState))
	if dryRun {
		r.DryRun = true
		return r, nil
	}
	if before.ActiveState == "failed" {
		if err := sd.ResetFailedUnitContext(ctx, unit); err != nil {
			return r, fmt.Errorf("resetting failed state of %s: %w", unit, err)
		}
		r.Changed = true
	}
	done := make(chan string, 1)
	if _, err := sd.RestartUnitContext(ctx, unit, "replace", done); err != nil {
		return r, fmt.Errorf("restarting %s: %w", unit, err)
	}
	r.Changed = true
	select {
	case res := <-done:
		if res != "done" {
			return r, fmt.Errorf("restarting %s: job %s", unit, res)
		}
	case <-ctx.Done():
		return r, fmt.Errorf("waiting for restart of %s: %w", unit, ctx.Err())
	}
	after, err := unitStatus(ctx, sd, unit)
	if err != nil {
		return r, err
	}
	if after.ActiveState != "active" {
		return r, fmt.Errorf("restarting %s: unit is %s/%s after the restart job", unit, after.ActiveState, after.SubState)
	}
	return r, nil
}

func unitStatus(ctx context.Context, sd Systemd, unit string) (dbus.UnitStatus, error) {
	st, err := sd.ListUnitsByNamesContext(ctx, []string{unit})
	if err != nil {
		return dbus.UnitStatus{}, fmt.Errorf("reading unit %s: %w", unit, err)
	}
	for _, s := range st {
		if s.Name == unit {
			return s, nil
		}
	}
	// systemd answers for every name asked; an empty answer means it
	// does not know the unit at all.
	return dbus.UnitStatus{}, fmt.Errorf("reading unit %s: %w", unit, &notFound{what: "unit " + unit})
}
