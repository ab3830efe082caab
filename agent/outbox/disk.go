package outbox

// Writing to the log, and what happens when it cannot be written: the
// queue is in memory first and in the log as soon as it can be, so a full
// or read-only disk costs durability for a while, never an event.

import (
	"fmt"
	"slices"
	"syscall"
	"time"

	"github.com/edgeheal/edgeheal/agent/core"
	"github.com/edgeheal/edgeheal/agent/statedir"
)

// Retry delays of a log that cannot be written or opened: doubling from
// the first to the last.
const (
	retryFirst = time.Second
	retryLast  = 10 * time.Second
)

// A disk incident (disk-failing) ends only once the log has been written
// again and the file system has kept at least roomNeeded free for
// settleFor: a disk that fills again in between continues the same
// incident, without a new event. So a full disk that takes a small write
// now and then (an ack while the broker drains the queue) can never flap
// between incident and recovered: by construction there is at most one
// pair per settleFor.
var (
	settleFor  = time.Minute
	roomNeeded = uint64(64 << 10)
)

// diskState is what memory holds that the log does not, and why.
type diskState struct {
	removals       []record // "a" and "d" records of logged events not written yet
	countUnwritten bool     // drops the log has no record of: the next write carries a header
	err            error    // why the log is not being written; nil while it is
	incident       bool     // a disk-failing incident is open (err may be nil again)
	roomSince      time.Time
	since          time.Time
	retryAt        time.Time
	retryDelay     time.Duration
	mustCut        bool  // a failed write could not be cut back: cut before the next one
	dirSyncErr     error // a directory fsync after a compaction's rename failed
	compactErr     error // the last compaction failed: the log works, but grows
	compactAt      time.Time
	compactDelay   time.Duration
}

func (d *diskState) failing() bool { return d.err != nil }

// next doubles a retry delay between first and last.
func next(d, first, last time.Duration) time.Duration {
	return min(max(2*d, first), last)
}

// dirty reports whether memory holds anything the log does not.
func (o *Outbox) dirty() bool {
	return len(o.disk.removals) > 0 || o.disk.countUnwritten || o.memOnly > 0
}

// sync writes what memory holds that the log does not, fsynced if fsync
// (always, while recovering): at once while the log works, at the retry
// time while it fails. Called with o.mu held.
func (o *Outbox) sync(fsync bool) {
	if o.f == nil || (o.disk.failing() && o.now().Before(o.disk.retryAt)) {
		return
	}
	if err := o.writeDirty(fsync || o.disk.failing()); err != nil {
		o.diskFailed(err)
		return
	}
	if o.disk.failing() {
		o.disk.err, o.disk.retryDelay, o.disk.retryAt = nil, 0, time.Time{}
	}
}

// settle closes an open disk incident once the log is written and the
// file system has kept room for settleFor. Called with o.mu held, from
// Run's tick.
func (o *Outbox) settle() {
	if !o.disk.incident {
		return
	}
	now := o.now()
	if o.f == nil || o.disk.failing() || o.dirty() || !hasRoom(o.dir) {
		o.disk.roomSince = time.Time{}
		return
	}
	if o.disk.roomSince.IsZero() {
		o.disk.roomSince = now
	}
	if now.Sub(o.disk.roomSince) >= settleFor {
		o.diskRecovered()
	}
}

// hasRoom reports whether the file system of dir has roomNeeded free for
// the agent (root: the blocks reserved for root count).
func hasRoom(dir string) bool {
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		return false
	}
	return st.Bfree*uint64(st.Bsize) >= roomNeeded
}

