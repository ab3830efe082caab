package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"time"

	sddaemon "github.com/coreos/go-systemd/v22/daemon"

	"github.com/edgeheal/edgeheal/wire"
)

// notifier speaks systemd's notify protocol (Type=notify, WatchdogSec=):
// READY=1 once wired, WATCHDOG=1 only while the control loop makes
// progress, STATUS= a one-line summary, RELOADING=1 … READY=1 around a
// reload, STOPPING=1. Outside systemd (no NOTIFY_SOCKET) every call is a
// no-op returning nil.
type notifier struct {
	log      *slog.Logger
	interval time.Duration // watchdog ping period: half of WATCHDOG_USEC; 0 = no watchdog

	mu         sync.Mutex
	lastStatus string
}

// newNotifier reads NOTIFY_SOCKET and WATCHDOG_USEC/WATCHDOG_PID. A bad
// WATCHDOG_USEC is returned as an error (and the watchdog stays off).
func newNotifier(log *slog.Logger) (*notifier, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	n := &notifier{log: log}
	wd, err := sddaemon.SdWatchdogEnabled(false)
	if err != nil {
		return n, fmt.Errorf("reading the systemd watchdog interval: %w", err)
	}
	n.interval = wd / 2
	return n, nil
}

// Enabled reports whether systemd is listening (NOTIFY_SOCKET is set).
func (n *notifier) Enabled() bool { return os.Getenv("NOTIFY_SOCKET") != "" }

// WatchdogInterval is how often RunWatchdog pings: half of WATCHDOG_USEC,
// as sd_watchdog_enabled(3) advises; 0 when the watchdog is off.
func (n *notifier) WatchdogInterval() time.Duration { return n.interval }

func (n *notifier) send(state string) error {
	if _, err := sddaemon.SdNotify(false, state); err != nil {
		return fmt.Errorf("notifying systemd (%s): %w", strings.SplitN(state, "\n", 2)[0], err)
	}
	return nil
}

// Ready sends READY=1. Call it once everything is wired; it must not wait
// for the network or the broker. After a reload it ends RELOADING=1.
func (n *notifier) Ready() error { return n.send(sddaemon.SdNotifyReady) }

// Reloading sends RELOADING=1 with MONOTONIC_USEC (required by
// Type=notify-reload since systemd 253, harmless before). Send Ready when
// the reload is done, whether it succeeded or not.
func (n *notifier) Reloading() error {
	return n.send(sddaemon.SdNotifyReloading + "\n" + strings.TrimSuffix(sddaemon.SdNotifyMonotonicUsec(), "\n"))
}

// Stopping sends STOPPING=1.
func (n *notifier) Stopping() error { return n.send(sddaemon.SdNotifyStopping) }

// Status sends STATUS=line (made one line), unless it equals the last one sent.
func (n *notifier) Status(line string) error {
	line = strings.Join(strings.Fields(line), " ")
	n.mu.Lock()
	if line == n.lastStatus {
		n.mu.Unlock()
		return nil
	}
	n.lastStatus = line
	n.mu.Unlock()
	return n.send("STATUS=" + line)
}

// RunWatchdog pings WATCHDOG=1 every WatchdogInterval, but only when
// progress() (the time the control loop last completed a round) moved
// since the previous ping: a loop that hangs stops the pings and systemd
// restarts the service. It returns when ctx is done, at once when the
// watchdog is off. Run it in a goroutine the caller waits for.
func (n *notifier) RunWatchdog(ctx context.Context, progress func() time.Time) {
	if n.interval <= 0 {
		return
	}
	t := time.NewTicker(n.interval)
	defer t.Stop()
	n.watchdog(ctx, t.C, progress)
}

func (n *notifier) watchdog(ctx context.Context, ticks <-chan time.Time, progress func() time.Time) {
	var last time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case <-ticks:
			p := progress()
			if !p.After(last) {
				n.log.Warn("control loop made no progress; withholding the systemd watchdog ping",
					"last_progress", p)
				continue
			}
			last = p
			if err := n.send(sddaemon.SdNotifyWatchdog); err != nil {
				n.log.Warn("systemd watchdog ping failed", "err", err)
			}
		}
	}
}

// statusLine summarises the agent in one line for STATUS=: how many checks
// are healthy, the unhealthy ones, the outbox depth and the MQTT link.
func statusLine(checks []wire.Check, outboxDepth int, mqttConnected, mqttEnabled bool) string {
	state, healthy, total := wire.NodeState(checks)
	var b strings.Builder
	fmt.Fprintf(&b, "%s: %d/%d checks healthy", state, healthy, total)
	var bad []string
	for _, c := range checks {
		if !c.Healthy {
			bad = append(bad, fmt.Sprintf("%s %s", c.Target, c.State))
		}
	}
	if len(bad) > 0 {
		const show = 3
		if len(bad) > show {
			bad = append(bad[:show], fmt.Sprintf("+%d more", len(bad)-show))
		}
		fmt.Fprintf(&b, " (%s)", strings.Join(bad, ", "))
	}
	fmt.Fprintf(&b, "; outbox %d", outboxDepth)
	switch {
	case !mqttEnabled:
	case mqttConnected:
		b.WriteString("; mqtt connected")
	default:
		b.WriteString("; mqtt disconnected")
	}
	return b.String()
}
