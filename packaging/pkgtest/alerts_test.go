package pkgtest

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/edgeheal/edgeheal/internal/testsupport"
)

const alertmanagerInstall = "apt-get install -y --no-install-recommends prometheus-alertmanager"

// Every alert of the shipped rules has a unit test in which it fires and
// one in which it must stay quiet.
func TestFleetAlertRulesEachFireAndEachStayQuiet(t *testing.T) {
	var rules struct {
		Groups []struct {
			Rules []struct {
				Alert string `yaml:"alert"`
			} `yaml:"rules"`
		} `yaml:"groups"`
	}
	var tests struct {
		Tests []struct {
			AlertRuleTest []struct {
				Alertname string `yaml:"alertname"`
				ExpAlerts []any  `yaml:"exp_alerts"`
			} `yaml:"alert_rule_test"`
		} `yaml:"tests"`
	}
	readYAML(t, "edgeheal-fleet.rules.yml", &rules)
	readYAML(t, "edgeheal-fleet.rules.test.yml", &tests)
	fires, quiet := map[string]bool{}, map[string]bool{}
	for _, tc := range tests.Tests {
		for _, a := range tc.AlertRuleTest {
			if len(a.ExpAlerts) > 0 {
				fires[a.Alertname] = true
			} else {
				quiet[a.Alertname] = true
			}
		}
	}
	n := 0
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			if r.Alert == "" {
				continue
			}
			n++
			if !fires[r.Alert] || !quiet[r.Alert] {
				t.Errorf("%s: a test where it fires %v, one where it stays quiet %v; want both", r.Alert, fires[r.Alert], quiet[r.Alert])
			}
		}
	}
	if n < 9 {
		t.Errorf("%d alerts in the rules, want the 9 of docs/fleet.md", n)
	}
}

func readYAML(t *testing.T, name string, v any) {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(repo, "packaging", "fleet", name))
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(data, v); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
}

func amtool(t *testing.T, args ...string) string {
	t.Helper()
	bin, err := exec.LookPath("amtool")
	if err != nil {
		t.Fatalf("amtool is not installed (make test-deps installs it): %s", alertmanagerInstall)
	}
	cmd := exec.Command(bin, args...)
	cmd.Dir = filepath.Join(repo, "packaging", "fleet")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("amtool %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// The shipped Alertmanager configuration is valid, and in a real
// Alertmanager a lost site silences its nodes' alerts, and a lost node its
// tunnels' and workloads' alerts, while others still page.
func TestFleetInhibitionsInARealAlertmanager(t *testing.T) {
	if out := amtool(t, "check-config", "edgeheal-fleet.alertmanager.yml"); !strings.Contains(out, "2 inhibit rules") {
		t.Fatalf("amtool check-config: %s", out)
	}
	bin, err := exec.LookPath("prometheus-alertmanager")
	if err != nil {
		t.Fatalf("Alertmanager is not installed (make test-deps installs it): %s", alertmanagerInstall)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	dir := t.TempDir()
	cmd := exec.Command(bin, "--config.file="+filepath.Join(repo, "packaging", "fleet", "edgeheal-fleet.alertmanager.yml"),
		"--storage.path="+dir, "--web.listen-address="+addr, "--cluster.listen-address=")
	testsupport.StartLogged(t, "alertmanager", filepath.Join(dir, "alertmanager.log"), cmd)
	url := "--alertmanager.url=http://" + addr
	testsupport.WaitFor(t, 30*time.Second, "Alertmanager is ready", func() bool {
		resp, err := http.Get("http://" + addr + "/-/ready")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == 200
	})
	for _, a := range [][]string{
		{"alertname=EdgehealSiteLost", "site=site-3"},
		{"alertname=EdgehealNodeLost", "node=n1", "site=site-3", "state=lost"},
		{"alertname=EdgehealTunnelDark", "node=n2", "site=site-3", "kind=peer"},
		{"alertname=EdgehealNodeLost", "node=n9", "site=site-4", "state=lost"},
		{"alertname=EdgehealTunnelGaveUp", "node=n9", "site=site-4", "kind=peer"},
		{"alertname=EdgehealTunnelDark", "node=n5", "site=site-4", "kind=peer"},
		{"alertname=EdgehealWorkloadIncident", "node=n6", "site=site-4", "kind=workload"},
	} {
		amtool(t, append([]string{"alert", "add", url, "job=fleet", "severity=critical"}, a...)...)
	}
	want := "inhibited: EdgehealNodeLost n1 site-3, EdgehealTunnelDark n2 site-3, EdgehealTunnelGaveUp n9 site-4; " +
		"paging: EdgehealNodeLost n9 site-4, EdgehealSiteLost  site-3, EdgehealTunnelDark n5 site-4, EdgehealWorkloadIncident n6 site-4"
	var got string
	testsupport.WaitFor(t, 30*time.Second, "the inhibitions: "+want, func() bool {
		got = inhibitions(t, amtool(t, "alert", "query", url, "--inhibited", "--active", "-o", "json"))
		return got == want
	})
}

// inhibitions sorts amtool's alerts into inhibited and paging.
func inhibitions(t *testing.T, out string) string {
	var alerts []struct {
		Labels map[string]string `json:"labels"`
		Status struct {
			InhibitedBy []string `json:"inhibitedBy"`
		} `json:"status"`
	}
	if err := json.Unmarshal([]byte(out), &alerts); err != nil {
		t.Fatalf("amtool alert query: %v\n%s", err, out)
	}
	var inhibited, paging []string
	for _, a := range alerts {
		line := fmt.Sprintf("%s %s %s", a.Labels["alertname"], a.Labels["node"], a.Labels["site"])
		if len(a.Status.InhibitedBy) > 0 {
			inhibited = append(inhibited, line)
		} else {
			paging = append(paging, line)
		}
	}
	sort.Strings(inhibited)
	sort.Strings(paging)
	return "inhibited: " + strings.Join(inhibited, ", ") + "; paging: " + strings.Join(paging, ", ")
}