// writeDirty appends, in one write, the removals, the events only memory
// holds (by Seq) and, if drops went unrecorded, a header with the exact
// totals.
func (o *Outbox) writeDirty(fsync bool) error {
	var buf []byte
	appendRec := func(r record) {
		b, err := encodeRecord(r)
		if err != nil {
			panic(err) // add refused every event that cannot be encoded
		}
		buf = append(buf, b...)
	}
	for _, r := range o.disk.removals {
		appendRec(r)
	}
	// The events only memory holds are usually the newest: look for them
	// from the end, and write them in order.
	var written []int
	for i := len(o.pending) - 1; i >= 0 && len(written) < o.memOnly; i-- {
		if !o.pending[i].onDisk {
			written = append(written, i)
		}
	}
	slices.Reverse(written)
	for _, i := range written {
		appendRec(record{Op: "e", Seq: o.pending[i].Seq, Event: &o.pending[i].Event})
	}
	if o.disk.countUnwritten {
		appendRec(record{Op: "h", Next: o.nextSeq, DroppedTotal: o.dropped})
	}
	if len(buf) == 0 {
		return nil
	}
	if err := o.writeLog(buf, fsync); err != nil {
		return err
	}
	for _, i := range written {
		o.pending[i].onDisk = true
	}
	o.memOnly -= len(written)
	o.dead += 2 * len(o.disk.removals)
	o.disk.removals, o.disk.countUnwritten = nil, false
	return nil
}

// writeLog writes b at the end of the valid log (and syncs it if fsync).
// A failed write is cut back to the last valid length, so that a partial
// record never sits in the middle of the log; if even that fails, nothing
// is written after it until it has been cut. Nothing is written either
// while the directory entry of the log (after a compaction's rename) is
// not known to be durable.
func (o *Outbox) writeLog(b []byte, fsync bool) error {
	if o.disk.dirSyncErr != nil {
		if err := step("dir-sync", func() error { return statedir.SyncDir(o.dir) }); err != nil {
			return fmt.Errorf("syncing the outbox directory after a compaction: %w", err)
		}
		o.disk.dirSyncErr = nil
	}
	if o.disk.mustCut {
		if err := o.f.Truncate(o.size); err != nil {
			return fmt.Errorf("cutting a failed write from the outbox log: %w", err)
		}
		o.disk.mustCut = false
	}
	_, err := o.f.WriteAt(b, o.size)
	if err == nil && fsync {
		err = o.f.Sync()
	}
	if err != nil {
		if terr := o.f.Truncate(o.size); terr != nil {
			o.disk.mustCut = true
		}
		return fmt.Errorf("writing the outbox log: %w", err)
	}
	o.size += int64(len(b))
	return nil
}

// diskFailed notes that the log could not be written (or opened): events
// stay in memory, the next attempt is backed off, and the first failure of
// a run of them queues an incident.
func (o *Outbox) diskFailed(err error) {
	now := o.now()
	if !o.disk.failing() {
		o.disk.retryDelay = 0
	}
	first := !o.disk.incident
	if first {
		o.disk.since, o.disk.incident = now, true
	}
	o.disk.roomSince = time.Time{}
	o.disk.err = err
	o.disk.retryDelay = next(o.disk.retryDelay, retryFirst, retryLast)
	o.disk.retryAt = now.Add(o.disk.retryDelay)
	if first {
		o.own(core.Event{
			Time: now.UTC(), Kind: KindIncident, Target: "outbox", Result: "disk-failing",
			Summary:  fmt.Sprintf("the outbox log cannot be written: events are kept in memory (at most %d) until it can: %v", o.max, err),
			Evidence: map[string]any{"error": err.Error(), "queued": len(o.pending)},
		})
	}
}

// diskRecovered closes the disk incident: what memory held has been in
// the log, with room to spare, for settleFor. It queues (and writes) the
// event that says so.
func (o *Outbox) diskRecovered() {
	now := o.now()
	took := now.Sub(o.disk.since)
	o.disk.incident, o.disk.roomSince = false, time.Time{}
	o.own(core.Event{
		Time: now.UTC(), Kind: "recovered", Target: "outbox", Result: "written", Duration: took.Seconds(),
		Summary: fmt.Sprintf("the outbox log is written again, with room to spare for %s, after %s: every queued event is on disk",
			settleFor, took.Round(time.Second)),
	})
	o.sync(true)
}
