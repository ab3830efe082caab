package tunnel

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/edgeheal/edgeheal/agent/statedir"
	"github.com/edgeheal/edgeheal/regfile"
)

// LedgerName is the file in the agent's state directory (run --state-dir)
// that keeps the policy state across restarts.
const ledgerName = "policy-state.json"

// ledgerKeep is how long spent actions are kept in the file at the most,
// whatever the window: a longer policy.window is not a useful bound.
const ledgerKeep = 24 * time.Hour

// Ledger is the policy state that must outlive a reload and a restart, so
// that every bound is real: per tunnel, the disruptive actions in the
// budget window and the last one, the action in flight, and the open
// incidents of its peers with where their ladder stands. The monitors of
// successive configs share one Ledger; each change is written to a file
// in the state directory (atomic and fsynced, before the action it
// records starts) and read back at the next start. A file that cannot be
// written keeps the state in memory and is reported (Err). Safe for
// concurrent use.
type Ledger struct {
	path string // "" keeps the state in memory only
	log  *slog.Logger

	mu      sync.Mutex
	tunnels map[string]*tunnelLedger
	running map[string]chan struct{} // tunnel → closed when its action in flight ends (this process only)

	// The file is written by a goroutine of its own (writeLoop), never
	// by a monitor under mu: a disk that hangs holds up no tunnel's
	// round. Each save hands it the whole state; the newest wins.
	w ledgerWriter
}

// ledgerWriter is the ledger's file writer: the newest state waiting to
// be written, and what happened to the last write. Guarded by its own mu.
type ledgerWriter struct {
	mu      sync.Mutex
	next    []byte // nil: nothing waits
	gen     uint64 // of next
	written uint64 // the newest generation on disk
	writing bool   // a writeLoop runs
	err     error  // the last write's failure, nil once one succeeded
	done    chan struct{}
}

// tunnelLedger is one tunnel's entry, as written to the file.
type tunnelLedger struct {
	Spent      []time.Time          `json:"spent,omitempty"` // starts of the disruptive actions kept
	Last       time.Time            `json:"last,omitzero"`   // start of the last disruptive action
	LastAction string               `json:"last_action,omitempty"`
	InFlight   *inFlight            `json:"in_flight,omitempty"`
	Heal       []string             `json:"heal,omitempty"`  // the ladder the peers' rung indexes refer to
	Peers      map[string]peerState `json:"peers,omitempty"` // open incidents, by public key
	// LeftDown: a bounce could not set the interface up again; every
	// round tries until it is up (netfix.EnsureLinkUp).
	LeftDown bool `json:"left_down,omitempty"`
}

// InFlight is an action that started and has not returned yet: the rung,
// what it acts on, the peer whose incident it serves and the index of the
// rung after it in that peer's ladder.
type inFlight struct {
	Rung    string    `json:"rung"`
	Target  string    `json:"target"`
	Peer    string    `json:"peer"`
	Next    int       `json:"next"`
	Started time.Time `json:"started"`
	// PrevLast is the tunnel's last disruptive action before this one,
	// restored if this one is refunded (it changed nothing).
	PrevLast time.Time `json:"prev_last,omitzero"`
}

type ledgerFile struct {
	Version int                      `json:"version"`
	Tunnels map[string]*tunnelLedger `json:"tunnels"`
}

// OpenLedger reads the ledger in dir (empty: memory only). A missing file
// is an empty ledger. A file that cannot be parsed is moved aside (it is
// named in the error, which is also logged) and the ledger starts empty:
// the bounds restart from zero, which is what an agent without a ledger
// did. An action the file records as in flight was cut short by the end
// of the process that ran it: its verification starts now.
func OpenLedger(dir string, now time.Time, log *slog.Logger) (*Ledger, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	l := &Ledger{log: log, tunnels: map[string]*tunnelLedger{}, running: map[string]chan struct{}{}}
	if dir == "" {
		return l, nil
	}
	l.path = filepath.Join(dir, ledgerName)
	data, err := regfile.Read(l.path, regfile.StateLimit)
	if errors.Is(err, os.ErrNotExist) {
		return l, nil
	}
	if err != nil {
		// Not readable (a permission, a broken disk): it stays where it is
		// and writes report the problem too.
		err = fmt.Errorf("policy state %s: %w (budgets start from zero)", l.path, err)
		log.Error("policy state unreadable", "error", err)
		return l, err
	}
	var f ledgerFile
	if err := json.Unmarshal(data, &f); err != nil {
		aside := fmt.Sprintf("%s.unreadable-%s", l.path, now.UTC().Format("20060102T150405Z"))
		if rerr := os.Rename(l.path, aside); rerr != nil {
			aside = "could not be moved aside: " + rerr.Error()
		} else {
			aside = "moved to " + aside
		}
		err = fmt.Errorf("policy state %s: %w (%s; budgets start from zero)", l.path, err, aside)
		log.Error("policy state unreadable", "error", err)
		return l, err
	}
	for name, t := range f.Tunnels {
		if t == nil {
			continue
		}
		if in := t.InFlight; in != nil {
			log.Warn("an action was in flight when the agent stopped: verifying it before the next one",
				"tunnel", name, "rung", in.Rung, "started", in.Started)
			t.InFlight = nil
			if ps, ok := t.Peers[in.Peer]; ok {
				ps.Phase, ps.Since, ps.Rung = peerHealing, now, in.Next
				ps.ActedAt, ps.DoneAt = in.Started, now
				t.Peers[in.Peer] = ps
			}
		}
		l.tunnels[name] = t
	}
	return l, nil
}

