// Package outbox is the agent's durable event queue: bounded, on disk,
// at least once. It only stores; the MQTT publisher drains it and the
// agent's Recorder fills it.
package outbox

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/edgeheal/edgeheal/agent"
)

// KindDropped is the Kind of the event the outbox appends when it had
// to drop events at its bound. Its Evidence holds "dropped" (events dropped
// since the previous report that was still queued, see Outbox),
// "dropped_total" (every event this outbox ever dropped; use it for exact
// accounting), and "first_dropped_ts"/"last_dropped_ts" (times of the
// oldest and newest dropped events).
const KindDropped = "outbox-dropped"

// DefaultMax is the bound of an outbox opened with Max 0.
const DefaultMax = 10000

// ErrClosed is returned by Append after Close.
var ErrClosed = errors.New("outbox closed")

// Item is one queued event and its sequence number in the outbox.
type Item struct {
	Seq   uint64
	Event agent.Event
}

// Options tune an outbox.
type Options struct {
	// Max is the largest number of queued events (at least 2, so that a
	// drop report always fits); 0 means DefaultMax.
	Max int
	// Now returns the current time; nil means time.Now.
	Now func() time.Time
}

// Outbox is a bounded, durable, at-least-once event queue on disk.
//
// Contract:
//   - Append returns only after the event is written and fsynced: once it
//     returned nil, the event survives a crash, kill -9 or power loss.
//   - An event leaves the queue only through Ack (the broker acknowledged
//     it) or by being dropped at the bound, oldest first. Acks are written
//     but not synced: after a crash an acknowledged event may be delivered
//     again, so consumers deduplicate by Event.ID.
//   - At the bound the oldest events are dropped, counted (Dropped, which
//     persists across restarts) and reported by a queued event of kind
//     KindDropped. At most one such report is queued at a time: a new
//     drop supersedes the queued report with one that adds both counts, so
//     reports never crowd out real events.
//   - A write torn by a crash can only be at the tail of the log; Open
//     truncates the log at the first record whose length or checksum is
//     wrong and keeps everything before it.
//
// Outbox is safe for concurrent use.
type Outbox struct {
	dir string
	max int
	now func() time.Time

	mu        sync.Mutex
	f         *os.File
	pending   []Item // ordered by Seq
	nextSeq   uint64
	dropped   uint64 // persistent total
	dead      int    // records in the log that no longer describe a queued event
	truncated int64  // bytes cut from a torn tail by Open
	size      int64  // length of the valid log: where the next record goes
	closed    bool
	changed   chan struct{}
	// Memory mode: f is nil while the log could not be opened; diskErr
	// says why. remap holds the sequence numbers of events carried from
	// memory to the log, for their Acks.
	diskErr error
	remap   map[uint64]uint64
}

// Open opens (creating it if needed) the outbox in dir/outbox and
// replays its log. A torn tail is truncated; Truncated reports how many
// bytes were cut.
func Open(dir string, opts Options) (*Outbox, error) {
	o, err := newOutbox(dir, opts)
	if err != nil {
		return nil, err
	}
	if err := o.openLog(); err != nil {
		return nil, err
	}
	return o, nil
}

// OpenOrMemory is Open for the daemon: when the log cannot be opened (a
// read-only, full or missing state directory), the outbox keeps events in
// memory, bounded the same way, and says so in Health; Run tries the disk
// again and, once the log opens, writes what memory holds into it. Only
// bad options are an error.
func OpenOrMemory(dir string, opts Options) (*Outbox, error) {
	o, err := newOutbox(dir, opts)
	if err != nil {
		return nil, err
	}
	if err := o.openLog(); err != nil {
		o.diskErr = err
		// Sequence numbers in memory must never be those of the log's own
		// events, so that an Ack after the log opened finds the right one.
		o.nextSeq = memorySeqBase
	}
	return o, nil
}

// memorySeqBase is where sequence numbers start for events kept in memory.
const memorySeqBase = 1 << 62

