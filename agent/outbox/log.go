package outbox

// The log on disk: length- and CRC-framed JSON records, replayed at Open
// (resynchronising past damage), appended to with one write (and one
// fsync) per Append, and compacted by writing a new log and renaming it
// over the old one.

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"sort"
	"time"

	"github.com/edgeheal/edgeheal/agent/core"
	"github.com/edgeheal/edgeheal/agent/statedir"
	"github.com/edgeheal/edgeheal/regfile"
)

const (
	outboxLog    = "outbox.log"
	outboxTmp    = "outbox.log.tmp"
	maxRecord    = 1 << 20 // a larger length field means a torn or corrupt record
	recordHeader = 8       // uint32 length + uint32 CRC-32C, little endian
	compactAfter = 512     // dead records before a compaction is considered
	// maxLog bounds the log Open reads: far above what DefaultMax events
	// of a few KiB each and their dead records make. A larger log is not
	// read (the outbox runs in memory, saying why).
	maxLog = 64 << 20
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// recordStart is how every record's body begins (encoding/json writes the
// fields in order, and a JSON string can never hold it unescaped): where
// replay looks for the next record after damage.
var recordStart = []byte(`{"op":"`)

// record is one entry of the log. Op "h" (header: first record after a
// compaction, and after a write that carries drops the log has no record
// of) carries Next and DroppedTotal; "e" an event; "a" removes Seq
// (acknowledged, or a superseded drop report); "d" removes Seq and counts
// it as dropped.
type record struct {
	Op           string      `json:"op"`
	Seq          uint64      `json:"seq,omitempty"`
	Event        *core.Event `json:"event,omitempty"`
	Next         uint64      `json:"next,omitempty"`
	DroppedTotal uint64      `json:"dropped_total,omitempty"`
}

// span is a region of the log: [Off, Off+Len).
type span struct{ Off, Len int64 }

// replayed is what a log holds.
type replayed struct {
	live    map[uint64]core.Event
	nextSeq uint64 // above every sequence number seen; 0 if none
	dropped uint64
	dead    int
	records int
	end     int64  // end of the last valid record
	damaged []span // regions between valid records that are none
	tail    int64  // bytes after the last valid record: a torn write
}

// parseLog reads every valid record of data. Where a record is not valid,
// it looks for the next one that is: the bytes in between are damage when
// a valid record follows. When none does, the rest is a torn tail only if
// it is what a write cut short leaves (torn); anything else there is
// damage too.
func parseLog(data []byte) replayed {
	r := replayed{live: map[uint64]core.Event{}}
	var off int64
	for off < int64(len(data)) {
		rec, n, err := decodeRecord(data[off:])
		if err != nil {
			nextOff := findRecord(data, off+1)
			if nextOff < 0 && torn(data[off:]) {
				r.tail = int64(len(data)) - off
				break
			}
			if nextOff < 0 {
				nextOff = int64(len(data))
			}
			r.damaged = append(r.damaged, span{Off: off, Len: nextOff - off})
			off = nextOff
			continue
		}
		r.apply(rec)
		off += int64(n)
		r.end = off
	}
	return r
}

func (r *replayed) apply(rec record) {
	r.records++
	switch {
	case rec.Op == "h" && rec.Next < maxSeq:
		r.nextSeq = max(r.nextSeq, rec.Next)
		r.dropped = rec.DroppedTotal
	case rec.Op == "e" && rec.Event != nil && rec.Seq > 0 && rec.Seq < maxSeq:
		r.live[rec.Seq] = *rec.Event
		r.nextSeq = max(r.nextSeq, rec.Seq+1)
	case rec.Op == "a" || rec.Op == "d":
		if _, ok := r.live[rec.Seq]; ok {
			delete(r.live, rec.Seq)
			if rec.Op == "d" {
				r.dropped++
			}
		}
		r.dead += 2
	default:
		r.dead++
	}
}

// torn reports whether b, the bytes after the last valid record of a log,
// is what a write that never completed leaves there, and so may be cut
// without a word: the start of one record, cut short. Its header (as much
// of it as there is) gives a length in range and more than the bytes that
// follow, and those bytes begin the way every record's body does. Append
// returns only after its write is fsynced, and one Append is one write
// starting at a record boundary, so a record that was acknowledged is
// whole on disk: what is left of it cannot be shorter than its header
// says. So a whole record with a wrong checksum, a length out of range,
// zeroes or garbage are damage to what was accepted, never a torn write;
// and so is a record whose length field was damaged (its body is whole,
// and its checksum matches a shorter length). A log cut short by something
// else than a write (a truncated file) is indistinguishable from a torn
// write, and is cut like one.
func torn(b []byte) bool {
	if len(b) < recordHeader {
		return !allZero(b)
	}
	n := int64(binary.LittleEndian.Uint32(b[0:4]))
	sum := binary.LittleEndian.Uint32(b[4:8])
	body := b[recordHeader:]
	if n == 0 || n > maxRecord || int64(len(body)) >= n {
		return false
	}
	k := min(len(body), len(recordStart))
	if !bytes.Equal(body[:k], recordStart[:k]) {
		return false
	}
	// A body that is whole under a shorter length: the length was damaged.
	crc := uint32(0)
	for i := range body {
		crc = crc32.Update(crc, castagnoli, body[i:i+1])
		if crc == sum && body[i] == '}' {
			return false
		}
	}
	return true
}

func allZero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}

