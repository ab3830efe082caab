package web

import (
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func get(t *testing.T, h http.Handler, path string) (int, string) {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", path, nil))
	b, _ := io.ReadAll(rec.Body)
	return rec.Code, string(b)
}

var rowNode = regexp.MustCompile(`<tr>\s*<td><a href="/node/([^"]+)">`)

func rows(page string) []string {
	var out []string
	for _, m := range rowNode.FindAllStringSubmatch(page, -1) {
		out = append(out, m[1])
	}
	return out
}

func TestTheFleetTableFiltersAndSorts(t *testing.T) {
	h := Handler(Options{Store: fixture(t), Now: func() time.Time { return now }})
	for _, tt := range []struct {
		query string
		want  []string
	}{
		{"/", []string{"p7-gw-02", "p9-gw-03", "p7-gw-01", "p7-gw-03", "p9-gw-01", "p9-gw-02"}}, // last change first
		{"/?site=plant-9", []string{"p9-gw-03", "p9-gw-01", "p9-gw-02"}},
		{"/?state=lost", []string{"p9-gw-03"}},
		{"/?site=plant-7&state=online&sort=name", []string{"p7-gw-01", "p7-gw-03"}},
		{"/?node=gw-0&sort=name&limit=2", []string{"p7-gw-01", "p7-gw-02"}},
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
	if !strings.Contains(page, "showing 2 of 6 matching nodes") {
		t.Error("a limited table does not say how many matched")
	}
	if strings.Contains(page, "<script") || strings.Contains(page, "http://") || strings.Contains(page, "https://") {
		t.Error("the page has a script or loads something from elsewhere")
	}
}

func TestTheNodePageShowsItsEventsInTimeOrder(t *testing.T) {
	h := Handler(Options{Store: fixture(t), Now: func() time.Time { return now }})
	code, page := get(t, h, "/node/p7-gw-02")
	if code != 200 {
		t.Fatal(code)
	}
	i, j := strings.Index(page, "wg0/AbCd dark: probe missed"), strings.LastIndex(page, "handshake on wg0/AbCd changed")
	if i < 0 || j < 0 || i > j {
		t.Errorf("incident at %d, action at %d: want both, incident first", i, j)
	}
	for _, want := range []string{`id="state">degraded`, "action 1", "incident 1", "<td>peer</td><td>wg0/AbCd</td>"} {
		if !strings.Contains(page, want) {
			t.Errorf("the node page lacks %q", want)
		}
	}
	if code, _ := get(t, h, "/node/nobody"); code != 404 {
		t.Errorf("unknown node: %d, want 404", code)
	}
}
