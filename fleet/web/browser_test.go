package web

// The console in a real browser: Debian's chromium, headless, driven over
// the DevTools protocol by chromedp.

import (
	"context"
	"flag"
	"math"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/edgeheal/edgeheal/fleet"
	"github.com/edgeheal/edgeheal/wire"
)

var screenshot = flag.String("screenshot", "", "also write the console's and a node page's screenshots into this directory (docs/images)")

const chromiumInstall = "apt-get install -y --no-install-recommends chromium"

func browser(t *testing.T) context.Context {
	t.Helper()
	path, err := exec.LookPath("chromium")
	if err != nil {
		t.Skipf("chromium is not installed (make test-deps installs it): %s", chromiumInstall)
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(path), chromedp.NoSandbox, // as root, chromium refuses its sandbox
		chromedp.WindowSize(1280, 900), chromedp.Flag("user-data-dir", t.TempDir()))
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(actx)
	ctx, cancelTimeout := context.WithTimeout(ctx, time.Minute)
	t.Cleanup(func() { cancelTimeout(); cancel(); cancelAlloc() }) // ends chromium, which chromedp started
	return ctx
}

func must(t *testing.T, what string, err error) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

func texts(t *testing.T, ctx context.Context, css string) []string {
	t.Helper()
	out, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](`Array.from(document.querySelectorAll("`+css+`")).map(e => e.innerText)`))
	must(t, "reading "+css, err)
	return out
}

// During a site outage the triage names the site once and lists the node
// where edgeheal gave up first; the charts are drawn; the filter form
// works as a person uses it; a node's page shows its incidents.
func TestTheConsoleInAHeadlessBrowser(t *testing.T) {
	srv := httptest.NewServer(open(outage(t)))
	t.Cleanup(srv.Close) // after the browser's cleanup: its live stream ends with it
	ctx := browser(t)

	must(t, "loading the console", chromedp.Do(ctx, chromedp.Navigate(srv.URL+"/"), chromedp.WaitVisible(chromedp.ID("triage"))))
	consolePNG, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	must(t, "taking a screenshot", err)
	items := texts(t, ctx, "#triage li")
	if len(items) < 3 || !strings.Contains(items[0], "gave up") || !strings.Contains(items[0], "site-1-n03") {
		t.Errorf("the triage: %q; want the gave-up node site-1-n03 first", items)
	}
	if n := strings.Count(strings.Join(items, "\n"), "site-3"); n != 1 {
		t.Errorf("the triage names site-3 %d times, want once: %q", n, items)
	}
	// A chart is drawn: a line through the 30 days, with a size on screen.
	drawn, err := chromedp.Run(ctx, chromedp.Evaluate[[]float64](`(() => {
		const l = document.querySelector("#availability-chart polyline"), r = l.getBoundingClientRect();
		return [l.getAttribute("points").trim().split(/\s+/).length, r.width, r.height,
			document.querySelectorAll("#incidents-chart rect.bar").length];
	})()`))
	must(t, "reading the chart", err)
	if drawn[0] != 30 || drawn[1] < 300 || drawn[2] <= 0 || drawn[3] != 30 {
		t.Errorf("the availability chart has %v points, %v×%v px, and %v incident bars; want 30 points, drawn, and 30 bars", drawn[0], drawn[1], drawn[2], drawn[3])
	}

	must(t, "filtering", chromedp.Do(ctx,
		chromedp.SetValue(chromedp.CSS(`select[name="site"]`), "site-3"),
		chromedp.Click(chromedp.CSS(`#filter button`)),
		chromedp.WaitNotPresent(chromedp.CSS(`#nodes a[href="/node/site-1-n03"]`)),
	))
	if shown := texts(t, ctx, "#nodes tbody tr td:nth-child(2)"); len(shown) != 12 || strings.Join(shown, "") != strings.Repeat("site-3", 12) {
		t.Errorf("after choosing site-3: sites %q, want site-3's 12 nodes", shown)
	}

	must(t, "opening a node", chromedp.Do(ctx, chromedp.Navigate(srv.URL+"/node/site-1-n03"), chromedp.WaitVisible(chromedp.ID("timeline"))))
	nodePNG, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	must(t, "taking a screenshot", err)
	if bars := texts(t, ctx, "#timeline rect.inc"); len(bars) != 6 {
		t.Errorf("the timeline has %d incidents, want 6", len(bars))
	}
	if rows := texts(t, ctx, "#hist-incidents tbody tr td:last-child"); len(rows) != 6 || rows[5] != "gave up" {
		t.Errorf("the incidents' endings: %q; want 6, the newest given up on", rows)
	}
	if *screenshot != "" {
		for name, png := range map[string][]byte{"fleet-console.png": consolePNG, "fleet-node-page.png": nodePNG} {
			must(t, "writing "+name, os.WriteFile(filepath.Join(*screenshot, name), png, 0o644))
		}
	}
}

