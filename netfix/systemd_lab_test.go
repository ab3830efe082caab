package netfix_test

import (
	"context"
	"errors"
	"os"
	"testing"
	"time"

	"github.com/edgeheal/edgeheal/internal/testsupport"

	"github.com/coreos/go-systemd/v22/dbus"

	"github.com/edgeheal/edgeheal/internal/testsupport/systemdlab"
	"github.com/edgeheal/edgeheal/netfix"
)

const (
	labSleeper = `[Unit]
Description=edgeheal lab: a service to restart
DefaultDependencies=no

[Service]
ExecStart=/bin/sleep 3600
StandardOutput=null
`
	// labFlaky fails the first time it runs and works afterwards: at boot
	// it lands in "failed", which RestartUnit must reset.
	labFlaky = `[Unit]
Description=edgeheal lab: fails once
DefaultDependencies=no

[Service]
ExecStart=/bin/sh -c 'if [ -e /run/flaky-ran ]; then exec sleep 3600; fi; touch /run/flaky-ran; exit 3'
StandardOutput=null
`
	// labOneshot is never "active" after its job: RestartUnit must say so.
	labOneshot = `[Unit]
Description=edgeheal lab: exits at once
DefaultDependencies=no

[Service]
Type=oneshot
ExecStart=/bin/true
`
)

func TestLabRestartUnitAgainstRealSystemd(t *testing.T) {
	testsupport.RequireRoot(t, "systemd as PID 1 in its own namespaces")
	sd := systemdlab.Start(t, systemdlab.Options{
		Units: map[string]string{
			"lab-sleeper.service": labSleeper,
			"lab-flaky.service":   labFlaky,
			"lab-oneshot.service": labOneshot,
		},
		Boot: []string{"lab-sleeper.service", "lab-flaky.service"},
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := sd.Conn(ctx)
	if err != nil {
		t.Fatalf("connecting to systemd: %v", err)
	}
	defer conn.Close()

	t.Run("an active unit is restarted and comes back with a new process", func(t *testing.T) {
		before := mainPID(ctx, t, conn, "lab-sleeper.service")
		start := time.Now()
		r, err := netfix.RestartUnit(ctx, conn, "lab-sleeper.service", false)
		if err != nil {
			t.Fatalf("RestartUnit: %v", err)
		}
		t.Logf("restart took %s: %+v", time.Since(start).Round(time.Millisecond), r)
		if !r.Changed {
			t.Error("Changed = false")
		}
		if after := mainPID(ctx, t, conn, "lab-sleeper.service"); after == before || after == 0 {
			t.Errorf("MainPID %d after, %d before: not restarted", after, before)
		}
	})

	t.Run("a failed unit is reset and restarted", func(t *testing.T) {
		waitState(ctx, t, conn, "lab-flaky.service", "failed")
		r, err := netfix.RestartUnit(ctx, conn, "lab-flaky.service", false)
		if err != nil {
			t.Fatalf("RestartUnit: %v\nconsole:\n%s", err, sd.Console())
		}
		if len(r.Changes) != 2 || r.Changes[0] != "reset failed state" {
			t.Errorf("Changes = %q, want the reset first", r.Changes)
		}
		if st := unitState(ctx, t, conn, "lab-flaky.service"); st != "active" {
			t.Errorf("unit is %s after RestartUnit", st)
		}
	})

	t.Run("dry run restarts nothing", func(t *testing.T) {
		before := mainPID(ctx, t, conn, "lab-sleeper.service")
		r, err := netfix.RestartUnit(ctx, conn, "lab-sleeper.service", true)
		if err != nil || !r.DryRun || r.Changed {
			t.Fatalf("RestartUnit dry run = %+v, %v", r, err)
		}
		if after := mainPID(ctx, t, conn, "lab-sleeper.service"); after != before {
			t.Errorf("MainPID changed from %d to %d in a dry run", before, after)
		}
	})

	t.Run("a unit that is not active after its job is an error", func(t *testing.T) {
		_, err := netfix.RestartUnit(ctx, conn, "lab-oneshot.service", false)
		if err == nil {
			t.Fatal("RestartUnit returned nil for a oneshot that is inactive after its job")
		}
		t.Logf("as expected: %v", err)
	})

	t.Run("an unknown unit matches os.ErrNotExist", func(t *testing.T) {
		_, err := netfix.RestartUnit(ctx, conn, "no-such-unit.service", false)
		if !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("err = %v, want os.ErrNotExist", err)
		}
	})
}

func mainPID(ctx context.Context, t *testing.T, c *dbus.Conn, unit string) uint32 {
	t.Helper()
	p, err := c.GetServicePropertyContext(ctx, unit, "MainPID")
	if err != nil {
		t.Fatalf("reading MainPID of %s: %v", unit, err)
	}
	pid, _ := p.Value.Value().(uint32)
	return pid
}

func unitState(ctx context.Context, t *testing.T, c *dbus.Conn, unit string) string {
	t.Helper()
	st, err := c.ListUnitsByNamesContext(ctx, []string{unit})
	if err != nil || len(st) != 1 {
		t.Fatalf("reading %s: %v", unit, err)
	}
	return st[0].ActiveState
}

// waitState polls (every 20 ms, at most 10 s) until unit is in state.
func waitState(ctx context.Context, t *testing.T, c *dbus.Conn, unit, state string) {
	t.Helper()
	var got string
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if got = unitState(ctx, t, c, unit); got == state {
			return
		}
	}
	t.Fatalf("%s is %s, want %s", unit, got, state)
}
