package tunnel

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

var ledgerT0 = time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)

func openTestLedger(t *testing.T, dir string, now time.Time) *Ledger {
	t.Helper()
	// What an earlier ledger of this test wrote is on disk first, as a
	// process that ended has written it.
	for _, l := range openedLedgers[t] {
		if !l.Flush(10 * time.Second) {
			t.Fatalf("an earlier ledger's state did not reach the disk: %v", l.Err())
		}
	}
	l, err := OpenLedger(dir, now, nil)
	if err != nil {
		t.Fatalf("OpenLedger: %v", err)
	}
	openedLedgers[t] = append(openedLedgers[t], l)
	t.Cleanup(func() { l.Flush(10 * time.Second); delete(openedLedgers, t) })
	return l
}

// openedLedgers are the ledgers each test opened (tests of this file do
// not run in parallel).
var openedLedgers = map[*testing.T][]*Ledger{}

func TestLedgerKeepsTheBudgetAcrossARestart(t *testing.T) {
	dir := t.TempDir()
	b := openTestLedger(t, dir, ledgerT0).book("wg0")
	for i, rung := range []string{"handshake", "bounce"} {
		start := ledgerT0.Add(time.Duration(i) * time.Minute)
		if !b.begin(inFlight{Rung: rung, Target: "wg0", Started: start}, true) {
			t.Fatalf("begin %s: busy", rung)
		}
		b.end(peerState{}, false, start.Add(time.Second))
	}

	again := openTestLedger(t, dir, ledgerT0.Add(2*time.Minute)).book("wg0")
	spent, last := again.budget()
	if len(spent) != 2 || !last.Equal(ledgerT0.Add(time.Minute)) {
		t.Fatalf("after a restart: spent %v, last %v; want both actions, the last at +1m", spent, last)
	}
	b2 := budgetFrom(budgetPolicy{max: 3, window: time.Hour, cooldown: 30 * time.Second}, spent, last)
	if left := b2.left(ledgerT0.Add(2 * time.Minute)); left != 1 {
		t.Errorf("budget left after a restart = %d, want 1 of 3", left)
	}
}

func TestLedgerRefundsAnActionThatChangedNothing(t *testing.T) {
	b := openTestLedger(t, t.TempDir(), ledgerT0).book("wg0")
	b.begin(inFlight{Rung: "handshake", Started: ledgerT0}, true)
	b.end(peerState{}, false, ledgerT0.Add(time.Second))
	b.begin(inFlight{Rung: "bounce", Started: ledgerT0.Add(time.Minute)}, true)
	b.end(peerState{}, true, ledgerT0.Add(time.Minute+time.Second))
	spent, last := b.budget()
	if len(spent) != 1 || !last.Equal(ledgerT0) {
		t.Errorf("after a refund: spent %v, last %v; want only the first action", spent, last)
	}
}

func TestLedgerAllowsOneActionAtATimePerTunnel(t *testing.T) {
	l := openTestLedger(t, "", ledgerT0)
	a, other := l.book("wg0"), l.book("wg1")
	if !a.begin(inFlight{Rung: "restart-unit", Started: ledgerT0}, true) {
		t.Fatal("first begin refused")
	}
	if a.begin(inFlight{Rung: "handshake", Started: ledgerT0.Add(time.Second)}, true) {
		t.Error("a second action began while the first was in flight")
	}
	if !other.begin(inFlight{Rung: "handshake", Started: ledgerT0}, true) {
		t.Error("another tunnel's action was refused")
	}
	in, done := a.inFlight()
	if in == nil || in.Rung != "restart-unit" {
		t.Fatalf("in flight = %+v, want restart-unit", in)
	}
	a.end(peerState{}, false, ledgerT0.Add(30*time.Second))
	select {
	case <-done:
	default:
		t.Error("the in-flight channel was not closed by end")
	}
	if in, _ := a.inFlight(); in != nil {
		t.Errorf("still in flight after end: %+v", in)
	}
}

func TestLedgerVerifiesAnActionCutShortByARestart(t *testing.T) {
	dir := t.TempDir()
	heal := []string{"reassert", "handshake", "bounce"}
	b := openTestLedger(t, dir, ledgerT0).book("wg0")
	down := peerState{Phase: peerDown, Since: ledgerT0, Streak: 3, Rung: 1, Reason: "probe missed", Opened: ledgerT0}
	b.setPeer("KEY", heal, down, ledgerT0)
	b.begin(inFlight{Rung: "handshake", Target: "wg0/KEY", Peer: "KEY", Next: 2, Started: ledgerT0.Add(time.Second)}, true)
	// The process ends here (kill -9): end is never called.

	restart := ledgerT0.Add(10 * time.Second)
	again := openTestLedger(t, dir, restart).book("wg0")
	if in, _ := again.inFlight(); in != nil {
		t.Errorf("an action of the dead process is still in flight: %+v", in)
	}
	ps, ok := again.peers(heal)["KEY"]
	if !ok {
		t.Fatal("the open incident was not kept")
	}
	if ps.Phase != peerHealing || ps.Rung != 2 || !ps.ActedAt.Equal(ledgerT0.Add(time.Second)) || !ps.DoneAt.Equal(restart) || !ps.Opened.Equal(ledgerT0) {
		t.Errorf("after the restart the peer is %+v; want healing the handshake, verified from the restart on", ps)
	}
	if !again.begin(inFlight{Rung: "bounce", Started: restart}, true) {
		t.Error("the next action is refused after the restart")
	}
}