// Err is the last failure to write the file, nil once a write succeeded.
func (l *Ledger) Err() error {
	l.w.mu.Lock()
	defer l.w.mu.Unlock()
	return l.w.err
}

// entry returns the tunnel's entry, made if missing. Called with l.mu held.
func (l *Ledger) entry(tunnel string) *tunnelLedger {
	t := l.tunnels[tunnel]
	if t == nil {
		t = &tunnelLedger{}
		l.tunnels[tunnel] = t
	}
	return t
}

// save hands the whole ledger to the writer and returns at once, with
// the generation that write will have (0: memory only). Called with l.mu
// held: saves are rare (an action, a phase change) and small.
func (l *Ledger) save(now time.Time) uint64 {
	if l.path == "" {
		return 0
	}
	for _, t := range l.tunnels {
		i := 0
		for i < len(t.Spent) && now.Sub(t.Spent[i]) > ledgerKeep {
			i++
		}
		t.Spent = t.Spent[i:]
	}
	data, err := json.MarshalIndent(ledgerFile{Version: 1, Tunnels: l.tunnels}, "", " ")
	if err != nil {
		l.w.failed(l.log, l.path, err)
		return 0
	}
	return l.w.submit(l, data)
}

// submit queues data as the next state to write and starts the writer if
// it is not running.
func (w *ledgerWriter) submit(l *Ledger, data []byte) uint64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.gen++
	w.next = data
	if w.done == nil {
		w.done = make(chan struct{})
	}
	if !w.writing {
		w.writing = true
		go w.writeLoop(l.log, l.path)
	}
	return w.gen
}

// writeLoop writes the newest state until none waits, then ends.
func (w *ledgerWriter) writeLoop(log *slog.Logger, path string) {
	for {
		w.mu.Lock()
		data, gen := w.next, w.gen
		if data == nil {
			w.writing = false
			w.mu.Unlock()
			return
		}
		w.next = nil
		w.mu.Unlock()
		err := statedir.WriteFile(path, data, 0o640)
		if err != nil {
			w.failed(log, path, err)
			w.mu.Lock()
			close(w.done) // a waiter learns of the failure now
			w.done = make(chan struct{})
			w.mu.Unlock()
			continue
		}
		w.mu.Lock()
		if w.err != nil {
			log.Info("policy state saved again", "path", path)
		}
		w.err = nil
		w.written = gen
		close(w.done)
		w.done = make(chan struct{})
		w.mu.Unlock()
	}
}

func (w *ledgerWriter) failed(log *slog.Logger, path string, err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.err == nil || w.err.Error() != err.Error() {
		log.Error("policy state not saved: bounds hold until the agent restarts", "path", path, "error", err)
	}
	w.err = err
}

// Flush waits, for at most timeout, until every change so far is on disk
// or a write failed; it reports whether it is on disk (always, for a
// ledger in memory). For an orderly stop and for tests.
func (l *Ledger) Flush(timeout time.Duration) bool {
	l.w.mu.Lock()
	gen := l.w.gen
	l.w.mu.Unlock()
	return gen == 0 || l.w.wait(gen, timeout)
}

// wait waits until generation gen is on disk, a write failed, or timeout
// passed; it reports whether gen is on disk.
func (w *ledgerWriter) wait(gen uint64, timeout time.Duration) bool {
	t := time.NewTimer(timeout)
	defer t.Stop()
	for {
		w.mu.Lock()
		if w.written >= gen {
			w.mu.Unlock()
			return true
		}
		if w.err != nil && !w.writing {
			w.mu.Unlock()
			return false
		}
		done := w.done
		w.mu.Unlock()
		select {
		case <-done:
		case <-t.C:
			return false
		}
	}
}

// tunnelBook is one tunnel's view of the ledger, what its monitor uses.
type tunnelBook struct {
	l      *Ledger
	tunnel string
}

func (l *Ledger) book(tunnel string) tunnelBook { return tunnelBook{l: l, tunnel: tunnel} }

// budget returns the tunnel's recorded disruptive actions.
func (b tunnelBook) budget() (spent []time.Time, last time.Time) {
	b.l.mu.Lock()
	defer b.l.mu.Unlock()
	t := b.l.entry(b.tunnel)
	return slices.Clone(t.Spent), t.Last
}

// peers returns the recorded open incidents, by public key, if they refer
// to the ladder heal; otherwise their rungs start again from the first.
func (b tunnelBook) peers(heal []string) map[string]peerState {
	b.l.mu.Lock()
	defer b.l.mu.Unlock()
	t := b.l.entry(b.tunnel)
	out := maps.Clone(t.Peers)
	if !slices.Equal(t.Heal, heal) {
		for k, ps := range out {
			ps.Rung = 0
			out[k] = ps
		}
	}
	return out
}

