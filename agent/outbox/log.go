package outbox

// The log on disk: length- and CRC-framed JSON records, replayed at Open,
// appended to with one write (and one fsync) per Append, and compacted
// by writing a new log and renaming it over the old one.

import (
	"bufio"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"

	"github.com/edgeheal/edgeheal/agent/statedir"

	"github.com/edgeheal/edgeheal/agent"
)

const (
	outboxLog    = "outbox.log"
	outboxTmp    = "outbox.log.tmp"
	maxRecord    = 1 << 20 // a larger length field means a torn or corrupt record
	recordHeader = 8       // uint32 length + uint32 CRC-32C, little endian
	compactAfter = 512     // dead records before a compaction is considered
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// record is one entry of the log. Op "h" (header, first record after a
// compaction) carries Next and DroppedTotal; "e" an event; "a" removes Seq
// (acknowledged, or a superseded drop report); "d" removes Seq and counts it
// as dropped.
type record struct {
	Op           string       `json:"op"`
	Seq          uint64       `json:"seq,omitempty"`
	Event        *agent.Event `json:"event,omitempty"`
	Next         uint64       `json:"next,omitempty"`
	DroppedTotal uint64       `json:"dropped_total,omitempty"`
}

// replay reads every valid record of f, truncates a torn tail and leaves f
// positioned at its end.
func (o *Outbox) replay(f *os.File) error {
	st, err := f.Stat()
	if err != nil {
		return fmt.Errorf("reading outbox log: %w", err)
	}
	r := bufio.NewReader(f)
	var off int64
	live := map[uint64]agent.Event{}
	for {
		rec, n, err := readRecord(r)
		if err != nil {
			break // io.EOF at a record boundary, or a torn/corrupt record
		}
		off += int64(n)
		switch rec.Op {
		case "h":
			if rec.Next > o.nextSeq {
				o.nextSeq = rec.Next
			}
			o.dropped = rec.DroppedTotal
		case "e":
			if rec.Event == nil {
				o.dead++
				continue
			}
			live[rec.Seq] = *rec.Event
			if rec.Seq >= o.nextSeq {
				o.nextSeq = rec.Seq + 1
			}
		case "a", "d":
			if _, ok := live[rec.Seq]; ok {
				delete(live, rec.Seq)
				if rec.Op == "d" {
					o.dropped++
				}
			}
			o.dead += 2
		default:
			o.dead++
		}
	}
	if off < st.Size() {
		o.truncated = st.Size() - off
		if err := f.Truncate(off); err != nil {
			return fmt.Errorf("truncating torn outbox tail: %w", err)
		}
		if err := f.Sync(); err != nil {
			return fmt.Errorf("syncing outbox log: %w", err)
		}
	}
	if _, err := f.Seek(off, io.SeekStart); err != nil {
		return fmt.Errorf("seeking outbox log: %w", err)
	}
	o.size = off
	for seq, e := range live {
		o.pending = append(o.pending, Item{Seq: seq, Event: e})
	}
	sortItems(o.pending)
	return nil
}

func sortItems(items []Item) {
	// Insertion sort: replayed logs are nearly ordered already.
	for i := 1; i < len(items); i++ {
		for j := i; j > 0 && items[j].Seq < items[j-1].Seq; j-- {
			items[j], items[j-1] = items[j-1], items[j]
		}
	}
}

// readRecord reads one record; any error means there is no valid record here.
func readRecord(r *bufio.Reader) (record, int, error) {
	var h [recordHeader]byte
	if _, err := io.ReadFull(r, h[:]); err != nil {
		return record{}, 0, err
	}
	n := binary.LittleEndian.Uint32(h[0:4])
	sum := binary.LittleEndian.Uint32(h[4:8])
	if n == 0 || n > maxRecord {
		return record{}, 0, fmt.Errorf("outbox record length %d out of range", n)
	}
	body := make([]byte, n)
	if _, err := io.ReadFull(r, body); err != nil {
		return record{}, 0, err
	}
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

// maybeCompact rewrites the log with only the queued events once most of
// it describes events that are gone. The new log is written to a temporary
// file, synced and renamed over the old one, so a crash leaves either log
// complete.
func (o *Outbox) maybeCompact() error {
	if o.f == nil {
		return nil
	}
	if o.dead < compactAfter || o.dead < 2*len(o.pending) {
		return nil
	}
	tmp := filepath.Join(o.dir, outboxTmp)
	f, err := os.OpenFile(tmp, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return fmt.Errorf("compacting outbox: %w", err)
	}
	w := bufio.NewWriter(f)
	recs := []record{{Op: "h", Next: o.nextSeq, DroppedTotal: o.dropped}}
	for i := range o.pending {
		recs = append(recs, record{Op: "e", Seq: o.pending[i].Seq, Event: &o.pending[i].Event})
	}
	for _, rec := range recs {
		b, err := encodeRecord(rec)
		if err == nil {
			_, err = w.Write(b)
		}
		if err != nil {
			f.Close()
			return fmt.Errorf("compacting outbox: %w", err)
		}
	}
	if err := w.Flush(); err != nil {
		f.Close()
		return fmt.Errorf("compacting outbox: %w", err)
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return fmt.Errorf("compacting outbox: %w", err)
	}
	if err := os.Rename(tmp, filepath.Join(o.dir, outboxLog)); err != nil {
		f.Close()
		return fmt.Errorf("compacting outbox: %w", err)
	}
	if err := statedir.SyncDir(o.dir); err != nil {
		f.Close()
		return fmt.Errorf("compacting outbox: %w", err)
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return fmt.Errorf("compacting outbox: %w", err)
	}
	o.f.Close()
	o.f = f // positioned at its end
	o.size = st.Size()
	o.dead = 0
	return nil
}

// write appends b to the log (and syncs it if sync). On failure (a full
// disk, an I/O error) the log is cut back to its last valid length, so a
// partial record can never sit in the middle of the log and hide the
// records written after it.
func (o *Outbox) write(b []byte, sync bool) error {
	if o.f == nil {
		return nil // memory only (OpenOrMemory): nothing to write to
	}
	_, err := o.f.Write(b)
	if err == nil && sync {
		err = o.f.Sync()
	}
	if err != nil {
		if terr := o.f.Truncate(o.size); terr == nil {
			o.f.Seek(o.size, io.SeekStart)
		}
		return fmt.Errorf("writing outbox log: %w", err)
	}
	o.size += int64(len(b))
	return nil
}
