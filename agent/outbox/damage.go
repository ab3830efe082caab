package outbox

// Damage in the middle of the log: the bytes are kept aside for a human,
// the log is rewritten without them, and an incident says what happened.

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/edgeheal/edgeheal/agent/core"
)

// keepDamaged is how many files of damaged bytes the outbox keeps.
const keepDamaged = 8

// damageStats counts the damage this outbox moved aside since it opened.
type damageStats struct {
	bytes   uint64
	regions int
}

// recoverDamage handles the damaged spans parseLog found in data: it
// writes them to a file beside the log, rewrites the log without them
// (the records after them are already in memory) and queues an incident.
// A step that fails is said in the incident; the next Open finds the same
// damage again and tries again.
func (o *Outbox) recoverDamage(data []byte, r replayed) {
	var n int64
	var offsets []string
	for _, s := range r.damaged {
		n += s.Len
		offsets = append(offsets, fmt.Sprintf("%d+%d", s.Off, s.Len))
	}
	o.damage.bytes += uint64(n)
	o.damage.regions += len(r.damaged)
	ev := map[string]any{
		"damaged_bytes": n, "regions": len(r.damaged), "offsets": strings.Join(offsets, ","),
		"records_kept": r.records, "log_bytes": len(data),
	}
	where := "kept in the log"
	if file, err := o.moveAside(data, r.damaged); err != nil {
		ev["move_aside_error"] = err.Error()
	} else {
		ev["file"] = filepath.Join("outbox", filepath.Base(file))
		where = "moved aside to " + ev["file"].(string)
	}
	if err := o.compact(); err != nil {
		ev["rewrite_error"] = err.Error()
		o.disk.compactErr = err
	}
	o.own(core.Event{
		Time: o.now().UTC(), Kind: KindIncident, Target: "outbox", Result: "damaged",
		Summary: fmt.Sprintf("outbox log damaged: %d bytes in %d region(s) %s; the %d valid records around them were kept (events in the damaged bytes are lost)",
			n, len(r.damaged), where, r.records),
		Evidence: ev,
	})
}

// moveAside writes the damaged spans of data, one after the other, to
// damaged-<time>.bin in the outbox directory, and keeps only the newest
// keepDamaged such files.
func (o *Outbox) moveAside(data []byte, spans []span) (string, error) {
	var buf []byte
	for _, s := range spans {
		buf = append(buf, data[s.Off:s.Off+s.Len]...)
	}
	name := filepath.Join(o.dir, "damaged-"+o.now().UTC().Format("20060102T150405.000000000Z")+".bin")
	if err := os.WriteFile(name, buf, 0o600); err != nil {
		return "", fmt.Errorf("keeping the damaged bytes: %w", err)
	}
	old, _ := filepath.Glob(filepath.Join(o.dir, "damaged-*.bin"))
	sort.Strings(old)
	for len(old) > keepDamaged {
		os.Remove(old[0])
		old = old[1:]
	}
	return name, nil
}

// summary is the Health detail about damage, or "".
func (s damageStats) summary() string {
	if s.regions == 0 {
		return ""
	}
	return fmt.Sprintf("; %d bytes of damaged log moved aside since start", s.bytes)
}
