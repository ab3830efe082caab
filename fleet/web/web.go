// Package web serves a fleet.Store over HTTP: the fleet page (a table to
// filter by site and state and sort by last change), each node's page
// with its incidents, checks, actions and events in time order,
// Prometheus /metrics, /healthz and /v1/fleet. Plain HTML from the
// process itself: no JavaScript, nothing fetched from elsewhere, so it
// works offline.
package web

import (
	"embed"
	"encoding/json"
	"fmt"
	"html/template"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/edgeheal/edgeheal/fleet"
)

//go:embed templates/*.html
var templateFS embed.FS

// DefaultLimit is how many rows the fleet table shows unless asked for
// more: ten thousand rows are a page no browser scrolls well.
const DefaultLimit = 500

// Options configure the handler. Store is required.
type Options struct {
	Store   *fleet.Store
	Version string
	Logger  *slog.Logger
	Now     func() time.Time
}

type server struct {
	opts  Options
	fleet *template.Template
	node  *template.Template
}

// Handler serves the page, the node pages, /metrics, /healthz and /v1/fleet.
func Handler(opts Options) http.Handler {
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	s := &server{opts: opts}
	funcs := template.FuncMap{"utc": utc, "ago": func(t time.Time) string { return ago(opts.Now(), t) }}
	s.fleet = template.Must(template.New("fleet.html").Funcs(funcs).ParseFS(templateFS, "templates/layout.html", "templates/fleet.html"))
	s.node = template.Must(template.New("node.html").Funcs(funcs).ParseFS(templateFS, "templates/layout.html", "templates/node.html"))

	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		NewCollector(opts.Store, opts.Version, opts.Now))
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", s.fleetPage)
	mux.HandleFunc("GET /node/{name}", s.nodePage)
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
	mux.HandleFunc("GET /v1/fleet", s.health)
	return mux
}

type stateCount struct {
	Name  string
	Count int
}

type sortChoice struct{ Value, Label string }

func (s *server) fleetPage(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	f := fleet.Filter{Site: q.Get("site"), State: q.Get("state"), Name: strings.TrimSpace(q.Get("node")), Sort: q.Get("sort"), Limit: DefaultLimit}
	if f.Sort == "" {
		f.Sort = fleet.SortChanged
	}
	if n, err := strconv.Atoi(q.Get("limit")); err == nil && n > 0 {
		f.Limit = n
	}
	now := s.opts.Now()
	h := s.opts.Store.Health(now)
	nodes, matched := s.opts.Store.ListAt(f, now)
	var states []stateCount
	for _, st := range fleet.States {
		if h.ByState[st] > 0 || st != fleet.StateUnknown {
			states = append(states, stateCount{st, h.ByState[st]})
		}
	}
	s.render(w, s.fleet, map[string]any{
		"Title": "edgeheal fleet", "Health": h, "States": states, "AllStates": fleet.States, "Sites": s.opts.Store.Sites(),
		"Filter": f, "Nodes": nodes, "Matched": matched,
		"Sorts": []sortChoice{{fleet.SortChanged, "last change first"}, {fleet.SortName, "name"}, {fleet.SortSeen, "silent longest first"}},
	})
}

func (s *server) nodePage(w http.ResponseWriter, r *http.Request) {
	now := s.opts.Now()
	d, ok := s.opts.Store.Detail(r.PathValue("name"), now)
	if !ok {
		http.Error(w, "no node "+r.PathValue("name")+" in the fleet view", http.StatusNotFound)
		return
	}
	s.render(w, s.node, map[string]any{"Title": "edgeheal node " + d.Name, "Health": s.opts.Store.Health(now), "Node": d})
}

func (s *server) render(w http.ResponseWriter, t *template.Template, data any) {
	var b strings.Builder
	if err := t.Execute(&b, data); err != nil {
		s.opts.Logger.Error("rendering page", "err", err)
		http.Error(w, "rendering the page failed", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	fmt.Fprint(w, b.String())
}

func (s *server) health(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(s.opts.Store.Health(s.opts.Now()))
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
