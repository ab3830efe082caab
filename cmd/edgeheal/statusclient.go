package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/edgeheal/edgeheal/localapi"
	"github.com/edgeheal/edgeheal/wire"
)

// fetchStatus reads /v1/status from the agent's local API on socket
// (report.http.socket), believing only an agent run by root (localapi).
func fetchStatus(ctx context.Context, socket string) (wire.LocalStatus, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	return localapi.New(socket).Status(ctx)
}

// printable is s as the terminal may show it: every control character
// (C0, DEL, C1: what starts an escape sequence), every character that
// turns text around (bidirectional controls) and every byte that is not
// UTF-8 is written as a Go escape (\x1b, \u202e). The agent's answer
// carries what others wrote (pod names, broker errors, events' targets):
// none of it may drive the operator's terminal.
func printable(s string) string {
	var b strings.Builder
	for i, r := range s {
		switch {
		case r == utf8.RuneError && !strings.HasPrefix(s[i:], "\uFFFD"):
			fmt.Fprintf(&b, "\\x%02x", s[i])
		case unsafeRune(r):
			q := strconv.QuoteRune(r)
			b.WriteString(q[1 : len(q)-1])
		default:
			b.WriteRune(r)
		}
	}
	return b.String()
}

// unsafeRune reports whether r may not reach a terminal as it is.
func unsafeRune(r rune) bool {
	return unicode.IsControl(r) || unicode.Is(unicode.Bidi_Control, r) ||
		r == '\u2028' || r == '\u2029' // line and paragraph separators
}

// safeJSON rewrites what encoding/json leaves as it is and a terminal
// would act on (DEL, C1 controls, bidirectional controls: they can only be
// inside strings) as \u escapes.
func safeJSON(b []byte) []byte {
	var out bytes.Buffer
	for len(b) > 0 {
		r, n := utf8.DecodeRune(b)
		if r != '\n' && unsafeRune(r) {
			fmt.Fprintf(&out, "\\u%04x", r)
		} else {
			out.Write(b[:n])
		}
		b = b[n:]
	}
	return out.Bytes()
}

// writeStatusTable writes s for a human: a header with the node, state,
// readiness, MQTT and outbox, then one row per check, every string the
// agent sent made printable. now makes ages reproducible in tests.
func writeStatusTable(w io.Writer, s wire.LocalStatus, now time.Time) error {
	s = printableStatus(s)
	var b strings.Builder
	fmt.Fprintf(&b, "node %s", orDash(s.Node))
	if s.Site != "" {
		fmt.Fprintf(&b, " (site %s)", s.Site)
	}
	fmt.Fprintf(&b, "  version %s", orDash(s.Version))
	if s.ConfigRevision != "" {
		fmt.Fprintf(&b, "  config %s", s.ConfigRevision)
	}
	b.WriteString("\n")
	ready := "yes"
	if !s.Ready {
		ready = "no (" + s.ReadyDetail + ")"
	}
	last := "never"
	if !s.LastProgress.IsZero() {
		last = age(now.Sub(s.LastProgress)) + " ago"
	}
	fmt.Fprintf(&b, "state %s  ready %s  last round %s\n", s.State, ready, last)
	if s.MQTT != nil {
		conn := "disconnected"
		if s.MQTT.Connected {
			conn = "connected"
		}
		fmt.Fprintf(&b, "mqtt %s %s (session %d)", conn, s.MQTT.Broker, s.MQTT.Session)
		if s.MQTT.LastError != "" && !s.MQTT.Connected {
			fmt.Fprintf(&b, ": %s", s.MQTT.LastError)
		}
		b.WriteString("\n")
	} else {
		b.WriteString("mqtt off\n")
	}
	if s.Outbox != nil {
		fmt.Fprintf(&b, "outbox %d queued, %d dropped in total\n", s.Outbox.Depth, s.Outbox.Dropped)
	}
	b.WriteString("\n")
	if _, err := io.WriteString(w, b.String()); err != nil {
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "KIND\tTARGET\tSTATE\tHEALTHY\tSINCE\tLAST ACTION\tDETAIL")
	for _, c := range s.Checks {
		healthy := "no"
		if c.Healthy {
			healthy = "yes"
		}
		since := "-"
		if !c.Since.IsZero() {
			since = age(now.Sub(c.Since))
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", c.Kind, c.Target, c.State, healthy, since,
			orDash(c.LastAction), orDash(oneLine(c.Detail)))
	}
	if len(s.Checks) == 0 {
		fmt.Fprintln(tw, "(no checks configured)\t\t\t\t\t\t")
	}
	return tw.Flush()
}

// printableStatus is s with every string made printable.
func printableStatus(s wire.LocalStatus) wire.LocalStatus {
	p := printable
	s.Node, s.Site, s.Version, s.ConfigRevision = p(s.Node), p(s.Site), p(s.Version), p(s.ConfigRevision)
	s.State, s.ReadyDetail = p(s.State), p(s.ReadyDetail)
	if s.MQTT != nil {
		m := *s.MQTT
		m.Broker, m.ClientID, m.LastError = p(m.Broker), p(m.ClientID), p(m.LastError)
		s.MQTT = &m
	}
	checks := make([]wire.Check, len(s.Checks))
	for i, c := range s.Checks {
		c.Kind, c.Target, c.State, c.LastAction, c.Detail = p(c.Kind), p(c.Target), p(c.State), p(c.LastAction), p(c.Detail)
		checks[i] = c
	}
	s.Checks = checks
	return s
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func oneLine(s string) string {
	s = strings.ReplaceAll(s, "\n", " ")
	if len(s) > 80 {
		s = s[:77] + "..."
	}
	return s
}

// age formats a duration the way a person reads it: 42s, 5m3s, 3h12m, 2d4h.
func age(d time.Duration) string {
	if d < 0 {
		d = 0
	}
	switch {
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%dm%ds", int(d.Minutes()), int(d.Seconds())%60)
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh%dm", int(d.Hours()), int(d.Minutes())%60)
	default:
		return fmt.Sprintf("%dd%dh", int(d.Hours())/24, int(d.Hours())%24)
	}
}
