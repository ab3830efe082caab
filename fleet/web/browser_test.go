package web

// The page in a real browser: Debian's chromium, headless, driven over the
// DevTools protocol by chromedp.

import (
	"context"
	"flag"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

var screenshot = flag.String("screenshot", "", "also write the fleet and node pages' screenshots into this directory (docs/images)")

const chromiumInstall = "apt-get install -y --no-install-recommends chromium"

func browser(t *testing.T) context.Context {
	t.Helper()
	path, err := exec.LookPath("chromium")
	if err != nil {
		t.Skipf("chromium is not installed (make test-deps installs it): %s", chromiumInstall)
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(path), chromedp.NoSandbox, // as root, chromium refuses its sandbox
		chromedp.WindowSize(1280, 720), chromedp.Flag("user-data-dir", t.TempDir()))
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(actx)
	ctx, cancelTimeout := context.WithTimeout(ctx, time.Minute)
	t.Cleanup(func() { cancelTimeout(); cancel(); cancelAlloc() }) // ends chromium, which chromedp started
	return ctx
}

func TestThePageInAHeadlessBrowser(t *testing.T) {
	ctx := browser(t)
	srv := httptest.NewServer(Handler(Options{Store: fixture(t), Now: func() time.Time { return now }}))
	defer srv.Close()
	must := func(what string, err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	texts := func(css string) []string {
		t.Helper()
		out, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](`Array.from(document.querySelectorAll("`+css+`")).map(e => e.innerText)`))
		must("reading "+css, err)
		return out
	}

	must("loading the fleet page", chromedp.Do(ctx, chromedp.Navigate(srv.URL+"/"), chromedp.WaitVisible(chromedp.ID("nodes"))))
	counts, err := chromedp.Run(ctx, chromedp.Text(chromedp.ID("counts")))
	must("reading the counts", err)
	fleetPNG, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	must("taking a screenshot", err)
	if rows := texts("#nodes tbody tr td:first-child"); len(rows) != 6 || !strings.Contains(counts, "online 4") || !strings.Contains(counts, "lost 1") {
		t.Errorf("the page loaded with rows %v and counts %q; want 6 rows, online 4, lost 1", rows, counts)
	}

	// The filter: choose plant-9 and lost in the form, as a person would.
	must("filtering", chromedp.Do(ctx,
		chromedp.SetValue(chromedp.CSS(`select[name="site"]`), "plant-9"),
		chromedp.SetValue(chromedp.CSS(`select[name="state"]`), "lost"),
		chromedp.Click(chromedp.CSS(`#filter button`)),
		chromedp.WaitNotPresent(chromedp.CSS(`a[href="/node/p7-gw-01"]`)), // the new page has come
	))
	if shown := texts("#nodes tbody tr td:first-child"); strings.Join(shown, ",") != "p9-gw-03" {
		t.Errorf("after filtering by plant-9 and lost: rows %v, want p9-gw-03 only", shown)
	}

	// A node's detail, reached by its link from the table.
	must("opening a node", chromedp.Do(ctx,
		chromedp.Navigate(srv.URL+"/?sort=name"),
		chromedp.Click(chromedp.CSS(`a[href="/node/p7-gw-02"]`)),
		chromedp.WaitVisible(chromedp.ID("events")),
	))
	nodePNG, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	must("taking a screenshot", err)
	want := "wg0/AbCd dark: probe missed: timeout,handshake on wg0/AbCd changed"
	if events := texts("#events tbody tr td:last-child"); strings.Join(events, ",") != want {
		t.Errorf("the node page's events: %q, want %q in this order", events, want)
	}
	if *screenshot != "" {
		for name, png := range map[string][]byte{"fleet-page.png": fleetPNG, "fleet-node-page.png": nodePNG} {
			if err := os.WriteFile(filepath.Join(*screenshot, name), png, 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
}