func newOutbox(dir string, opts Options) (*Outbox, error) {
	if opts.Max == 0 {
		opts.Max = DefaultMax
	}
	if opts.Max < 2 {
		return nil, fmt.Errorf("opening outbox: max %d is below 2", opts.Max)
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	return &Outbox{
		dir:     filepath.Join(dir, "outbox"),
		max:     opts.Max,
		now:     opts.Now,
		nextSeq: 1,
		changed: make(chan struct{}, 1),
		remap:   map[uint64]uint64{},
	}, nil
}

// openLog creates the directory, opens and replays the log.
func (o *Outbox) openLog() error {
	if err := os.MkdirAll(o.dir, 0o700); err != nil {
		return fmt.Errorf("creating outbox directory: %w", err)
	}
	// A leftover temporary file is a compaction that never got renamed: the
	// log it would have replaced is still complete.
	if err := os.Remove(filepath.Join(o.dir, outboxTmp)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("removing stale outbox compaction: %w", err)
	}
	f, err := os.OpenFile(filepath.Join(o.dir, outboxLog), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return fmt.Errorf("opening outbox log: %w", err)
	}
	if err := o.replay(f); err != nil {
		f.Close()
		return err
	}
	o.f = f
	if len(o.pending) > 0 {
		o.notify()
	}
	return nil
}

func (o *Outbox) notify() {
	select {
	case o.changed <- struct{}{}:
	default:
	}
}

// Append queues e durably: it returns after the event is written and
// fsynced. An empty ID is replaced by agent.NewEventID() and a zero Time by
// the current time. At the bound the oldest events are dropped first (see
// Outbox). Append does no network I/O.
func (o *Outbox) Append(e agent.Event) error {
	if e.ID == "" {
		e.ID = agent.NewEventID()
	}
	if e.Time.IsZero() {
		e.Time = o.now().UTC()
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.closed {
		return ErrClosed
	}
	var buf []byte
	drop, report, superseded, err := o.planDrop(1)
	if err != nil {
		return err
	}
	for _, it := range drop {
		b, err := encodeRecord(record{Op: "d", Seq: it.Seq})
		if err != nil {
			return err
		}
		buf = append(buf, b...)
	}
	if superseded != nil {
		b, err := encodeRecord(record{Op: "a", Seq: superseded.Seq})
		if err != nil {
			return err
		}
		buf = append(buf, b...)
	}
	var reportItem Item
	if report != nil {
		reportItem = Item{Seq: o.nextSeq, Event: *report}
		b, err := encodeRecord(record{Op: "e", Seq: reportItem.Seq, Event: report})
		if err != nil {
			return err
		}
		buf = append(buf, b...)
	}
	seq := o.nextSeq
	if report != nil {
		seq++
	}
	b, err := encodeRecord(record{Op: "e", Seq: seq, Event: &e})
	if err != nil {
		return err
	}
	buf = append(buf, b...)
	// One write and one fsync for the event and any drops it caused: either
	// all of it is durable, or the torn tail is cut at Open.
	if err := o.write(buf, true); err != nil {
		return err
	}
	// The log is durable: apply to memory.
	o.nextSeq = seq + 1
	o.dropped += uint64(len(drop))
	o.dead += 2 * len(drop)
	o.removeItems(drop)
	if superseded != nil {
		o.removeItems([]Item{*superseded})
		o.dead += 2
	}
	if report != nil {
		o.insertItem(reportItem)
	}
	o.pending = append(o.pending, Item{Seq: seq, Event: e})
	o.notify()
	return o.maybeCompact()
}

// planDrop decides what to drop so that adding n events keeps the queue at
// or below its bound. It returns the events to drop, the new drop report
// (nil when nothing is dropped) and the queued report it supersedes (nil
// when none was queued).
func (o *Outbox) planDrop(n int) (drop []Item, report *agent.Event, superseded *Item, err error) {
	need := len(o.pending) + n - o.max
	if need <= 0 {
		return nil, nil, nil, nil
	}
	prevCount := uint64(0)
	first, last := time.Time{}, time.Time{}
	for i := range o.pending {
		if o.pending[i].Event.Kind == KindDropped {
			it := o.pending[i]
			superseded = &it
			prevCount, first, last = dropEvidence(it.Event)
			break
		}
	}
	if superseded == nil {
		need++ // the report takes a slot of its own
	}
	for _, it := range o.pending {
		if len(drop) == need {
			break
		}
		if it.Event.Kind == KindDropped {
			continue
		}
		drop = append(drop, it)
	}
	if len(drop) == 0 {
		return nil, nil, nil, nil
	}
	for _, it := range drop {
		t := it.Event.Time
		if first.IsZero() || t.Before(first) {
			first = t
		}
		if last.IsZero() || t.After(last) {
			last = t
		}
	}
	count := prevCount + uint64(len(drop))
	total := o.dropped + uint64(len(drop))
	report = &agent.Event{
		ID:     agent.NewEventID(),
		Time:   o.now().UTC(),
		Kind:   KindDropped,
		Target: "outbox",
		Result: "dropped",
		Summary: fmt.Sprintf("outbox full (%d events): dropped the %d oldest undelivered events (%d in total)",
			o.max, count, total),
		Evidence: map[string]any{
			"dropped":          count,
			"dropped_total":    total,
			"first_dropped_ts": first.UTC().Format(time.RFC3339Nano),
			"last_dropped_ts":  last.UTC().Format(time.RFC3339Nano),
		},
	}
	return drop, report, superseded, nil
}

// dropEvidence reads back the counts of a queued drop report, whether it was
// built in this process (uint64) or replayed from the log (float64).
func dropEvidence(e agent.Event) (count uint64, first, last time.Time) {
	switch v := e.Evidence["dropped"].(type) {
	case uint64:
		count = v
	case float64:
		count = uint64(v)
	}
	if s, ok := e.Evidence["first_dropped_ts"].(string); ok {
		first, _ = time.Parse(time.RFC3339Nano, s)
	}
	if s, ok := e.Evidence["last_dropped_ts"].(string); ok {
		last, _ = time.Parse(time.RFC3339Nano, s)
	}
	return count, first, last
}

func (o *Outbox) removeItems(items []Item) {
	if len(items) == 0 {
		return
	}
	gone := make(map[uint64]bool, len(items))
	for _, it := range items {
		gone[it.Seq] = true
	}
	kept := o.pending[:0]
	for _, it := range o.pending {
		if !gone[it.Seq] {
			kept = append(kept, it)
		}
	}
	clear(o.pending[len(kept):])
	o.pending = kept
}

func (o *Outbox) insertItem(it Item) {
	o.pending = append(o.pending, it)
	sortItems(o.pending)
}

// Ack removes the event with seq after the broker acknowledged it. Acking a
// seq that is no longer queued (dropped, superseded, acked twice) is a no-op.
// The removal is written but not synced (see Outbox).
func (o *Outbox) Ack(seq uint64) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.closed {
		return ErrClosed
	}
	if n, ok := o.remap[seq]; ok {
		delete(o.remap, seq)
		seq = n
	}
	i := 0
	for ; i < len(o.pending) && o.pending[i].Seq != seq; i++ {
	}
	if i == len(o.pending) {
		return nil
	}
	b, err := encodeRecord(record{Op: "a", Seq: seq})
	if err != nil {
		return err
	}
	if err := o.write(b, false); err != nil {
		return err
	}
	o.pending = append(o.pending[:i], o.pending[i+1:]...)
	o.dead += 2
	return o.maybeCompact()
}

// Pending returns up to limit queued events, oldest first (all if limit <= 0).
func (o *Outbox) Pending(limit int) []Item {
	o.mu.Lock()
	defer o.mu.Unlock()
	n := len(o.pending)
	if limit > 0 && limit < n {
		n = limit
	}
	return append([]Item(nil), o.pending[:n]...)
}

// Changed is signalled (coalesced, never blocking Append) after an Append,
// and once at Open when events are queued.
func (o *Outbox) Changed() <-chan struct{} { return o.changed }

// Depth is the number of queued events.
func (o *Outbox) Depth() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return len(o.pending)
}

// Dropped is the number of events this outbox ever dropped at its bound,
// kept across restarts.
func (o *Outbox) Dropped() uint64 {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.dropped
}

// Truncated is the number of bytes Open cut from a torn tail of the log.
func (o *Outbox) Truncated() int64 {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.truncated
}

// Close syncs and closes the log. Later Appends fail with ErrClosed.
func (o *Outbox) Close() error {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.closed {
		return nil
	}
	o.closed = true
	if o.f == nil {
		return nil // memory only: nothing to sync
	}
	err := o.f.Sync()
	if cerr := o.f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("closing outbox: %w", err)
	}
	return nil
}