func TestLedgerForgetsAClosedIncidentAndMovesRungsOfAnotherLadder(t *testing.T) {
	dir := t.TempDir()
	b := openTestLedger(t, dir, ledgerT0).book("wg0")
	b.setPeer("A", []string{"reassert", "handshake"}, peerState{Phase: peerDown, Rung: 1, Opened: ledgerT0}, ledgerT0)
	b.setPeer("B", []string{"reassert", "handshake"}, peerState{Phase: peerDegraded, Rung: 2, GaveUp: "budget spent", Opened: ledgerT0}, ledgerT0)
	b.setPeer("A", []string{"reassert", "handshake"}, peerState{Phase: peerOK}, ledgerT0.Add(time.Minute))

	again := openTestLedger(t, dir, ledgerT0.Add(2*time.Minute)).book("wg0")
	got := again.peers([]string{"reassert", "handshake"})
	if _, ok := got["A"]; ok || got["B"].GaveUp != "budget spent" || got["B"].Rung != 2 {
		t.Errorf("peers = %+v; want only B, given up at rung 2", got)
	}
	if other := again.peers([]string{"handshake"}); other["B"].Rung != 0 || other["B"].Phase != peerDegraded {
		t.Errorf("with another ladder B = %+v; want its rung from the start, still degraded", other["B"])
	}
}

func TestLedgerMovesAnUnreadableFileAsideAndStartsEmpty(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, ledgerName)
	if err := os.WriteFile(path, []byte("{not json"), 0o640); err != nil {
		t.Fatal(err)
	}
	l, err := OpenLedger(dir, ledgerT0, nil)
	if err == nil || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), "moved to") {
		t.Fatalf("OpenLedger error = %v; want one naming the file and where it went", err)
	}
	if spent, _ := l.book("wg0").budget(); len(spent) != 0 {
		t.Errorf("budget after an unreadable file = %v, want empty", spent)
	}
	aside, _ := filepath.Glob(path + ".unreadable-*")
	if len(aside) != 1 {
		t.Errorf("moved-aside files: %v, want one", aside)
	}
	l.book("wg0").begin(inFlight{Rung: "handshake", Started: ledgerT0}, true)
	l.Flush(10 * time.Second)
	if _, err := os.Stat(path); err != nil {
		t.Errorf("a new file was not written: %v", err)
	}
}

func TestLedgerKeepsTheBoundsInMemoryWhenTheFileCannotBeWritten(t *testing.T) {
	// A state directory that cannot be created: its parent is a file.
	parent := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(parent, nil, 0o640); err != nil {
		t.Fatal(err)
	}
	l, err := OpenLedger(filepath.Join(parent, "state"), ledgerT0, nil)
	if err == nil {
		t.Error("OpenLedger of an unusable directory reports nothing")
	}
	b := l.book("wg0")
	b.begin(inFlight{Rung: "handshake", Started: ledgerT0}, true)
	b.end(peerState{}, false, ledgerT0.Add(time.Second))
	if l.Flush(10*time.Second) || l.Err() == nil {
		t.Error("Err is nil after a write that cannot have succeeded")
	}
	if spent, _ := b.budget(); len(spent) != 1 {
		t.Errorf("budget in memory = %v, want the action", spent)
	}
}

func TestLedgerLeavesThePeerOfAnActionInFlightToThatAction(t *testing.T) {
	heal := []string{"restart-unit", "handshake"}
	b := openTestLedger(t, "", ledgerT0).book("wg0")
	down := peerState{Phase: peerDown, Opened: ledgerT0}
	b.setPeer("KEY", heal, down, ledgerT0)
	b.begin(inFlight{Rung: "restart-unit", Peer: "KEY", Next: 1, Started: ledgerT0}, true)
	// A monitor of the next config, waiting, still sees the peer down.
	b.setPeer("KEY", heal, peerState{Phase: peerDown, Opened: ledgerT0, Reason: "probe missed"}, ledgerT0.Add(29*time.Second))
	healing := peerState{Phase: peerHealing, Rung: 1, ActedAt: ledgerT0, DoneAt: ledgerT0.Add(30 * time.Second), Opened: ledgerT0}
	b.end(healing, false, ledgerT0.Add(30*time.Second))
	if got := b.peers(heal)["KEY"]; got.Phase != peerHealing || got.Rung != 1 {
		t.Errorf("after the action ended the peer is %+v, want healing at rung 1 as the action left it", got)
	}
}
