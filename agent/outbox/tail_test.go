package outbox

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/edgeheal/edgeheal/agent/core"
)

// observed collects what an outbox hands its observer.
type observed struct {
	mu sync.Mutex
	es []core.Event
}

func (o *observed) add(e core.Event) { o.mu.Lock(); o.es = append(o.es, e); o.mu.Unlock() }

func (o *observed) results(kind string) []string {
	o.mu.Lock()
	defer o.mu.Unlock()
	var out []string
	for _, e := range o.es {
		if e.Kind == kind {
			out = append(out, e.Result)
		}
	}
	return out
}

// Damage at the tail of the log to records that were accepted (Append
// returned: they were fsynced) is no torn write: one flipped bit in the
// last record, the last 4 KiB zeroed, the whole log replaced by garbage.
// Each used to be cut as "a torn write" with a WARN line and nothing else.
// Now each is moved aside, reported as an incident (handed to the observer,
// which counts and logs it) and counted in Damaged (a metric); the records
// before it are kept, and only a write cut short is cut as torn.
func TestOutboxKeepsDamageAtTheTailAsideAndReportsIt(t *testing.T) {
	big := strings.Repeat("x", 400)
	for _, tc := range []struct {
		name   string
		damage func(t *testing.T, path string, data []byte) []byte
		kept   int // at least, of the 20 events; never all
	}{
		{"one flipped bit in the last record", func(t *testing.T, _ string, d []byte) []byte {
			d[len(d)-30] ^= 0x04
			return d
		}, 19},
		{"the last 4 KiB zeroed", func(t *testing.T, _ string, d []byte) []byte {
			clear(d[len(d)-4096:])
			return d
		}, 10},
		{"the whole log replaced by garbage", func(t *testing.T, _ string, d []byte) []byte {
			return []byte(strings.Repeat("\x7f\x13garbage", len(d)/9))
		}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			o := mustOpen(t, dir, 100)
			for i := range 20 {
				e := event(i)
				e.Summary = big
				if err := o.Append(e); err != nil {
					t.Fatal(err)
				}
			}
			o.Close()
			path := filepath.Join(dir, "outbox", outboxLog)
			data, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(path, tc.damage(t, path, data), 0o600); err != nil {
				t.Fatal(err)
			}

			o2 := mustOpen(t, dir, 100)
			var seen observed
			o2.Observe(seen.add)
			if o2.Truncated() != 0 {
				t.Errorf("Truncated() = %d: damage to accepted records was cut as a torn write", o2.Truncated())
			}
			if o2.Damaged() == 0 {
				t.Error("Damaged() = 0: the damage is not counted")
			}
			if got := seen.results(KindIncident); !slices.Equal(got, []string{"damaged"}) {
				t.Errorf("the observer got incidents %v, want one damaged", got)
			}
			var evs int
			for _, it := range o2.Pending(0) {
				if strings.HasPrefix(it.Event.ID, "ev-") {
					evs++
				}
			}
			if evs < tc.kept || evs >= 20 {
				t.Errorf("%d events kept, want at least %d and not the damaged ones", evs, tc.kept)
			}
			aside, _ := filepath.Glob(filepath.Join(dir, "outbox", "damaged-*.bin"))
			if len(aside) != 1 {
				t.Errorf("damaged bytes kept aside in %v, want one file", aside)
			}
			o2.Close()
			o3 := mustOpen(t, dir, 100)
			if o3.Damaged() != 0 || o3.Truncated() != 0 {
				t.Errorf("the rewritten log is damaged (%d) or torn (%d) again", o3.Damaged(), o3.Truncated())
			}
			o3.Close()
		})
	}
}

// A write cut short (the agent killed in the middle of it) is still cut
// as torn, silently: it was never acknowledged.
func TestOutboxStillCutsAWriteCutShort(t *testing.T) {
	dir := t.TempDir()
	o := mustOpen(t, dir, 100)
	for i := range 3 {
		if err := o.Append(event(i)); err != nil {
			t.Fatal(err)
		}
	}
	o.Close()
	b, err := encodeRecord(record{Op: "e", Seq: 99, Event: &core.Event{ID: "torn", Summary: strings.Repeat("y", 300)}})
	if err != nil {
		t.Fatal(err)
	}
	appendBytes(t, filepath.Join(dir, "outbox", outboxLog), b[:len(b)-100])
	o2 := mustOpen(t, dir, 100)
	var seen observed
	o2.Observe(seen.add)
	if o2.Truncated() != int64(len(b)-100) || o2.Damaged() != 0 || len(seen.results(KindIncident)) != 0 {
		t.Errorf("truncated %d, damaged %d, incidents %v; want the torn write cut, nothing reported",
			o2.Truncated(), o2.Damaged(), seen.results(KindIncident))
	}
	o2.Close()
}