// findRecord returns the offset of the first valid record that starts at
// or after from, or -1.
func findRecord(data []byte, from int64) int64 {
	for at := from + recordHeader; at < int64(len(data)); {
		i := bytes.Index(data[at:], recordStart)
		if i < 0 {
			return -1
		}
		start := at + int64(i) - recordHeader
		if _, _, err := decodeRecord(data[start:]); err == nil {
			return start
		}
		at += int64(i) + 1
	}
	return -1
}

// decodeRecord reads the record at the start of b; any error means there
// is no valid record there.
func decodeRecord(b []byte) (record, int, error) {
	if len(b) < recordHeader {
		return record{}, 0, io.ErrUnexpectedEOF
	}
	n := binary.LittleEndian.Uint32(b[0:4])
	sum := binary.LittleEndian.Uint32(b[4:8])
	if n == 0 || n > maxRecord {
		return record{}, 0, fmt.Errorf("outbox record length %d out of range", n)
	}
	if int64(len(b)) < recordHeader+int64(n) {
		return record{}, 0, io.ErrUnexpectedEOF
	}
	body := b[recordHeader : recordHeader+n]
	if crc32.Checksum(body, castagnoli) != sum {
		return record{}, 0, errors.New("outbox record checksum mismatch")
	}
	var rec record
	if err := json.Unmarshal(body, &rec); err != nil {
		return record{}, 0, fmt.Errorf("decoding outbox record: %w", err)
	}
	return rec, recordHeader + int(n), nil
}

func encodeRecord(rec record) ([]byte, error) {
	body, err := json.Marshal(rec)
	if err != nil {
		return nil, fmt.Errorf("encoding outbox record: %w", err)
	}
	if len(body) > maxRecord {
		return nil, fmt.Errorf("outbox record of %d bytes is larger than %d", len(body), maxRecord)
	}
	buf := make([]byte, recordHeader+len(body))
	binary.LittleEndian.PutUint32(buf[0:4], uint32(len(body)))
	binary.LittleEndian.PutUint32(buf[4:8], crc32.Checksum(body, castagnoli))
	copy(buf[recordHeader:], body)
	return buf, nil
}

// openLog creates the directory (fsynced), opens and replays the log: a
// torn tail is cut, damage is moved aside and the log rewritten without it.
func (o *Outbox) openLog() error {
	if err := statedir.EnsureDir(o.dir, 0o700); err != nil {
		return fmt.Errorf("creating outbox directory: %w", err)
	}
	// A leftover temporary file is a compaction that never got renamed: the
	// log it would have replaced is still complete.
	if err := os.Remove(filepath.Join(o.dir, outboxTmp)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("removing stale outbox compaction: %w", err)
	}
	path := filepath.Join(o.dir, outboxLog)
	_, statErr := os.Stat(path)
	f, err := regfile.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return fmt.Errorf("opening outbox log: %w", err)
	}
	if errors.Is(statErr, os.ErrNotExist) {
		if err := statedir.SyncDir(o.dir); err != nil {
			f.Close()
			return fmt.Errorf("syncing the outbox directory: %w", err)
		}
	}
	data, err := regfile.ReadFrom(f, maxLog)
	if err != nil {
		f.Close()
		return fmt.Errorf("reading outbox log: %w", err)
	}
	r := parseLog(data)
	if r.tail > 0 {
		if err := f.Truncate(r.end); err != nil {
			f.Close()
			return fmt.Errorf("truncating torn outbox tail: %w", err)
		}
		if err := f.Sync(); err != nil {
			f.Close()
			return fmt.Errorf("syncing outbox log: %w", err)
		}
	}
	o.f, o.size, o.dead, o.dropped, o.truncated = f, r.end, r.dead, r.dropped, r.tail
	o.logNext = r.nextSeq
	o.nextSeq = max(o.nextSeq, r.nextSeq)
	if r.records == 0 {
		o.nextSeq = max(o.nextSeq, seqBase(o.now()))
	}
	for seq, e := range r.live {
		o.pending = append(o.pending, entry{Item: Item{Seq: seq, Event: e}, onDisk: true})
	}
	sort.Slice(o.pending, func(i, j int) bool { return o.pending[i].Seq < o.pending[j].Seq })
	if len(r.damaged) > 0 {
		o.recoverDamage(data, r)
	}
	if len(o.pending) > 0 {
		o.notify()
	}
	return nil
}

