package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/edgeheal/edgeheal/wire"
)

// errNoAgent matches (errors.Is) the error of fetchStatus when nothing
// answers at the address: no agent is running, or it listens elsewhere.
var errNoAgent = errors.New("no edgeheal agent is answering")

// statusURL turns report.http.listen into the URL of /v1/status: a
// wildcard or empty host becomes the loopback address.
func statusURL(listen string) string {
	if strings.HasPrefix(listen, "http://") || strings.HasPrefix(listen, "https://") {
		return strings.TrimRight(listen, "/") + "/v1/status"
	}
	host, port, err := net.SplitHostPort(listen)
	if err != nil {
		return "http://" + listen + "/v1/status"
	}
	if host == "" || host == "0.0.0.0" || host == "::" {
		host = "127.0.0.1"
	}
	return "http://" + net.JoinHostPort(host, port) + "/v1/status"
}

// fetchStatus reads /v1/status from the agent listening on listen
// (report.http.listen). A refused connection or a missing socket is
// reported as ErrNoAgent with a hint.
func fetchStatus(ctx context.Context, listen string) (wire.LocalStatus, error) {
	url := statusURL(listen)
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return wire.LocalStatus{}, fmt.Errorf("building status request: %w", err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		if errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ENOENT) {
			return wire.LocalStatus{}, fmt.Errorf("%w on %s: is the agent running? (systemctl status edgeheal; report.http.listen must be set)", errNoAgent, url)
		}
		return wire.LocalStatus{}, fmt.Errorf("reading %s: %w", url, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return wire.LocalStatus{}, fmt.Errorf("reading %s: %s: %s", url, resp.Status, strings.TrimSpace(string(b)))
	}
	var s wire.LocalStatus
	if err := json.NewDecoder(io.LimitReader(resp.Body, 8<<20)).Decode(&s); err != nil {
		return wire.LocalStatus{}, fmt.Errorf("decoding %s: %w", url, err)
	}
	return s, nil
}

// writeStatusTable writes s for a human: a header with the node, state,
// readiness, MQTT and outbox, then one row per check. now makes ages
// reproducible in tests.
func writeStatusTable(w io.Writer, s wire.LocalStatus, now time.Time) error {
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
