package outbox

import (
	"context"
	"fmt"
	"path/filepath"
	"time"

	"github.com/edgeheal/edgeheal/agent/core"
)

// tickEvery is how often Run looks at a log that is failing, could not be
// opened, or waits for a compaction; the retries themselves back off from
// retryFirst to retryLast.
const tickEvery = time.Second

var _ core.Component = (*Outbox)(nil)

// Name implements core.Component.
func (o *Outbox) Name() string { return "outbox" }

// Health implements core.Component: degraded while events are kept in
// memory only, while compactions fail, or while the directory of a
// compacted log could not be synced. The outbox is passive: its progress
// is not watched (a disk that hangs stops the components that append, and
// they are watched).
func (o *Outbox) Health() core.Health {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.closed {
		return core.Health{Detail: "closed"}
	}
	mem := o.memOnly
	retry := fmt.Sprintf("retrying the disk, at most every %s", retryLast)
	switch {
	case o.f == nil:
		return core.Health{Degraded: true, Detail: fmt.Sprintf("events kept in memory only (%d queued, %s): %v",
			len(o.pending), retry, o.disk.err)}
	case o.disk.failing():
		return core.Health{Degraded: true, Detail: fmt.Sprintf("events kept in memory only: %d of %d queued are not on disk (%s): %v",
			mem, len(o.pending), retry, o.disk.err)}
	case o.disk.dirSyncErr != nil:
		return core.Health{Degraded: true, Detail: fmt.Sprintf("%d events queued; the outbox directory could not be synced after a compaction (retried before the next write): %v",
			len(o.pending), o.disk.dirSyncErr)}
	case o.disk.incident:
		return core.Health{Degraded: true, Detail: fmt.Sprintf("%d events queued on disk; the disk took writes again after failing, and the incident stays open until it has kept %d KiB free for %s",
			len(o.pending), roomNeeded>>10, settleFor)}
	case o.disk.compactErr != nil:
		return core.Health{Degraded: true, Detail: fmt.Sprintf("%d events queued; compacting the log fails, next try in %s: %v",
			len(o.pending), o.disk.compactDelay, o.disk.compactErr)}
	}
	return core.Health{Detail: fmt.Sprintf("%d events queued on disk, %d dropped in total%s", len(o.pending), o.dropped, o.damage.summary())}
}

// Run implements core.Component: it opens a log that could not be opened,
// writes what memory holds to a log that failed, and runs a compaction
// that is due, each when its backoff allows. It returns nil when ctx ends.
func (o *Outbox) Run(ctx context.Context) error {
	t := time.NewTicker(tickEvery)
	defer t.Stop()
	for {
		o.mu.Lock()
		if !o.closed {
			o.tick()
		}
		o.unlock()
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// tick is one of Run's looks. Called with o.mu held.
func (o *Outbox) tick() {
	if o.f == nil {
		if o.now().Before(o.disk.retryAt) {
			return
		}
		if err := o.attach(); err != nil {
			o.diskFailed(fmt.Errorf("opening the outbox log: %w", err))
		}
		return
	}
	if o.disk.failing() || o.dirty() {
		o.sync(true)
	}
	o.settle()
	o.maybeCompact()
}

// attach opens the log of an outbox in memory and moves what memory holds
// into it, after what the log already queued. Called with o.mu held.
func (o *Outbox) attach() error {
	d, err := newOutbox(o.parentDir(), Options{Max: o.max, Now: o.now})
	if err != nil {
		return err
	}
	if err := d.openLog(); err != nil {
		return err
	}
	mem := o.pending
	o.pending, o.memOnly = d.pending, d.memOnly
	o.nextSeq = max(o.nextSeq, d.logNext)
	for _, en := range mem {
		if en.Seq < d.logNext {
			// The log numbered ahead of memory (a clock that went back):
			// renumber, and keep the old number for an Ack in flight.
			o.remap[en.Seq] = o.nextSeq
			en.Seq = o.nextSeq
			o.nextSeq++
		}
		en.onDisk = false
		o.insert(en)
	}
	o.f, o.size, o.dead, o.truncated = d.f, d.size, d.dead, d.truncated
	o.damage.bytes += d.damage.bytes
	o.damage.regions += d.damage.regions
	for _, e := range d.told { // the damage the log had
		o.tell(e)
	}
	o.dropped += d.dropped
	o.disk.removals = d.disk.removals
	o.disk.countUnwritten = true // the header of the next write makes the total exact
	o.bound()
	o.disk.retryAt = time.Time{}
	o.sync(true)
	o.notify()
	return nil
}

// parentDir is the state directory the outbox was opened in.
func (o *Outbox) parentDir() string { return filepath.Dir(o.dir) }
