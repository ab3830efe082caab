package netfixtest

import (
	"context"
	"fmt"
	"slices"
	"sync"

	"github.com/coreos/go-systemd/v22/dbus"
)

// Unit is a fake systemd unit's state.
type Unit struct {
	LoadState   string // "loaded", "not-found", "masked"
	ActiveState string // "active", "failed", "inactive", ...
	SubState    string
	// JobResult is what a restart job reports: "done" unless set
	// ("failed", "timeout", "canceled", "dependency", "skipped").
	JobResult string
	// AfterRestart is ActiveState once a restart job finished; "active"
	// unless set (e.g. "failed" for a unit that crashes at once).
	AfterRestart string
	// Restarts counts restart jobs run.
	Restarts int
}

// Systemd is a fake of go-systemd's *dbus.Conn (netfix.Systemd). It holds
// units by name and logs every call. Restart jobs complete at once: the
// result is sent on the caller's channel before RestartUnitContext
// returns, which a buffered channel (as netfix uses) must absorb. Unknown
// units are reported with LoadState "not-found", as systemd does. Safe for
// concurrent use.
type Systemd struct {
	mu    sync.Mutex
	units map[string]*Unit
	calls []string
	jobID int

	// Err, when set, is returned by every method after logging the call.
	Err error
}

// NewSystemd returns a fake with no units.
func NewSystemd() *Systemd { return &Systemd{units: make(map[string]*Unit)} }

// SetUnit adds or replaces a unit. Empty LoadState means "loaded". It is not
// logged.
func (s *Systemd) SetUnit(name string, u Unit) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if u.LoadState == "" {
		u.LoadState = "loaded"
	}
	s.units[name] = &u
}

// Unit returns a copy of the unit's state.
func (s *Systemd) Unit(name string) (Unit, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	u := s.units[name]
	if u == nil {
		return Unit{}, false
	}
	return *u, true
}

// Calls returns the calls made so far, e.g. "RestartUnit(k3s-agent.service, replace)".
func (s *Systemd) Calls() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.calls)
}

// ListUnitsByNamesContext reports each named unit.
func (s *Systemd) ListUnitsByNamesContext(ctx context.Context, names []string) ([]dbus.UnitStatus, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls = append(s.calls, fmt.Sprintf("ListUnitsByNames(%v)", names))
	if s.Err != nil {
		return nil, s.Err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	var out []dbus.UnitStatus
	for _, n := range names {
		u := s.units[n]
		if u == nil {
			out = append(out, dbus.UnitStatus{Name: n, LoadState: "not-found", ActiveState: "inactive", SubState: "dead"})
			continue
		}
		out = append(out, dbus.UnitStatus{Name: n, LoadState: u.LoadState, ActiveState: u.ActiveState, SubState: u.SubState})
	}
	return out, nil
}

// ResetFailedUnitContext moves a failed unit to inactive.
func (s *Systemd) ResetFailedUnitContext(ctx context.Context, name string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls = append(s.calls, "ResetFailedUnit("+name+")")
	if s.Err != nil {
		return s.Err
	}
	u := s.units[name]
	if u == nil {
		return fmt.Errorf("unit %s not loaded", name)
	}
	if u.ActiveState == "failed" {
		u.ActiveState, u.SubState = "inactive", "dead"
	}
	return nil
}

// RestartUnitContext runs a restart job at once and sends its result on ch.
func (s *Systemd) RestartUnitContext(ctx context.Context, name, mode string, ch chan<- string) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls = append(s.calls, "RestartUnit("+name+", "+mode+")")
	if s.Err != nil {
		return 0, s.Err
	}
	u := s.units[name]
	if u == nil || u.LoadState != "loaded" {
		return 0, fmt.Errorf("unit %s not found", name)
	}
	if u.ActiveState == "failed" && u.JobResult == "" {
		// Without reset-failed, a unit that hit its start limit refuses.
		ch <- "failed"
		s.jobID++
		return s.jobID, nil
	}
	u.Restarts++
	res := u.JobResult
	if res == "" {
		res = "done"
	}
	after := u.AfterRestart
	if after == "" {
		after = "active"
	}
	u.ActiveState = after
	u.SubState = map[string]string{"active": "running", "failed": "failed"}[after]
	s.jobID++
	if ch != nil {
		ch <- res
	}
	return s.jobID, nil
}