// setPeer records a peer's state: an open incident is kept, a closed one
// removed. It writes the file only when what a restart needs changed. The
// peer an action in flight serves is left alone: that action records the
// state it leaves the peer in (end), and a monitor that waits for it must
// not write over that with what it saw before.
func (b tunnelBook) setPeer(key string, heal []string, st peerState, now time.Time) {
	b.l.mu.Lock()
	defer b.l.mu.Unlock()
	t := b.l.entry(b.tunnel)
	if in := t.InFlight; in != nil && in.Peer == key {
		return
	}
	old, had := t.Peers[key]
	open := peerOpen(st.Phase)
	switch {
	case !open && !had:
		return
	case !open:
		delete(t.Peers, key)
	case had && samePeerRecord(old, st) && slices.Equal(t.Heal, heal):
		return
	default:
		if t.Peers == nil {
			t.Peers = map[string]peerState{}
		}
		st.Streak = 0 // not needed to resume, and it would write every round
		t.Peers[key] = st
		t.Heal = slices.Clone(heal)
	}
	b.l.save(now)
}

// samePeerRecord reports whether two states differ in nothing a restart
// needs.
func samePeerRecord(a, b peerState) bool {
	a.Streak, b.Streak = 0, 0
	a.Reason, b.Reason = "", ""
	a.LastGood, b.LastGood = time.Time{}, time.Time{}
	return a == b
}

// begin records an action about to start, before it runs: the budget it
// spends (spend: a disruptive rung) and the action in flight. It returns
// false, and records nothing, while another action of the tunnel is in
// flight (one that a monitor of the previous config started).
func (b tunnelBook) begin(in inFlight, spend bool) bool {
	b.l.mu.Lock()
	if _, busy := b.l.running[b.tunnel]; busy {
		b.l.mu.Unlock()
		return false
	}
	t := b.l.entry(b.tunnel)
	in.PrevLast = t.Last
	if spend {
		t.Spent = append(t.Spent, in.Started)
		t.Last = in.Started
	}
	t.LastAction = in.Rung
	t.InFlight = &in
	b.l.running[b.tunnel] = make(chan struct{})
	gen := b.l.save(in.Started)
	b.l.mu.Unlock()
	// The record of an action is on disk before the action starts, so a
	// crash cannot forget a budget spent. A disk that gives no answer
	// holds the action up for beginWait at the most: the bound then
	// holds in memory, as after a failed write (Err says so).
	if gen > 0 {
		b.l.w.wait(gen, beginWait)
	}
	return true
}

// beginWait is how long an action waits for its record to reach the disk.
const beginWait = 2 * time.Second

// end records that the action in flight returned: refund gives its budget
// back (it changed nothing, so it disrupted nothing), and st is the state
// it left its peer's incident in (kept only while that incident is
// recorded as open: a monitor may have seen the peer recover meanwhile).
func (b tunnelBook) end(st peerState, refund bool, now time.Time) {
	b.l.mu.Lock()
	t := b.l.entry(b.tunnel)
	if in := t.InFlight; in != nil {
		if _, open := t.Peers[in.Peer]; open && peerOpen(st.Phase) {
			st.Streak = 0
			t.Peers[in.Peer] = st
		}
		if i := slices.Index(t.Spent, in.Started); refund && i >= 0 {
			t.Spent = slices.Delete(t.Spent, i, i+1)
			t.Last = in.PrevLast
		}
	}
	t.InFlight = nil
	done := b.l.running[b.tunnel]
	delete(b.l.running, b.tunnel)
	b.l.save(now)
	b.l.mu.Unlock()
	if done != nil {
		close(done)
	}
}

// setLeftDown records whether the interface was left down by a bounce.
func (b tunnelBook) setLeftDown(down bool, now time.Time) {
	b.l.mu.Lock()
	defer b.l.mu.Unlock()
	t := b.l.entry(b.tunnel)
	if t.LeftDown != down {
		t.LeftDown = down
		b.l.save(now)
	}
}

func (b tunnelBook) leftDown() bool {
	b.l.mu.Lock()
	defer b.l.mu.Unlock()
	return b.l.entry(b.tunnel).LeftDown
}

// dropPeer forgets a peer's incident (the peer was removed).
func (b tunnelBook) dropPeer(key string, now time.Time) {
	b.l.mu.Lock()
	defer b.l.mu.Unlock()
	t := b.l.entry(b.tunnel)
	if _, ok := t.Peers[key]; ok {
		delete(t.Peers, key)
		b.l.save(now)
	}
}

// inFlight returns the action in flight and a channel closed when it
// ends, or nil when none runs in this process.
func (b tunnelBook) inFlight() (*inFlight, <-chan struct{}) {
	b.l.mu.Lock()
	defer b.l.mu.Unlock()
	done, ok := b.l.running[b.tunnel]
	if !ok {
		return nil, nil
	}
	in := *b.l.entry(b.tunnel).InFlight
	return &in, done
}
