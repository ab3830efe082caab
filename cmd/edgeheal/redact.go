package main

import (
	"context"
	"fmt"
	"log/slog"
	"regexp"
	"strings"
)

// redactingHandler wraps the agent's log handler so that a secret cannot
// reach a log line by accident, whichever component wrote it: an
// attribute whose key names a secret is replaced by "[redacted]", and in
// every message and string value a URL's user:password@ becomes ***@ and
// a PEM private key block becomes "[redacted private key]". Nothing in
// edgeheal logs a secret on purpose (passwords are read at each connect
// and handed to the client only; URLs with credentials are refused by
// config validation); this is the belt to that brace.
type redactingHandler struct{ h slog.Handler }

func redacting(h slog.Handler) slog.Handler { return redactingHandler{h} }

var (
	urlCredentials = regexp.MustCompile(`([A-Za-z][A-Za-z0-9+.-]*://)[^/@\s"']+@`)
	pemPrivateKey  = regexp.MustCompile(`-----BEGIN [A-Z0-9 ]*PRIVATE KEY-----[\s\S]*?(-----END [A-Z0-9 ]*PRIVATE KEY-----|$)`)
	secretKey      = regexp.MustCompile(`(?i)(password|passwd|secret|token|private_?key|preshared_?key|psk)`)
)

// redactString applies the string rules.
func redactString(s string) string {
	if strings.Contains(s, "://") {
		s = urlCredentials.ReplaceAllString(s, "${1}***@")
	}
	if strings.Contains(s, "PRIVATE KEY-----") {
		s = pemPrivateKey.ReplaceAllString(s, "[redacted private key]")
	}
	return s
}

func redactAttr(a slog.Attr) slog.Attr {
	v := a.Value.Resolve()
	switch {
	case secretKey.MatchString(a.Key) && !strings.HasSuffix(strings.ToLower(a.Key), "_file"):
		return slog.String(a.Key, "[redacted]")
	case v.Kind() == slog.KindGroup:
		g := v.Group()
		out := make([]slog.Attr, len(g))
		for i, x := range g {
			out[i] = redactAttr(x)
		}
		return slog.Attr{Key: a.Key, Value: slog.GroupValue(out...)}
	case v.Kind() == slog.KindString:
		return slog.String(a.Key, redactString(v.String()))
	case v.Kind() == slog.KindAny:
		if s := fmt.Sprint(v.Any()); redactString(s) != s {
			return slog.String(a.Key, redactString(s))
		}
	}
	return slog.Attr{Key: a.Key, Value: v}
}

// Enabled implements slog.Handler.
func (r redactingHandler) Enabled(ctx context.Context, l slog.Level) bool { return r.h.Enabled(ctx, l) }

// Handle implements slog.Handler.
func (r redactingHandler) Handle(ctx context.Context, rec slog.Record) error {
	out := slog.NewRecord(rec.Time, rec.Level, redactString(rec.Message), rec.PC)
	rec.Attrs(func(a slog.Attr) bool {
		out.AddAttrs(redactAttr(a))
		return true
	})
	return r.h.Handle(ctx, out)
}

// WithAttrs implements slog.Handler.
func (r redactingHandler) WithAttrs(as []slog.Attr) slog.Handler {
	out := make([]slog.Attr, len(as))
	for i, a := range as {
		out[i] = redactAttr(a)
	}
	return redactingHandler{r.h.WithAttrs(out)}
}

// WithGroup implements slog.Handler.
func (r redactingHandler) WithGroup(name string) slog.Handler {
	return redactingHandler{r.h.WithGroup(name)}
}
