package pkgtest

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/edgeheal/edgeheal/fleet"
	"github.com/edgeheal/edgeheal/fleet/web"
)

const promtoolInstall = "apt-get install -y --no-install-recommends prometheus"

func promtool(t *testing.T, args ...string) {
	t.Helper()
	bin, err := exec.LookPath("promtool")
	if err != nil {
		t.Fatalf("promtool is not installed (make test-deps installs it): %s", promtoolInstall)
	}
	cmd := exec.Command(bin, args...)
	cmd.Dir = filepath.Join(repo, "packaging", "fleet")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Errorf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

// The shipped alert rules are valid Prometheus rules, and each fires when
// its unit test says and not before.
func TestFleetAlertRulesPassPromtool(t *testing.T) {
	promtool(t, "check", "rules", "edgeheal-fleet.rules.yml")
	promtool(t, "test", "rules", "edgeheal-fleet.rules.test.yml")
}

var fleetMetric = regexp.MustCompile(`edgeheal_fleet_[a-z_]+`)

// Every metric the rules (and their tests) name is one edgeheal-fleet
// exports: a renamed metric must not leave an alert that can never fire.
func TestFleetAlertRulesUseTheViewsMetrics(t *testing.T) {
	ch := make(chan *prometheus.Desc, 64)
	web.NewCollector(fleet.NewStore("edgeheal/v1"), "test", time.Now, web.Subscription{}).Describe(ch)
	close(ch)
	exported := map[string]bool{}
	name := regexp.MustCompile(`fqName: "([^"]+)"`)
	for d := range ch {
		exported[name.FindStringSubmatch(d.String())[1]] = true
	}
	var missing []string
	for _, f := range []string{"edgeheal-fleet.rules.yml", "edgeheal-fleet.rules.test.yml"} {
		data, err := os.ReadFile(filepath.Join(repo, "packaging", "fleet", f))
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range fleetMetric.FindAllString(string(data), -1) {
			if !exported[m] {
				missing = append(missing, f+": "+m)
			}
		}
	}
	sort.Strings(missing)
	if len(missing) > 0 {
		t.Errorf("the rules name metrics edgeheal-fleet does not export:\n  %s", strings.Join(missing, "\n  "))
	}
}
