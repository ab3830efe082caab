package history

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/edgeheal/edgeheal/agent/core"
	"github.com/edgeheal/edgeheal/agent/statedir"
	"github.com/edgeheal/edgeheal/regfile"
	"github.com/edgeheal/edgeheal/wire"
)

// FileName is the history's file in the state directory.
const FileName = "history.json"

// saveEvery is how often the history is written while it changes; an
// incident that closes is written at once.
const saveEvery = time.Minute

// file is the history on disk.
type file struct {
	Version   int             `json:"version"`
	Since     time.Time       `json:"since"`
	Whole     *tracker        `json:"whole"`
	Targets   []*target       `json:"targets"`
	Incidents []wire.Incident `json:"incidents"`
}

// FileLimit bounds the history's file: a book at every bound (targetsKept
// targets, each with closedKept closed incidents, and incidentsKept in
// full) writes well under it (TestTheFileAtEveryBoundFitsItsLimit).
const FileLimit = 32 << 20

// Open reads the history kept in dir ("" keeps it in memory only). A
// missing file is an empty history. A file that cannot be read is moved
// aside, named in the error, and the history starts empty: what a node
// without one had.
func Open(dir, node, site string, maxGap time.Duration, now time.Time) (*Book, error) {
	b, err := Read(dir, node, site, maxGap)
	if err == nil || errors.Is(err, regfile.ErrNotRegular) {
		return b, err // what is not a file is not ours to move
	}
	path := filepath.Join(dir, FileName)
	aside := fmt.Sprintf("%s.unreadable-%s", path, now.UTC().Format("20060102T150405Z"))
	if rerr := os.Rename(path, aside); rerr != nil {
		aside = "could not be moved aside: " + rerr.Error()
	} else {
		aside = "moved to " + aside
	}
	return b, fmt.Errorf("%w (%s; the history starts again)", err, aside)
}

// Read reads the history kept in dir and changes nothing on disk: what
// `edgeheal history` shows of a node whose agent does not run. A missing
// file (or dir "") is an empty history; any other error comes with an
// empty one.
func Read(dir, node, site string, maxGap time.Duration) (*Book, error) {
	b := New(node, site, maxGap)
	if dir == "" {
		return b, nil
	}
	path := filepath.Join(dir, FileName)
	data, err := regfile.Read(path, FileLimit)
	if errors.Is(err, fs.ErrNotExist) {
		return b, nil
	}
	var f file
	if err == nil {
		if err = json.Unmarshal(data, &f); err != nil {
			err = fmt.Errorf("history %s: %w", path, err)
		}
	}
	if err == nil && (f.Version != 1 || f.Whole == nil) {
		err = fmt.Errorf("history %s: version %d", path, f.Version)
	}
	if err != nil {
		return b, err
	}
	b.since, b.whole, b.incidents = f.Since, f.Whole, f.Incidents
	for _, t := range f.Targets {
		if t == nil || t.Tr == nil {
			continue
		}
		b.targets[t.Kind+"/"+t.Name] = t
	}
	// An incident open when the agent stopped is still open: its close
	// comes with the component's next word on it.
	for i := range b.incidents {
		in := &b.incidents[i]
		if t, ok := b.targets[in.Kind+"/"+in.Target]; ok && in.End.IsZero() {
			c := *in
			t.open = &c
		}
	}
	return b, nil
}

// marshal is the history as the file has it.
func (b *Book) marshal() ([]byte, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	f := file{Version: 1, Since: b.since, Whole: b.whole, Incidents: b.incidents}
	for _, t := range b.targets {
		f.Targets = append(f.Targets, t)
	}
	return json.Marshal(f)
}

// Keeper is the component "history": it writes the book to the state
// directory at most once a minute while it changes and at once when an
// incident closes. A write that fails keeps the history in memory (it is
// written once the disk takes it) and degrades the component.
type Keeper struct {
	Book *Book
	Dir  string // "" keeps it in memory only
	Log  *slog.Logger

	mu      sync.Mutex
	saved   uint64 // the book's change count last written
	err     error
	savedAt time.Time
}

var _ core.Component = (*Keeper)(nil)

// Name implements core.Component.
func (k *Keeper) Name() string { return "history" }

// Health implements core.Component: passive (a disk that hangs holds up
// only the history's file).
func (k *Keeper) Health() core.Health {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.err != nil {
		return core.Health{Degraded: true, Detail: "kept in memory only, written once the disk takes it: " + k.err.Error()}
	}
	if k.Dir == "" {
		return core.Health{Detail: "kept in memory only"}
	}
	return core.Health{Detail: "kept in " + filepath.Join(k.Dir, FileName)}
}

// Run writes the book when it changed: at once after an incident closed,
// else at most every saveEvery; and once more when ctx ends.
func (k *Keeper) Run(ctx context.Context) error {
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	var closed uint64
	last := time.Now()
	for {
		select {
		case <-ctx.Done():
			k.save()
			return nil
		case <-tick.C:
		}
		changed, c := k.Book.Changes()
		if c != closed || (changed != k.saved && time.Since(last) >= saveEvery) {
			closed, last = c, time.Now()
			k.save()
		}
	}
}

// save writes the book if it changed since the last write.
func (k *Keeper) save() {
	if k.Dir == "" {
		return
	}
	changed, _ := k.Book.Changes()
	k.mu.Lock()
	same := changed == k.saved && k.err == nil
	k.mu.Unlock()
	if same {
		return
	}
	data, err := k.Book.marshal()
	if err == nil {
		err = statedir.WriteFile(filepath.Join(k.Dir, FileName), data, 0o640)
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if err != nil {
		if k.err == nil || k.err.Error() != err.Error() {
			k.Log.Error("history not saved: kept in memory until it can be written", "error", err)
		}
		k.err = err
		return
	}
	if k.err != nil {
		k.Log.Info("history saved again")
	}
	k.err, k.saved, k.savedAt = nil, changed, time.Now()
}
