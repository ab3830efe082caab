package main

import (
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/coreos/go-systemd/v22/journal"
	"github.com/google/go-cmp/cmp"
)

// fakeJournal records what the handler would send.
type fakeJournal struct {
	calls []journalEntry
}

type journalEntry struct {
	Msg  string
	Pri  journal.Priority
	Vars map[string]string
}

func (f *fakeJournal) send(msg string, p journal.Priority, vars map[string]string) error {
	f.calls = append(f.calls, journalEntry{msg, p, vars})
	return nil
}

func TestJournalHandlerSendsStructuredFields(t *testing.T) {
	fj := &fakeJournal{}
	h := newJournalHandler("edgeheal", slog.LevelInfo)
	h.send = fj.send
	log := slog.New(h).With("target", "wg0")
	log.Debug("not sent")
	log.WithGroup("probe").Warn("probe failed", "latency_seconds", 1.5, "class", "timeout",
		slog.Group("peer", "endpoint", "198.51.100.7:51820"))
	log.Error("bad", "9lives", 1, "_trusted", "x", "ts", time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC))
	for i := range fj.calls {
		for _, k := range []string{"CODE_FILE", "CODE_LINE", "CODE_FUNC"} {
			if fj.calls[i].Vars[k] == "" {
				t.Errorf("entry %d has no %s", i, k)
			}
			delete(fj.calls[i].Vars, k)
		}
	}
	want := []journalEntry{
		{"probe failed", journal.PriWarning, map[string]string{
			"SYSLOG_IDENTIFIER": "edgeheal", "TARGET": "wg0",
			"PROBE_LATENCY_SECONDS": "1.5", "PROBE_CLASS": "timeout", "PROBE_PEER_ENDPOINT": "198.51.100.7:51820",
		}},
		{"bad", journal.PriErr, map[string]string{
			"SYSLOG_IDENTIFIER": "edgeheal", "TARGET": "wg0",
			"F9LIVES": "1", "F_TRUSTED": "x", "TS": "2026-11-29T12:00:00Z",
		}},
	}
	if diff := cmp.Diff(want, fj.calls); diff != "" {
		t.Errorf("journal entries (-want +got):\n%s", diff)
	}
}

func TestLogHandlerFallsBackToTextOutsideTheJournal(t *testing.T) {
	t.Setenv("JOURNAL_STREAM", "")
	var b strings.Builder
	slog.New(logHandler(&b, slog.LevelInfo, "edgeheal")).Info("hello", "target", "wg0")
	if !strings.Contains(b.String(), "msg=hello target=wg0") {
		t.Errorf("text output = %q", b.String())
	}
}
