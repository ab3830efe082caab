package outbox

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"time"

	"github.com/edgeheal/edgeheal/agent"
)

// retryEvery is how often an outbox in memory tries its log again.
const retryEvery = 10 * time.Second

var _ agent.Component = (*Outbox)(nil)

// Name implements agent.Component.
func (o *Outbox) Name() string { return "outbox" }

// Health implements agent.Component: degraded while events are kept in
// memory only. The outbox is passive: its progress is not watched (a disk
// that hangs stops the components that append, and they are watched).
func (o *Outbox) Health() agent.Health {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.f == nil && !o.closed {
		return agent.Health{Degraded: true, Detail: fmt.Sprintf("events kept in memory only (%d queued, retrying the disk every %s): %v",
			len(o.pending), retryEvery, o.diskErr)}
	}
	return agent.Health{Detail: fmt.Sprintf("%d events queued on disk, %d dropped in total", len(o.pending), o.dropped)}
}

// Run implements agent.Component: while the outbox is in memory it tries
// its log every retryEvery; once the log opens, what memory holds is
// written to it. It returns nil when ctx ends.
func (o *Outbox) Run(ctx context.Context) error {
	t := time.NewTicker(retryEvery)
	defer t.Stop()
	for {
		o.mu.Lock()
		if o.f == nil && !o.closed {
			if err := o.attach(); err != nil {
				o.diskErr = err
			}
		}
		o.mu.Unlock()
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// attach opens the log of an outbox in memory and moves what memory holds
// into it, after what the log already queued. Called with o.mu held.
func (o *Outbox) attach() error {
	disk, err := newOutbox(o.parentDir(), Options{Max: o.max, Now: o.now})
	if err != nil {
		return err
	}
	if err := disk.openLog(); err != nil {
		return err
	}
	for _, it := range o.pending {
		if err := disk.Append(it.Event); err != nil {
			disk.Close()
			return fmt.Errorf("writing the events kept in memory to the log: %w", err)
		}
	}
	for _, it := range o.pending {
		if i := slices.IndexFunc(disk.pending, func(d Item) bool { return d.Event.ID == it.Event.ID }); i >= 0 {
			o.remap[it.Seq] = disk.pending[i].Seq
		}
	}
	o.f, o.pending, o.nextSeq, o.dead, o.size, o.truncated = disk.f, disk.pending, disk.nextSeq, disk.dead, disk.size, disk.truncated
	o.dropped += disk.dropped
	o.diskErr = nil
	o.notify()
	return nil
}

// parentDir is the state directory the outbox was opened in.
func (o *Outbox) parentDir() string { return filepath.Dir(o.dir) }
