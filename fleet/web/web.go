// Package web serves a fleet.Store over HTTP: the console (what needs a
// human first, the sites, the last 30 days as charts, the node table with
// its filters), each node's page with its incidents on a timeline, the
// JSON and CSV API under /api/v1, Prometheus /metrics, /healthz and
// /v1/fleet. Server-rendered HTML and SVG from the process itself, with
// one small script of its own that keeps the page current; nothing is
// fetched from elsewhere, so it works offline. Every request but /healthz
// passes the door (auth.go) unless the operator turned it off.
package web

import (
	"embed"
	"encoding/json"
	"fmt"
	"html/template"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/edgeheal/edgeheal/fleet"
)

//go:embed templates/*.html static/*
var templateFS embed.FS

// DefaultLimit is how many rows the fleet table shows unless asked for
// more: with the triage, the sites and the charts, the first screen stays
// under 100 KB at any fleet size.
const DefaultLimit = 50

// MaxLimit bounds the rows of one page or API answer (the CSV export has
// every row).
const MaxLimit = 10000

// Options configure the handler. Store is required.
type Options struct {
	Store   *fleet.Store
	Version string
	Logger  *slog.Logger
	Now     func() time.Time
	// Auth is the door; Auth.Disabled lets every request in.
	Auth fleet.Auth
	// Subscription labels the view's events metric group (metrics.go).
	Subscription Subscription
	// Done ends the live streams (the server is shutting down).
	Done <-chan struct{}
}

type server struct {
	opts  Options
	fleet *template.Template
	node  *template.Template
	sites *template.Template
}

// Handler serves the console, the API, /metrics, /healthz and /v1/fleet.
func Handler(opts Options) http.Handler {
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	s := &server{opts: opts}
	funcs := template.FuncMap{"utc": utc, "ago": func(t time.Time) string { return ago(opts.Now(), t) }, "pct": pct, "dur": dur, "duru": func(v uint64) string { return dur(float64(v)) },
		"avail": func(h, d, g int64) float64 {
			if h+d+g == 0 {
				return -1
			}
			return float64(h) / float64(h+d+g)
		},
		"commas": func(n int) string { return commas(n) }, "hhmm": func(t time.Time) string { return t.UTC().Format("15:04") }}
	parse := func(name string) *template.Template {
		return template.Must(template.New(name).Funcs(funcs).ParseFS(templateFS, "templates/layout.html", "templates/"+name))
	}
	s.fleet, s.node, s.sites = parse("fleet.html"), parse("node.html"), parse("sites.html")

	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		NewCollector(opts.Store, opts.Version, opts.Now, opts.Subscription))
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", s.fleetPage)
	mux.HandleFunc("GET /sites", s.sitesPage)
	mux.HandleFunc("GET /node/{name}", s.nodePage)
	mux.Handle("GET /static/", http.FileServerFS(templateFS))
	mux.HandleFunc("GET /api/v1/nodes", s.apiNodes)
	mux.HandleFunc("GET /api/v1/nodes.csv", s.apiNodesCSV)
	mux.HandleFunc("GET /api/v1/nodes/{name}", s.apiNode)
	mux.HandleFunc("GET /api/v1/sites", s.apiSites)
	mux.HandleFunc("GET /api/v1/sites.csv", s.apiSitesCSV)
	mux.HandleFunc("GET /api/v1/summary", s.apiSummary)
	mux.HandleFunc("GET /api/v1/stream", s.stream)
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
	mux.HandleFunc("GET /v1/fleet", s.health)
	var h http.Handler = mux
	if !opts.Auth.Disabled {
		h = newGuard(opts.Auth, opts.Logger).wrap(mux, opts.Now)
	}
	return secureHeaders(h)
}

// secureHeaders keeps the page to itself: its own script and styles only,
// no framing, no guessing of types.
func secureHeaders(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Security-Policy", "default-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; frame-ancestors 'none'")
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "same-origin")
		next.ServeHTTP(w, r)
	})
}