// The page updates itself when a node changes state, and keeps its
// filters and its scroll.
func TestTheConsoleUpdatesItself(t *testing.T) {
	s := outage(t)
	srv := httptest.NewServer(open(s))
	t.Cleanup(srv.Close)
	ctx := browser(t)
	must(t, "loading the console", chromedp.Do(ctx, chromedp.Navigate(srv.URL+"/?site=site-1&sort=name"), chromedp.WaitVisible(chromedp.ID("nodes"))))
	top := `document.querySelector("#nodes").getBoundingClientRect().top`
	before, err := chromedp.Run(ctx, chromedp.Evaluate[float64](`window.scrollTo(0, 300), `+top))
	must(t, "scrolling", err)
	row := `document.querySelector('#nodes a[href="/node/site-1-n00"]').closest("tr").querySelector(".state").innerText`
	if st, err := chromedp.Run(ctx, chromedp.Evaluate[string](row)); err != nil || st != "online" {
		t.Fatalf("site-1-n00 shows %q (%v), want online", st, err)
	}
	apply(t, s, "site-1-n00", "status", time.Now(), wire.Status{V: 1, State: wire.StateLost, Session: 2, Site: "site-1"})
	triage := `document.querySelector("#triage").innerText.includes("site-1-n00")`
	deadline := time.Now().Add(20 * time.Second)
	for {
		st, err := chromedp.Run(ctx, chromedp.Evaluate[string](row))
		named, _ := chromedp.Run(ctx, chromedp.Evaluate[bool](triage))
		if err == nil && st == fleet.StateLost && named {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("20 s after site-1-n00 was lost the page shows it %q (%v), in the triage: %v", st, err, named)
		}
		time.Sleep(200 * time.Millisecond)
	}
	// The triage grew by a line above the table; the table stays where the
	// person had scrolled it.
	kept, err := chromedp.Run(ctx, chromedp.Evaluate[[]any](`[document.querySelector('select[name="site"]').value, window.scrollY, `+top+`]`))
	must(t, "reading the page", err)
	if kept[0] != "site-1" || kept[1].(float64) < 300 || math.Abs(kept[2].(float64)-before) > 2 {
		t.Errorf("after the update: site filter %v, scroll %v, the table's top at %v px (before: %v); want site-1 and the table where it was", kept[0], kept[1], kept[2], before)
	}
}

// With the door on, the browser gets nothing of the fleet without a user,
// and the console with one.
func TestTheDoorInABrowser(t *testing.T) {
	auth := fleet.Auth{UsersFile: usersFile(t)}
	srv := httptest.NewServer(Handler(Options{Store: outage(t), Now: func() time.Time { return now }, Auth: auth}))
	t.Cleanup(srv.Close)
	ctx := browser(t)
	// Headless chromium has no one to ask for a password: it ends the
	// navigation with ERR_INVALID_AUTH_CREDENTIALS when the answer is 401.
	resp, err := chromedp.RunResponse(ctx, chromedp.Navigate(srv.URL+"/"))
	refused := (err != nil && strings.Contains(err.Error(), "ERR_INVALID_AUTH_CREDENTIALS")) || (err == nil && resp.Status == 401)
	body, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`document.body ? document.body.innerText : ""`))
	if !refused || strings.Contains(body, "site-1-n03") {
		t.Errorf("without a user: %v (%v), page %.80q; want a refusal and nothing of the fleet", resp, err, body)
	}
	must(t, "loading /healthz, which is open", chromedp.Do(ctx, chromedp.Navigate(srv.URL+"/healthz")))
	status, err := chromedp.Run(ctx, chromedp.Evaluate[float64](`fetch("/api/v1/nodes", {credentials: "omit"}).then(r => r.status)`, chromedp.EvalAwaitPromise))
	if err != nil || status != 401 {
		t.Errorf("the API without a user: %v (%v), want 401", status, err)
	}
	withUser := strings.Replace(srv.URL, "http://", "http://alice:s3cret@", 1)
	resp, err = chromedp.RunResponse(ctx, chromedp.Navigate(withUser+"/"))
	must(t, "loading the console as alice", err)
	if items := texts(t, ctx, "#triage li"); resp.Status != 200 || len(items) == 0 {
		t.Errorf("as alice: HTTP %d and %d triage lines, want 200 and the console", resp.Status, len(items))
	}
}
