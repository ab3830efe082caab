package web

import (
	"encoding/csv"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/edgeheal/edgeheal/fleet"
	"github.com/edgeheal/edgeheal/wire"
)

func get(t *testing.T, h http.Handler, path string) (int, string) {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", path, nil))
	b, _ := io.ReadAll(rec.Body)
	return rec.Code, string(b)
}

var tags = regexp.MustCompile(`<[^>]*>`)

var rowNode = regexp.MustCompile(`<tr>\s*<td><a href="/node/([^"]+)">`)

func rows(page string) []string {
	var out []string
	for _, m := range rowNode.FindAllStringSubmatch(page, -1) {
		out = append(out, m[1])
	}
	return out
}

func TestTheFleetTableFiltersAndSorts(t *testing.T) {
	h := open(fixture(t))
	for _, tt := range []struct {
		query string
		want  []string
	}{
		{"/", []string{"p7-gw-02", "p9-gw-03", "p7-gw-01", "p7-gw-03", "p9-gw-01", "p9-gw-02"}}, // last change first
		{"/?site=plant-9", []string{"p9-gw-03", "p9-gw-01", "p9-gw-02"}},
		{"/?state=lost", []string{"p9-gw-03"}},
		{"/?site=plant-7&state=online&sort=name", []string{"p7-gw-01", "p7-gw-03"}},
		{"/?node=gw-0&sort=name&limit=2", []string{"p7-gw-01", "p7-gw-02"}},
		{"/?node=gw-0&sort=name&limit=2&offset=2", []string{"p7-gw-03", "p9-gw-01"}},
		{"/?incident=1", []string{"p7-gw-02"}},
		{"/?silent=10m&sort=seen", []string{"p9-gw-03", "p9-gw-02", "p9-gw-01"}},
	} {
		code, page := get(t, h, tt.query)
		if code != 200 {
			t.Fatalf("%s: %d", tt.query, code)
		}
		if diff := cmp.Diff(tt.want, rows(page)); diff != "" {
			t.Errorf("%s rows (-want +got):\n%s", tt.query, diff)
		}
	}
	_, page := get(t, h, "/?node=gw-0&limit=2")
	if !strings.Contains(page, "1–2 of 6 matching nodes") || !strings.Contains(page, `href="/?limit=2&amp;node=gw-0&amp;offset=2">next</a>`) {
		t.Error("a limited table does not say how many matched or link the next page")
	}
	if strings.Contains(page, "http://") || strings.Contains(page, "https://") || strings.Count(page, "<script") != 1 ||
		!strings.Contains(page, `<script src="/static/console.js" defer></script>`) {
		t.Error("the page loads something from elsewhere, or a script other than its own")
	}
	if code, page := get(t, h, "/?sort=colour"); code != 200 || !strings.Contains(page, "sort=&#34;colour&#34;: one of") {
		t.Errorf("a bad filter: %d, want the page saying what is wrong", code)
	}
}

func TestTheNodePageShowsItsEventsInTimeOrder(t *testing.T) {
	h := open(fixture(t))
	code, page := get(t, h, "/node/p7-gw-02")
	if code != 200 {
		t.Fatal(code)
	}
	i, j := strings.Index(page, "wg0/AbCd dark: probe missed"), strings.LastIndex(page, "handshake on wg0/AbCd changed")
	if i < 0 || j < 0 || i > j {
		t.Errorf("incident at %d, action at %d: want both, incident first", i, j)
	}
	for _, want := range []string{`id="state">degraded`, "action 1", "incident 1", "<td>peer</td><td>wg0/AbCd</td>", "published no history"} {
		if !strings.Contains(page, want) {
			t.Errorf("the node page lacks %q", want)
		}
	}
	if code, _ := get(t, h, "/node/nobody"); code != 404 {
		t.Errorf("unknown node: %d, want 404", code)
	}
}

// The console during a site outage: the triage names the site once, the
// gave-up node first; the rollup and the charts are there.
func TestTheConsoleDuringASiteOutage(t *testing.T) {
	_, page := get(t, open(outage(t)), "/")
	triage := page[strings.Index(page, `<section id="triage"`):strings.Index(page, `<section id="sites"`)]
	if n := strings.Count(tags.ReplaceAllString(triage, ""), "site-3"); n != 1 {
		t.Errorf("the triage names site-3 %d times, want once:\n%s", n, triage)
	}
	gaveUp, site, lone := strings.Index(triage, "site-1-n03"), strings.Index(triage, "12 of 12 lost since 11:40"), strings.Index(triage, "site-2-n04")
	if gaveUp < 0 || site < gaveUp || lone < site || !strings.Contains(triage, "site-1-n05") {
		t.Errorf("the triage: gave-up at %d, the site at %d, the lone lost node at %d; want them in that order:\n%s", gaveUp, site, lone, triage)
	}
	for _, want := range []string{`id="availability-chart"`, "<polyline", `id="incidents-chart"`, `id="outage-chart"`, "least available nodes",
		`<a href="/?site=site-3">site-3</a>`} {
		if !strings.Contains(page, want) {
			t.Errorf("the console lacks %q", want)
		}
	}
	_, node := get(t, open(outage(t)), "/node/site-1-n03")
	for _, want := range []string{`id="timeline"`, "gave up", "reassert → handshake → rebind → bounce → restart-unit", "healed by handshake"} {
		if !strings.Contains(node, want) {
			t.Errorf("the node page lacks %q", want)
		}
	}
}

