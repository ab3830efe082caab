package scalebench

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/edgeheal/edgeheal/fleet"
	"github.com/edgeheal/edgeheal/fleet/web"
	"github.com/edgeheal/edgeheal/internal/testsupport/mosquitto"
)

// A restart of the view during a site outage: the built view, a real
// mosquitto, 200 simulated nodes whose Wills carry their identity as the
// agent's do. Every lost node keeps its site after the restart, and the
// series the alert rules read (their labels are the alerts' labels, the
// instance aside) are the same before and after.
func TestAViewRestartedDuringASiteOutageKeepsEveryLostNodesSite(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the built view twice against a real mosquitto: run without -short")
	}
	bin := viewBinary(t)
	broker := mosquitto.Start(t, mosquitto.Options{Extra: *brokerConf})
	const n = 200
	nodes := make([]*simNode, n)
	for i := range nodes {
		nodes[i] = &simNode{name: fmt.Sprintf("node-%03d", i), site: fmt.Sprintf("site-%02d", i%4), session: 1}
	}
	defer closeAll(nodes)
	if err := parallel(nodes, 50, func(nd *simNode) error {
		if err := nd.connect(broker.PlainAddr); err != nil {
			return err
		}
		if err := nd.status(); err != nil {
			return err
		}
		return nd.history()
	}); err != nil {
		t.Fatal(err)
	}
	v := startView(t, bin, broker.PlainURL(), "restart-view")
	v.waitFor(t, 60*time.Second, "the view knows every node", func(h fleet.Health) bool { return h.Nodes == n })
	lost := burstNodesOf(nodes, "site-01")
	_ = parallel(lost, len(lost), func(nd *simNode) error { nd.drop(); return nil })
	v.waitFor(t, 60*time.Second, "site-01's nodes are lost", func(h fleet.Health) bool { return h.ByState[fleet.StateLost] == len(lost) })
	before := alertSeries(t, v)

	v.stop()
	v = startView(t, bin, broker.PlainURL(), "restart-view")
	v.waitFor(t, 60*time.Second, "the restarted view knows every node and history", func(h fleet.Health) bool {
		return h.Nodes == n && h.ByState[fleet.StateLost] == len(lost) && h.Messages["history/applied"] >= n
	})
	after := alertSeries(t, v)
	if before != after {
		t.Errorf("the series the alerts read changed with the restart:\nbefore:\n%s\nafter:\n%s", before, after)
	}
	var page web.NodesPage
	get(t, v, "/api/v1/nodes?state=lost&limit=1000", &page)
	for _, nd := range page.Nodes {
		if nd.Site != "site-01" || nd.Version != "1.4.0" || nd.Since.IsZero() {
			t.Errorf("after the restart, lost node %s: site %q version %q since %v; want site-01, its version and when it was last heard",
				nd.Name, nd.Site, nd.Version, nd.Since)
		}
	}
	if page.Matched != len(lost) {
		t.Errorf("%d lost nodes after the restart, want %d", page.Matched, len(lost))
	}
}

func burstNodesOf(nodes []*simNode, site string) []*simNode {
	var out []*simNode
	for _, nd := range nodes {
		if nd.site == site {
			out = append(out, nd)
		}
	}
	return out
}

var alertMetric = regexp.MustCompile(`^edgeheal_fleet_(node_state|nodes|node_open_incidents)\{[^}]*\} `)

// alertSeries is the lost nodes' and the sites' series of /metrics that
// the alert rules read, with their values, sorted.
func alertSeries(t *testing.T, v *view) string {
	t.Helper()
	resp, err := http.Get(v.base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	var out []string
	for _, line := range strings.Split(string(body), "\n") {
		if alertMetric.MatchString(line) && (strings.Contains(line, `state="lost"`) || strings.HasPrefix(line, "edgeheal_fleet_nodes{")) {
			out = append(out, line)
		}
	}
	sort.Strings(out)
	if len(out) == 0 {
		t.Fatal("no series of lost nodes on /metrics")
	}
	return strings.Join(out, "\n")
}

func get(t *testing.T, v *view, path string, to any) {
	t.Helper()
	resp, err := http.Get(v.base + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(to); err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
}