// parseFilter reads the table's and the API's filters from a query; a
// value that cannot be read is an error naming the parameter.
func parseFilter(q url.Values, limit int) (fleet.Filter, error) {
	f := fleet.Filter{Site: q.Get("site"), State: q.Get("state"), Name: strings.TrimSpace(q.Get("node")),
		Sort: q.Get("sort"), Limit: limit, GaveUp: q.Get("gave_up") != "", Incident: q.Get("incident") != ""}
	if f.Sort == "" {
		f.Sort = fleet.SortChanged
	}
	if !contains(fleet.Sorts, f.Sort) {
		return f, fmt.Errorf("sort=%q: one of %s", f.Sort, strings.Join(fleet.Sorts, ", "))
	}
	if f.State != "" && !contains(fleet.States, f.State) {
		return f, fmt.Errorf("state=%q: one of %s", f.State, strings.Join(fleet.States, ", "))
	}
	if v := q.Get("silent"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d < 0 {
			return f, fmt.Errorf("silent=%q: a duration such as 15m or 2h", v)
		}
		f.SilentFor = d
	}
	for _, p := range []struct {
		name string
		to   *int
		max  int
	}{{"limit", &f.Limit, MaxLimit}, {"offset", &f.Offset, 1 << 30}} {
		if v := q.Get(p.name); v != "" {
			n, err := strconv.Atoi(v)
			if err != nil || n < 0 || n > p.max {
				return f, fmt.Errorf("%s=%q: a number from 0 to %d", p.name, v, p.max)
			}
			*p.to = n
		}
	}
	return f, nil
}

func contains(list []string, v string) bool {
	for _, s := range list {
		if s == v {
			return true
		}
	}
	return false
}

func (s *server) render(w http.ResponseWriter, t *template.Template, data any) {
	var b strings.Builder
	if err := t.Execute(&b, data); err != nil {
		s.opts.Logger.Error("rendering page", "err", err)
		http.Error(w, "rendering the page failed", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	fmt.Fprint(w, b.String())
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}

func (s *server) health(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, s.opts.Store.Health(s.opts.Now()))
}

// stream tells the page when the fleet changed (server-sent events): an
// event with the store's generation at most once a second, one more once
// the fleet has been still for 2 s (the summary the page shows is at most
// a second old: the last change is never missed), and a comment every
// 15 s to keep proxies from closing it. The page then fetches itself
// again and replaces what changed.
func (s *server) stream(w http.ResponseWriter, r *http.Request) {
	fl, ok := w.(http.Flusher)
	if !ok {
		http.Error(w, "streaming unsupported", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-store")
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	var last uint64
	quiet := 0
	for ctx := r.Context(); ; {
		switch gen := s.opts.Store.Generation(); {
		case gen != last:
			last, quiet = gen, 0
			fmt.Fprintf(w, "data: %d\n\n", gen)
		case quiet == 2:
			fmt.Fprintf(w, "data: %d\n\n", gen)
		case quiet%15 == 14:
			fmt.Fprint(w, ": still here\n\n")
		}
		quiet++
		fl.Flush()
		select {
		case <-ctx.Done():
			return
		case <-s.opts.Done:
			return
		case <-tick.C:
		}
	}
}

func utc(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format("2006-01-02 15:04:05Z")
}

// ago is how long before now t was, rounded for a person.
func ago(now, t time.Time) string {
	if t.IsZero() {
		return "never"
	}
	d := now.Sub(t)
	switch {
	case d < 0:
		return "just now"
	case d < time.Minute:
		return fmt.Sprintf("%ds ago", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%dm ago", int(d.Minutes()))
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh%02dm ago", int(d.Hours()), int(d.Minutes())%60)
	}
	return fmt.Sprintf("%dd ago", int(d.Hours()/24))
}

// commas writes n with thousands separators.
func commas(n int) string {
	s := strconv.Itoa(n)
	for i := len(s) - 3; i > 0 && s[i-1] != '-'; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}