// compactHook, if set (by tests), is called before each step of a
// compaction that can fail: "create", "write", "sync", "rename",
// "dir-sync". An error it returns is that step's error; it may also block,
// for a test to kill the process at that step.
var compactHook func(step string) error

func step(name string, do func() error) error {
	if compactHook != nil {
		if err := compactHook(name); err != nil {
			return err
		}
	}
	return do()
}

// maybeCompact rewrites the log with only the queued events once most of
// it describes events that are gone, unless the log is failing or the
// last compactions failed (then it waits, doubling from 1 s to 10 min).
func (o *Outbox) maybeCompact() {
	if o.f == nil || o.disk.failing() || o.dirty() {
		return
	}
	if o.dead < compactAfter || o.dead < 2*len(o.pending) || o.now().Before(o.disk.compactAt) {
		return
	}
	if err := o.compact(); err != nil {
		o.disk.compactErr = err
		o.disk.compactDelay = next(o.disk.compactDelay, time.Second, 10*time.Minute)
		o.disk.compactAt = o.now().Add(o.disk.compactDelay)
		return
	}
	o.disk.compactErr, o.disk.compactDelay, o.disk.compactAt = nil, 0, time.Time{}
}

// compact writes the queue to a temporary file, syncs it and renames it
// over the log, so a crash leaves either log complete. A failure before
// the rename removes the temporary file and leaves the log as it was; once
// the rename succeeded the new file is the log, even if the directory
// fsync after it failed (that is retried before the next write).
func (o *Outbox) compact() error {
	tmp := filepath.Join(o.dir, outboxTmp)
	var f *os.File
	err := step("create", func() (err error) {
		f, err = regfile.OpenFile(tmp, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o600)
		return err
	})
	if err != nil {
		os.Remove(tmp)
		return fmt.Errorf("compacting outbox: %w", err)
	}
	var n int64
	err = step("write", func() (err error) { n, err = o.writeCompacted(f); return err })
	if err == nil {
		err = step("sync", f.Sync)
	}
	if err == nil {
		err = step("rename", func() error { return os.Rename(tmp, filepath.Join(o.dir, outboxLog)) })
	}
	if err != nil {
		f.Close()
		os.Remove(tmp)
		return fmt.Errorf("compacting outbox: %w", err)
	}
	o.f.Close()
	o.f, o.size, o.dead = f, n, 0
	for i := range o.pending {
		o.pending[i].onDisk = true
	}
	o.memOnly = 0
	o.disk.removals, o.disk.countUnwritten, o.disk.mustCut = nil, false, false
	if err := step("dir-sync", func() error { return statedir.SyncDir(o.dir) }); err != nil {
		o.disk.dirSyncErr = err // writes retry it first
	}
	return nil
}

// writeCompacted writes a header and every queued event to f.
func (o *Outbox) writeCompacted(f *os.File) (int64, error) {
	recs := []record{{Op: "h", Next: o.nextSeq, DroppedTotal: o.dropped}}
	for i := range o.pending {
		recs = append(recs, record{Op: "e", Seq: o.pending[i].Seq, Event: &o.pending[i].Event})
	}
	var buf []byte
	for _, rec := range recs {
		b, err := encodeRecord(rec)
		if err != nil {
			return 0, err
		}
		buf = append(buf, b...)
	}
	if _, err := f.WriteAt(buf, 0); err != nil {
		return 0, err
	}
	return int64(len(buf)), nil
}
