package system

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/coreos/go-systemd/v22/dbus"

	"github.com/edgeheal/edgeheal/netfix"
)

// lazySystemd is a netfix.Systemd that connects to systemd's D-Bus API on
// first use, so the agent starts (and runs every other rung) where systemd
// is not reachable, and reconnects after an error.
type lazySystemd struct {
	mu   sync.Mutex
	conn *dbus.Conn
}

var _ netfix.Systemd = (*lazySystemd)(nil)

func (l *lazySystemd) get(ctx context.Context) (*dbus.Conn, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.conn != nil && l.conn.Connected() {
		return l.conn, nil
	}
	// The private socket needs no dbus-daemon; the system bus is the fallback.
	c, err := dbus.NewSystemdConnectionContext(ctx)
	if err != nil {
		var err2 error
		if c, err2 = dbus.NewWithContext(ctx); err2 != nil {
			return nil, fmt.Errorf("connecting to systemd over D-Bus: %w", errors.Join(err, err2))
		}
	}
	l.conn = c
	return c, nil
}

func (l *lazySystemd) ListUnitsByNamesContext(ctx context.Context, units []string) ([]dbus.UnitStatus, error) {
	c, err := l.get(ctx)
	if err != nil {
		return nil, err
	}
	return c.ListUnitsByNamesContext(ctx, units)
}

func (l *lazySystemd) ResetFailedUnitContext(ctx context.Context, name string) error {
	c, err := l.get(ctx)
	if err != nil {
		return err
	}
	return c.ResetFailedUnitContext(ctx, name)
}

func (l *lazySystemd) RestartUnitContext(ctx context.Context, name, mode string, ch chan<- string) (int, error) {
	c, err := l.get(ctx)
	if err != nil {
		return 0, err
	}
	return c.RestartUnitContext(ctx, name, mode, ch)
}

func (l *lazySystemd) close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.conn != nil {
		l.conn.Close()
	}
	return nil
}
