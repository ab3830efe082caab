// Package outbox is the agent's durable event queue: bounded, on disk,
// at least once, in order. It only stores; the MQTT publisher drains it
// and the agent's Recorder fills it.
package outbox

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/edgeheal/edgeheal/agent/core"
)

// Kinds of the events the outbox queues about itself.
const (
	// KindDropped is the Kind of the event the outbox appends when it had
	// to drop events at its bound. Its Evidence holds "dropped" (events
	// dropped since the previous report that was still queued, see Outbox),
	// "dropped_by_class" (the same, by Class name), "dropped_total" (every
	// event this outbox ever dropped; use it for exact accounting), and
	// "first_dropped_ts"/"last_dropped_ts" (times of the oldest and newest
	// dropped events).
	KindDropped = "outbox-dropped"
	// KindIncident is the kind of the events that report the outbox's own
	// trouble, with target "outbox": result "damaged" (a damaged region of
	// the log was moved aside) or "disk-failing" (events are kept in memory
	// until the log can be written); "recovered" with result "written"
	// follows the second.
	KindIncident = "incident"
)

// DefaultMax is the bound of an outbox opened with Max 0.
const DefaultMax = 10000

// ErrClosed is returned by Append after Close.
var ErrClosed = errors.New("outbox closed")

// Item is one queued event and its sequence number. Sequence numbers grow
// with every event of the node, also across restarts and a wiped state
// directory (see Outbox), and are carried in the event's payload.
type Item struct {
	Seq   uint64
	Event core.Event
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
//   - Append keeps every event it accepts (it returns nil). While the log
//     can be written, Append returns only after the event is written and
//     fsynced, so it survives a crash, kill -9 or power loss. When a write
//     fails (a full or read-only disk, an I/O error), the event is kept in
//     memory, bounded the same way, the outbox queues an incident about it,
//     is degraded in Health, and writes what memory holds as soon as the
//     log can be written again (Run retries, backing off to 10 s). Errors
//     after a durable write (a compaction that failed) never make Append
//     fail: they are the outbox's Health.
//   - An event leaves the queue only through Ack (the broker acknowledged
//     it) or by being dropped at the bound. Acks are written but not
//     synced: after a crash an acknowledged event may be delivered again,
//     so consumers deduplicate by Event.ID.
//   - At the bound the least important events are dropped first (see
//     Class: duplicates and info before actions, actions before
//     incidents; the oldest first within a class, the new event included),
//     counted (Dropped, which persists across restarts) and reported by a
//     queued event of kind KindDropped. At most one such report is queued
//     at a time: a new drop supersedes the queued report with one that adds
//     the counts, so reports never crowd out real events.
//   - Sequence numbers increase with every event. A new log starts them at
//     the clock's Unix time in microseconds, so that a node whose state
//     directory was wiped keeps numbering above what it sent before.
//   - A write torn by a crash can only be at the tail of the log, and only
//     a write that was never acknowledged: the prefix of a record, cut
//     short. Open cuts it (Truncated). Damage to a record that was written
//     whole (a flipped bit, zeroes, garbage), at the tail or anywhere
//     else, does not cost the records after it: Open resynchronises at the
//     next valid record, moves the damaged bytes aside to a file of their
//     own, rewrites the log without them, and queues an incident that says
//     so (Damaged).
//
// Outbox is safe for concurrent use.
type Outbox struct {
	dir string
	max int
	now func() time.Time

	mu        sync.Mutex
	f         *os.File // nil while the log could not be opened
	pending   []entry  // ordered by Seq
	memOnly   int      // entries of pending that are not in the log
	nextSeq   uint64
	dropped   uint64 // persistent total
	dead      int    // records in the log that no longer describe a queued event
	truncated int64  // bytes cut from a torn tail by Open
	size      int64  // length of the valid log: where the next record goes
	logNext   uint64 // above every sequence number the log had at Open; 0: none
	closed    bool
	changed   chan struct{}
	disk      diskState
	damage    damageStats
	// remap holds the sequence numbers of events carried from memory to a
	// log whose numbers were ahead of them, for their Acks.
	remap map[uint64]uint64
	// told are the outbox's own events (incidents about its disk and
	// damage, drop reports) queued and not yet handed to observe.
	told    []core.Event
	observe func(core.Event)
}

// entry is a queued event and whether its record is in the log yet.
type entry struct {
	Item
	onDisk bool
}

// Open opens (creating it if needed) the outbox in dir/outbox and
// replays its log. A torn tail is truncated (Truncated says how many
// bytes were cut); damage inside the log is moved aside (see Outbox).
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
// memory, bounded the same way, queues an incident that says so and is
// degraded in Health; Run tries the disk again and, once the log opens,
// writes what memory holds into it. Only bad options are an error.
func OpenOrMemory(dir string, opts Options) (*Outbox, error) {
	o, err := newOutbox(dir, opts)
	if err != nil {
		return nil, err
	}
	if err := o.openLog(); err != nil {
		o.nextSeq = seqBase(o.now())
		o.diskFailed(fmt.Errorf("opening the outbox log: %w", err))
	}
	return o, nil
}

// seqBase is where the sequence numbers of a new log start: the Unix time
// in microseconds, above any number a log created earlier reached unless
// it counted more than one event per microsecond of its life. (It stays
// below 2^53, exact in JSON, until the year 2255.)
func seqBase(now time.Time) uint64 {
	return max(1, uint64(now.UnixMicro()))
}

// maxSeq bounds the sequence numbers a replayed record may have: larger
// ones are no record this outbox wrote.
const maxSeq = 1 << 62

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

func (o *Outbox) notify() {
	select {
	case o.changed <- struct{}{}:
	default:
	}
}

// Append queues e: see Outbox for what is guaranteed. An empty ID is
// replaced by core.NewEventID() and a zero Time by the current time. The
// only errors are ErrClosed and an event too large to be a record (larger
// than 1 MiB as JSON): then nothing was queued. Append does no network I/O.
func (o *Outbox) Append(e core.Event) error {
	if e.ID == "" {
		e.ID = core.NewEventID()
	}
	if e.Time.IsZero() {
		e.Time = o.now().UTC()
	}
	o.mu.Lock()
	defer o.unlock()
	if o.closed {
		return ErrClosed
	}
	if err := o.add(e); err != nil {
		return err
	}
	o.maybeCompact()
	return nil
}

// add queues e under o.mu: drops what the bound requires, and writes it to
// the log unless the log is failing.
func (o *Outbox) add(e core.Event) error {
	if e.ID == "" {
		e.ID = core.NewEventID()
	}
	it := Item{Seq: o.nextSeq, Event: e}
	if _, err := encodeRecord(record{Op: "e", Seq: it.Seq, Event: &it.Event}); err != nil {
		return err // it could never be written: refuse it now
	}
	o.nextSeq++
	o.insert(entry{Item: it})
	o.bound()
	o.sync(true)
	o.notify()
	return nil
}

// bound drops what must go for the queue to fit in max, the drop report
// included, and queues the report.
func (o *Outbox) bound() {
	if len(o.pending) <= o.max {
		return
	}
	items := make([]*Item, len(o.pending))
	for i := range o.pending {
		items[i] = &o.pending[i].Item
	}
	p := planDrop(items, o.max, o.dropped, o.now())
	o.applyDrop(p)
	if p.report != nil {
		o.insert(entry{Item: Item{Seq: o.nextSeq, Event: *p.report}})
		o.nextSeq++
		o.tell(*p.report)
	}
}

// own queues an event of the outbox's own (an incident about its disk or
// damage) and notes it for the observer. Called with o.mu held.
func (o *Outbox) own(e core.Event) {
	if e.ID == "" {
		e.ID = core.NewEventID()
	}
	if o.add(e) == nil {
		o.tell(e)
	}
}

// maxTold bounds the own events kept for an observer that is not set yet.
const maxTold = 256

// tell notes e for the observer. Called with o.mu held.
func (o *Outbox) tell(e core.Event) {
	if len(o.told) < maxTold {
		o.told = append(o.told, e)
	}
}

// unlock releases o.mu and then hands the own events queued under it to
// the observer, so that the observer may take any lock (the metrics', the
// log's) and even call the outbox.
func (o *Outbox) unlock() {
	var told []core.Event
	f := o.observe
	if f != nil {
		told, o.told = o.told, nil
	}
	o.mu.Unlock()
	for _, e := range told {
		f(e)
	}
}

// Observe sets f to receive every event the outbox queues of its own (the
// incidents about its disk and about damage, their recoveries, the drop
// reports) once it is queued, so that the agent counts and logs them as it
// does every other event; f must not block. The own events queued before
// (at Open: damage found in the log) are handed to f at once.
func (o *Outbox) Observe(f func(core.Event)) {
	o.mu.Lock()
	o.observe = f
	o.unlock()
}

// applyDrop removes what p drops and supersedes from memory and notes the
// records the log needs for it.
func (o *Outbox) applyDrop(p dropPlan) {
	for _, d := range p.drop {
		o.remove(d.Seq, "d")
	}
	o.dropped += uint64(len(p.drop))
	if p.superseded != nil {
		o.remove(p.superseded.Seq, "a")
	}
}

// remove takes seq out of the queue; op ("a" acked or superseded, "d"
// dropped) is the record that tells the log, when the event is in it. A
// drop of an event the log never had is counted through the header the
// next write carries.
func (o *Outbox) remove(seq uint64, op string) bool {
	for i, en := range o.pending {
		if en.Seq != seq {
			continue
		}
		o.pending = append(o.pending[:i], o.pending[i+1:]...)
		if !en.onDisk {
			o.memOnly--
		}
		switch {
		case en.onDisk:
			o.disk.removals = append(o.disk.removals, record{Op: op, Seq: seq})
		case op == "d":
			o.disk.countUnwritten = true
		}
		return true
	}
	return false
}

// insert puts en at its place by Seq (at the end, but for a renumbering).
func (o *Outbox) insert(en entry) {
	if !en.onDisk {
		o.memOnly++
	}
	i := len(o.pending)
	for i > 0 && o.pending[i-1].Seq > en.Seq {
		i--
	}
	o.pending = append(o.pending, entry{})
	copy(o.pending[i+1:], o.pending[i:])
	o.pending[i] = en
}

// Ack removes the event with seq after the broker acknowledged it. Acking a
// seq that is no longer queued (dropped, superseded, acked twice) is a no-op.
// The removal is written but not synced (see Outbox); a log that cannot be
// written gets it with the next write that succeeds.
func (o *Outbox) Ack(seq uint64) error {
	o.mu.Lock()
	defer o.unlock()
	if o.closed {
		return ErrClosed
	}
	if n, ok := o.remap[seq]; ok {
		delete(o.remap, seq)
		seq = n
	}
	if o.remove(seq, "a") {
		o.sync(false)
		o.maybeCompact()
	}
	return nil
}

// Pending returns up to limit queued events, oldest first (all if limit <= 0).
func (o *Outbox) Pending(limit int) []Item {
	o.mu.Lock()
	defer o.mu.Unlock()
	n := len(o.pending)
	if limit > 0 && limit < n {
		n = limit
	}
	out := make([]Item, n)
	for i := range out {
		out[i] = o.pending[i].Item
	}
	return out
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

// MemoryOnly is the number of queued events that are not in the log yet
// (the log could not be written or opened).
func (o *Outbox) MemoryOnly() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.memOnly
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

// Damaged is the number of bytes of damaged log this outbox moved aside
// since it was opened.
func (o *Outbox) Damaged() uint64 {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.damage.bytes
}

// Close writes what memory holds if it can, syncs and closes the log.
// Later Appends fail with ErrClosed.
func (o *Outbox) Close() error {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.closed {
		return nil
	}
	if o.f != nil && o.dirty() {
		o.disk.retryAt = time.Time{}
		o.sync(true)
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
