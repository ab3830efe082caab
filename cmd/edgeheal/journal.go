package main

import (
	"context"
	"io"
	"log/slog"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/coreos/go-systemd/v22/journal"
)

// logHandler returns the agent's slog handler: structured entries to
// journald's native socket when stderr is connected to the journal (the
// service runs under systemd with StandardError=journal, the default),
// otherwise a text handler on w. identifier is the SYSLOG_IDENTIFIER.
func logHandler(w io.Writer, level slog.Leveler, identifier string) slog.Handler {
	if ok, err := journal.StderrIsJournalStream(); err == nil && ok && journal.Enabled() {
		return newJournalHandler(identifier, level)
	}
	return slog.NewTextHandler(w, &slog.HandlerOptions{Level: level})
}

// journalHandler is a slog.Handler that sends every record as one
// structured journald entry: MESSAGE, PRIORITY, SYSLOG_IDENTIFIER,
// CODE_FILE/CODE_LINE/CODE_FUNC, and each attribute as a field of its own
// (key upper-cased, other characters turned into '_', groups joined with
// '_': target=wg0 becomes TARGET=wg0), so `journalctl -u edgeheal
// TARGET=wg0` finds a target's history.
type journalHandler struct {
	identifier string
	level      slog.Leveler
	prefix     string            // group prefix, e.g. "PROBE_"
	fields     map[string]string // from WithAttrs
	send       func(msg string, p journal.Priority, vars map[string]string) error
}

// newJournalHandler writes to the journal through go-systemd's journal.Send.
func newJournalHandler(identifier string, level slog.Leveler) *journalHandler {
	if level == nil {
		level = slog.LevelInfo
	}
	return &journalHandler{identifier: identifier, level: level, fields: map[string]string{}, send: journal.Send}
}

// Enabled implements slog.Handler.
func (h *journalHandler) Enabled(_ context.Context, l slog.Level) bool {
	return l >= h.level.Level()
}

// Handle implements slog.Handler.
func (h *journalHandler) Handle(_ context.Context, r slog.Record) error {
	vars := make(map[string]string, len(h.fields)+r.NumAttrs()+4)
	for k, v := range h.fields {
		vars[k] = v
	}
	r.Attrs(func(a slog.Attr) bool {
		addAttr(vars, h.prefix, a)
		return true
	})
	if h.identifier != "" {
		vars["SYSLOG_IDENTIFIER"] = h.identifier
	}
	if r.PC != 0 {
		f, _ := runtime.CallersFrames([]uintptr{r.PC}).Next()
		vars["CODE_FILE"] = f.File
		vars["CODE_LINE"] = strconv.Itoa(f.Line)
		vars["CODE_FUNC"] = f.Function
	}
	return h.send(r.Message, journalPriority(r.Level), vars)
}

// WithAttrs implements slog.Handler.
func (h *journalHandler) WithAttrs(as []slog.Attr) slog.Handler {
	n := *h
	n.fields = make(map[string]string, len(h.fields)+len(as))
	for k, v := range h.fields {
		n.fields[k] = v
	}
	for _, a := range as {
		addAttr(n.fields, h.prefix, a)
	}
	return &n
}

// WithGroup implements slog.Handler.
func (h *journalHandler) WithGroup(name string) slog.Handler {
	if name == "" {
		return h
	}
	n := *h
	n.prefix = h.prefix + name + "_"
	return &n
}

func addAttr(vars map[string]string, prefix string, a slog.Attr) {
	v := a.Value.Resolve()
	if a.Equal(slog.Attr{}) {
		return
	}
	if v.Kind() == slog.KindGroup {
		p := prefix
		if a.Key != "" {
			p += a.Key + "_"
		}
		for _, g := range v.Group() {
			addAttr(vars, p, g)
		}
		return
	}
	var s string
	switch v.Kind() {
	case slog.KindTime:
		s = v.Time().Format(time.RFC3339Nano)
	default:
		s = v.String()
	}
	vars[journalField(prefix+a.Key)] = s
}

// journalField makes a valid journal field name: A-Z, 0-9 and '_', not
// starting with '_' or a digit (those are reserved or invalid), at most 64
// characters.
func journalField(k string) string {
	var b strings.Builder
	for _, r := range strings.ToUpper(k) {
		if (r >= 'A' && r <= 'Z') || (r >= '0' && r <= '9') || r == '_' {
			b.WriteRune(r)
		} else {
			b.WriteByte('_')
		}
	}
	s := b.String()
	if s == "" || s[0] == '_' || (s[0] >= '0' && s[0] <= '9') {
		s = "F" + s
	}
	if len(s) > 64 {
		s = s[:64]
	}
	return s
}

func journalPriority(l slog.Level) journal.Priority {
	switch {
	case l >= slog.LevelError:
		return journal.PriErr
	case l >= slog.LevelWarn:
		return journal.PriWarning
	case l >= slog.LevelInfo:
		return journal.PriInfo
	default:
		return journal.PriDebug
	}
}
