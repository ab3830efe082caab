package web

import (
	"encoding/csv"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/edgeheal/edgeheal/fleet"
)

// NodesPage is the answer of /api/v1/nodes: the nodes the filters
// select, from Offset, at most Limit of them, and how many matched.
type NodesPage struct {
	Matched int          `json:"matched"`
	Offset  int          `json:"offset"`
	Limit   int          `json:"limit"`
	Nodes   []fleet.Node `json:"nodes"`
}

// SitesPage is the answer of /api/v1/sites.
type SitesPage struct {
	Sites []fleet.Site `json:"sites"`
}

// APILimit is how many nodes /api/v1/nodes answers unless asked for more.
const APILimit = 500

func (s *server) apiNodes(w http.ResponseWriter, r *http.Request) {
	f, err := parseFilter(r.URL.Query(), APILimit)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	nodes, matched := s.opts.Store.ListAt(f, s.opts.Now())
	writeJSON(w, NodesPage{Matched: matched, Offset: f.Offset, Limit: f.Limit, Nodes: nodes})
}

func (s *server) apiNode(w http.ResponseWriter, r *http.Request) {
	d, ok := s.opts.Store.Detail(r.PathValue("name"), s.opts.Now())
	if !ok {
		http.Error(w, "no node "+r.PathValue("name")+" in the fleet view", http.StatusNotFound)
		return
	}
	writeJSON(w, d)
}

func (s *server) apiSites(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, SitesPage{Sites: s.opts.Store.Summary(s.opts.Now()).Sites})
}

func (s *server) apiSummary(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, s.opts.Store.Summary(s.opts.Now()))
}

// NodesCSVHeader is the first line of /api/v1/nodes.csv.
var NodesCSVHeader = []string{"node", "site", "state", "since", "last_seen", "version", "config_revision", "checks_healthy",
	"checks_total", "open_incidents", "gave_up", "availability_30d", "last_action"}

// apiNodesCSV exports every node the filters select (limit and offset
// apply only when given).
func (s *server) apiNodesCSV(w http.ResponseWriter, r *http.Request) {
	f, err := parseFilter(r.URL.Query(), 0)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	nodes, _ := s.opts.Store.ListAt(f, s.opts.Now())
	cw := startCSV(w, "edgeheal-nodes.csv", NodesCSVHeader)
	for _, n := range nodes {
		gaveUp := 0
		for _, in := range n.Incidents {
			if in.GaveUp {
				gaveUp++
			}
		}
		last := ""
		if n.LastAction != nil {
			last = n.LastAction.Action + " " + n.LastAction.Target + ": " + n.LastAction.Result
		}
		_ = cw.Write(cells(n.Name, n.Site, n.State, stamp(n.Since), stamp(n.LastSeen), n.Version, n.ConfigRevision,
			strconv.Itoa(n.ChecksHealthy), strconv.Itoa(n.ChecksTotal), strconv.Itoa(len(n.Incidents)), strconv.Itoa(gaveUp),
			share(n.Availability), last))
	}
	cw.Flush()
}

func (s *server) apiSitesCSV(w http.ResponseWriter, _ *http.Request) {
	cw := startCSV(w, "edgeheal-sites.csv", append([]string{"site", "nodes"}, append(fleet.States, "open_incidents", "gave_up", "availability_30d")...))
	for _, site := range s.opts.Store.Summary(s.opts.Now()).Sites {
		row := []string{site.Name, strconv.Itoa(site.Nodes)}
		for _, st := range fleet.States {
			row = append(row, strconv.Itoa(site.ByState[st]))
		}
		_ = cw.Write(cells(append(row, strconv.Itoa(site.OpenIncidents), strconv.Itoa(site.GaveUp), share(site.Availability))...))
	}
	cw.Flush()
}

func startCSV(w http.ResponseWriter, name string, header []string) *csv.Writer {
	w.Header().Set("Content-Type", "text/csv; charset=utf-8")
	w.Header().Set("Content-Disposition", fmt.Sprintf("attachment; filename=%q", name))
	cw := csv.NewWriter(w)
	_ = cw.Write(header)
	return cw
}

// cells defuses what a spreadsheet would run as a formula: a cell a node
// named that starts with = + - @ gets a leading quote.
func cells(v ...string) []string {
	for i, c := range v {
		if c != "" && strings.ContainsRune("=+-@\t\r", rune(c[0])) {
			v[i] = "'" + c
		}
	}
	return v
}

func stamp(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format(time.RFC3339)
}

func share(v float64) string {
	if v < 0 {
		return ""
	}
	return strconv.FormatFloat(v, 'f', 6, 64)
}