// The API: the page's filters, a node with its history in the wire
// format, the sites, CSV that a spreadsheet cannot run.
func TestTheAPI(t *testing.T) {
	s := outage(t)
	apply(t, s, "=cmd|calc", "status", now, wire.Status{V: 1, State: "online", Session: 1, TS: now, Site: "@site"})
	h := open(s)
	var nodes NodesPage
	decode(t, h, "/api/v1/nodes?state=lost&site=site-3&limit=5", &nodes)
	if nodes.Matched != 12 || len(nodes.Nodes) != 5 || nodes.Nodes[0].Site != "site-3" {
		t.Errorf("lost nodes of site-3: %d matched, %d given", nodes.Matched, len(nodes.Nodes))
	}
	var d fleet.Detail
	decode(t, h, "/api/v1/nodes/site-1-n03", &d)
	if want := history("site-1-n03", "site-1", 70, 6, "gave-up"); d.History == nil || !cmp.Equal(want.Incidents, d.History.Incidents) || len(d.History.Days.Healthy) != 30 {
		t.Errorf("the node's history: %+v", d.History)
	}
	var sites SitesPage
	decode(t, h, "/api/v1/sites", &sites)
	if len(sites.Sites) != 4 || sites.Sites[0].Name != "site-3" || sites.Sites[0].ByState["lost"] != 12 {
		t.Errorf("sites: %+v", sites.Sites)
	}
	code, body := get(t, h, "/api/v1/nodes.csv?sort=name")
	recs, err := csv.NewReader(strings.NewReader(body)).ReadAll()
	if code != 200 || err != nil || len(recs) != 28 || !cmp.Equal(recs[0], NodesCSVHeader) || recs[1][0] != "'=cmd|calc" || recs[1][1] != "'@site" {
		t.Errorf("CSV: %d, %v, %d lines, first %v", code, err, len(recs), recs[:min(len(recs), 2)])
	}
	for _, bad := range []string{"/api/v1/nodes?limit=x", "/api/v1/nodes?state=asleep", "/api/v1/nodes?silent=soon"} {
		if code, _ := get(t, h, bad); code != 400 {
			t.Errorf("%s: %d, want 400", bad, code)
		}
	}
	if code, _ := get(t, h, "/api/v1/nodes/nobody"); code != 404 {
		t.Errorf("an unknown node: %d, want 404", code)
	}
}

func decode(t *testing.T, h http.Handler, path string, v any) {
	t.Helper()
	code, body := get(t, h, path)
	if code != 200 {
		t.Fatalf("%s: %d %s", path, code, body)
	}
	if err := json.Unmarshal([]byte(body), v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}

// What a node names is escaped wherever the console shows it.
func TestHostileStringsAreEscaped(t *testing.T) {
	s := fleet.NewStore("edgeheal/v1")
	evil := `<img src=x onerror=alert(1)>`
	apply(t, s, "n1", "status", now, wire.Status{V: 1, State: "degraded", Session: 1, TS: now, Site: evil, Version: evil,
		Checks: &wire.ChecksSummary{Total: 1, Items: []wire.Check{{Kind: "peer", Target: evil, State: "down", Detail: evil}}}})
	h := history("n1", evil, 100, 3, "gave-up")
	h.Incidents[1].Diagnosis, h.Targets[0].Target = evil, evil
	apply(t, s, "n1", "history", now, h)
	for _, path := range []string{"/", "/node/n1", "/sites", "/?site=" + url.QueryEscape(evil)} {
		if _, page := get(t, open(s), path); strings.Contains(page, evil) || !strings.Contains(page, "&lt;img") {
			t.Errorf("%s shows a node's string unescaped (or not at all)", path)
		}
	}
}

// The first screen stays under 100 KB however large the fleet: 20,000
// nodes in 2,000 sites, hundreds of them in trouble.
func TestTheFirstScreenIsSmallAtAnySize(t *testing.T) {
	s := fleet.NewStore("edgeheal/v1")
	for i := range 20000 {
		name, site := fmt.Sprintf("node-%05d-with-a-long-name", i), fmt.Sprintf("site-%04d", i%2000)
		st := wire.Status{V: 1, State: "online", Session: 1, TS: now, Site: site, Version: "1.4.0"}
		if i%50 == 0 {
			st.State, st.TS = "lost", time.Time{}
		}
		b, _ := json.Marshal(st)
		s.Apply(fleet.Message{Topic: "edgeheal/v1/" + name + "/status", Payload: b, Received: now.Add(-time.Duration(i%900) * time.Minute)})
		if i%40 == 1 {
			e, _ := json.Marshal(wire.EventMessage{V: 1, Event: wire.Event{ID: "g", Time: now, Kind: "gave-up", Target: "wg0/AbCdEfGh", Summary: strings.Repeat("x", 200)}})
			s.Apply(fleet.Message{Topic: "edgeheal/v1/" + name + "/event", Payload: e, Received: now})
		}
	}
	for _, path := range []string{"/", "/?state=lost", "/?gave_up=1&sort=site"} {
		if _, page := get(t, open(s), path); len(page) > 100_000 {
			t.Errorf("%s: %d bytes, want at most 100 KB", path, len(page))
		} else if path == "/" {
			t.Logf("the first screen of 20,000 nodes in 2,000 sites: %d bytes", len(page))
		}
	}
}
