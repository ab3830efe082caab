package netfix_test

import (
	"context"
	"errors"
	"os"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/edgeheal/edgeheal/netfix"
	"github.com/edgeheal/edgeheal/netfix/netfixtest"
)

var _ netfix.Systemd = (*netfixtest.Systemd)(nil)

func TestRestartUnit(t *testing.T) {
	const unit = "wg-quick@wg0.service"
	tests := []struct {
		name      string
		unit      netfixtest.Unit
		dryRun    bool
		want      netfix.Result
		wantErr   bool
		wantCalls []string
		wantState string
	}{
		{
			name: "restarts an active unit and finds it active again",
			unit: netfixtest.Unit{ActiveState: "active", SubState: "exited"},
			want: netfix.Result{Action: "restart-unit", Target: unit, Changed: true, Changes: []string{"restart (was active/exited)"}},
			wantCalls: []string{
				"ListUnitsByNames([wg-quick@wg0.service])",
				"RestartUnit(wg-quick@wg0.service, replace)",
				"ListUnitsByNames([wg-quick@wg0.service])",
			},
			wantState: "active",
		},
		{
			name: "resets a failed unit before restarting it",
			unit: netfixtest.Unit{ActiveState: "failed", SubState: "failed"},
			want: netfix.Result{Action: "restart-unit", Target: unit, Changed: true, Changes: []string{"reset failed state", "restart (was failed/failed)"}},
			wantCalls: []string{
				"ListUnitsByNames([wg-quick@wg0.service])",
				"ResetFailedUnit(wg-quick@wg0.service)",
				"RestartUnit(wg-quick@wg0.service, replace)",
				"ListUnitsByNames([wg-quick@wg0.service])",
			},
			wantState: "active",
		},
		{
			name:      "reports but does not restart in dry run",
			unit:      netfixtest.Unit{ActiveState: "failed", SubState: "failed"},
			dryRun:    true,
			want:      netfix.Result{Action: "restart-unit", Target: unit, DryRun: true, Changes: []string{"reset failed state", "restart (was failed/failed)"}},
			wantCalls: []string{"ListUnitsByNames([wg-quick@wg0.service])"},
			wantState: "failed",
		},
		{
			name:    "a failed job is an error",
			unit:    netfixtest.Unit{ActiveState: "active", SubState: "running", JobResult: "timeout"},
			want:    netfix.Result{Action: "restart-unit", Target: unit, Changed: true, Changes: []string{"restart (was active/running)"}},
			wantErr: true,
			wantCalls: []string{
				"ListUnitsByNames([wg-quick@wg0.service])",
				"RestartUnit(wg-quick@wg0.service, replace)",
			},
			wantState: "active",
		},
		{
			name:    "a unit that is not active after its job is an error",
			unit:    netfixtest.Unit{ActiveState: "active", SubState: "running", AfterRestart: "failed"},
			want:    netfix.Result{Action: "restart-unit", Target: unit, Changed: true, Changes: []string{"restart (was active/running)"}},
			wantErr: true,
			wantCalls: []string{
				"ListUnitsByNames([wg-quick@wg0.service])",
				"RestartUnit(wg-quick@wg0.service, replace)",
				"ListUnitsByNames([wg-quick@wg0.service])",
			},
			wantState: "failed",
		},
		{
			name:      "a masked unit is refused",
			unit:      netfixtest.Unit{LoadState: "masked", ActiveState: "inactive", SubState: "dead"},
			want:      netfix.Result{Action: "restart-unit", Target: unit},
			wantErr:   true,
			wantCalls: []string{"ListUnitsByNames([wg-quick@wg0.service])"},
			wantState: "inactive",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sd := netfixtest.NewSystemd()
			sd.SetUnit(unit, tt.unit)
			got, err := netfix.RestartUnit(context.Background(), sd, unit, tt.dryRun)
			if (err != nil) != tt.wantErr {
				t.Fatalf("RestartUnit error = %v, want error %v", err, tt.wantErr)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("Result (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tt.wantCalls, sd.Calls()); diff != "" {
				t.Errorf("calls (-want +got):\n%s", diff)
			}
			if u, _ := sd.Unit(unit); u.ActiveState != tt.wantState {
				t.Errorf("unit is %s, want %s", u.ActiveState, tt.wantState)
			}
		})
	}
}

func TestRestartUnitErrors(t *testing.T) {
	t.Run("an unknown unit matches os.ErrNotExist and is not restarted", func(t *testing.T) {
		sd := netfixtest.NewSystemd()
		_, err := netfix.RestartUnit(context.Background(), sd, "nope.service", false)
		if !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("err = %v, want os.ErrNotExist", err)
		}
		if diff := cmp.Diff([]string{"ListUnitsByNames([nope.service])"}, sd.Calls()); diff != "" {
			t.Errorf("calls (-want +got):\n%s", diff)
		}
	})
	t.Run("a D-Bus error is returned", func(t *testing.T) {
		sd := netfixtest.NewSystemd()
		sd.Err = errors.New("connection closed")
		if _, err := netfix.RestartUnit(context.Background(), sd, "x.service", false); err == nil {
			t.Fatal("RestartUnit returned nil on a D-Bus error")
		}
	})
	t.Run("a job that never finishes ends with the context", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		sd := &silentSystemd{Systemd: netfixtest.NewSystemd(), cancel: cancel}
		sd.SetUnit("x.service", netfixtest.Unit{ActiveState: "active"})
		r, err := netfix.RestartUnit(ctx, sd, "x.service", false)
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("err = %v, want context.Canceled", err)
		}
		if !r.Changed {
			t.Error("Changed = false, but a restart job was queued")
		}
	})
}

// silentSystemd queues restart jobs that never report a result, and cancels
// the caller's context when asked to restart, as a deadline would.
type silentSystemd struct {
	*netfixtest.Systemd
	cancel context.CancelFunc
}

func (s *silentSystemd) RestartUnitContext(ctx context.Context, name, mode string, ch chan<- string) (int, error) {
	s.cancel()
	return 1, nil
}
