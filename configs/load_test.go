package configs

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"go.yaml.in/yaml/v3"
)

var update = flag.Bool("update", false, "rewrite golden files")

func init() {
	hostname = func() (string, error) { return "edge-test-01", nil }
}

// writeTree writes files (relative name -> content) under a temp dir and
// returns the path of config.yaml there.
func writeTree(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for name, content := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return filepath.Join(dir, "config.yaml")
}

func TestParseDefaults(t *testing.T) {
	cfg, err := Parse("empty.yaml", nil)
	if err != nil {
		t.Fatalf("Parse(empty) = %v", err)
	}
	want := Config{
		Version:  1,
		Node:     Node{Name: "edge-test-01"},
		Interval: Duration(time.Second),
		Report: Report{
			MQTT: ReportMQTT{TopicPrefix: "edgeheal/v1", Reconnect: Reconnect{
				ProbeInterval: Duration(2 * time.Second), ConnectJitter: Duration(500 * time.Millisecond),
				MinDelay: Duration(time.Second), MaxDelay: Duration(2 * time.Minute),
				StableAfter: Duration(time.Minute), StartJitter: Duration(2 * time.Second),
			}},
			HTTP:     HTTP{Listen: "127.0.0.1:9469", Socket: "/run/edgeheal/edgeheal.sock"},
			StateDir: "/var/lib/edgeheal",
		},
		Policy: Policy{Cooldown: Duration(30 * time.Second), MaxDisruptive: 3, Window: Duration(time.Hour), VerifyTimeout: Duration(15 * time.Second),
			ResumeGrace: Duration(8 * time.Second)},
		Kubernetes: Kubernetes{Grace: Duration(30 * time.Second), Heartbeat: Duration(time.Minute)},
	}
	got := *cfg
	got.Origins, got.Files, got.Revision = nil, nil, ""
	got.Uplinks, got.Tunnels, got.Workloads = nil, nil, nil
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("defaults (-want +got):\n%s", diff)
	}
	if o := cfg.Origins.Of("node.name"); o.File != HostnameName {
		t.Errorf("origin of node.name = %v, want %s", o, HostnameName)
	}
}

func TestParseElementDefaults(t *testing.T) {
	cfg, err := Parse("c.yaml", []byte("tunnels:\n  - interface: wg0\n    persistent_keepalive: 0s\nuplinks:\n  - name: wwan0\n"))
	if err != nil {
		t.Fatal(err)
	}
	tun := cfg.Tunnels[0]
	want := Tunnel{
		Interface:   "wg0",
		Peers:       PeerSelector{All: true},
		StaleAfter:  Duration(210 * time.Second),
		RxSilence:   Duration(75 * time.Second),
		Probe:       Probe{Interval: Duration(time.Second), Timeout: Duration(time.Second), Misses: 3},
		Heal:        []string{"reassert", "reresolve", "handshake", "rebind", "bounce", "restart-unit"},
		RebindPorts: "51830-51899",
		PathMTU:     PathMTU{Check: true, Repair: true, Interval: Duration(2 * time.Second), IdleInterval: Duration(15 * time.Minute), ChecksPerHour: 30, RelaxAfter: Duration(2 * time.Minute)},
	}
	if diff := cmp.Diff(want, tun); diff != "" {
		t.Errorf("an explicit 0s keepalive must stay 0s and the rest take defaults (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(Uplink{Name: "wwan0", TxChecksum: "off", Features: map[string]string{}}, cfg.Uplinks[0]); diff != "" {
		t.Errorf("uplink defaults (-want +got):\n%s", diff)
	}
}

func TestParseProblems(t *testing.T) {
	for _, tc := range []struct {
		name string
		yaml string
		want []string // each must appear in the error
	}{
		{"an unknown top-level key is named with the known ones", "colour: blue\n",
			[]string{"f.yaml: colour: unknown key (known here: version, node,"}},
		{"an unknown nested key names its full path", "tunnels:\n  - interface: wg0\n    probe: {targte: x}\n",
			[]string{"f.yaml: tunnels[0].probe.targte: unknown key"}},
		{"an empty key is an unknown key, not a field without a yaml tag", "\"\": 1\n",
			[]string{"f.yaml: unknown key (known here: version, node,"}},
		{"a duplicate key is refused with both lines", "interval: 1s\ninterval: 2s\n",
			[]string{"f.yaml: interval: duplicate key (line 2 repeats line 1)"}},
		{"a bad duration says how to write one", "interval: fast\n",
			[]string{`f.yaml: interval: "fast" is not a duration`}},
		{"a duration past what one can hold is out of range, not \"not a duration\"", "policy: {window: 9999999h}\n",
			[]string{`f.yaml: policy.window: "9999999h" is out of range: a duration is at most 2562047h`}},
		{"a bare number is not taken as a duration", "policy: {cooldown: 30}\n",
			[]string{`f.yaml: policy.cooldown: "30" has no unit: write it as 30s`}},
		{"a keepalive out of range", "tunnels:\n  - interface: wg0\n    persistent_keepalive: 70000s\n",
			[]string{"f.yaml: tunnels[0].persistent_keepalive: 70000s is out of range (0..65535s)"}},
		{"a bool that is not a bool", "dry_run: yes please\n",
			[]string{"f.yaml: dry_run: expected true or false"}},
		{"a list where a mapping belongs", "node: [a, b]\n",
			[]string{"f.yaml: node: expected a mapping with keys name, site, got a list"}},
		{"a mapping where a list belongs", "uplinks: {name: wwan0}\n",
			[]string{"f.yaml: uplinks: expected a list, got a mapping"}},
		{"another schema version", "version: 2\n",
			[]string{"f.yaml: version: version 2 is not supported: this build reads version 1"}},
		{"invalid YAML", "tunnels: [\n",
			[]string{"f.yaml: not valid YAML"}},
		{"two documents in one file", "version: 1\n---\nversion: 1\n",
			[]string{"f.yaml: more than one YAML document"}},
		{"a scalar document", "hello\n",
			[]string{"f.yaml: the top level must be a mapping"}},
		{"an unknown heal rung", "tunnels:\n  - interface: wg0\n    heal: [reassert, reboot]\n",
			[]string{`f.yaml: tunnels[0].heal[1]: unknown rung "reboot" (known: reassert, reresolve, handshake, rebind, bounce, restart-unit)`}},
		{"a rebind port range upside down", "tunnels:\n  - interface: wg0\n    rebind_ports: 51899-51830\n",
			[]string{`f.yaml: tunnels[0].rebind_ports: "51899-51830": the range is empty (51899 > 51830); write it LO-HI`}},
		{"a path MTU target that is not ICMP", "tunnels:\n  - interface: wg0\n    path_mtu: {target: \"tcp://10.42.0.1:443\", uplink_target: \"icmp://x\"}\n",
			[]string{`f.yaml: tunnels[0].path_mtu.target: "tcp://10.42.0.1:443": the path MTU is measured with ICMP echoes of given sizes; write icmp://IP`,
				`f.yaml: tunnels[0].path_mtu.uplink_target: "icmp://x": icmp probes need an IP address, e.g. icmp://10.42.0.1`}},
		{"a path MTU interval too short", "tunnels:\n  - interface: wg0\n    path_mtu: {interval: 100ms}\n",
			[]string{`f.yaml: tunnels[0].path_mtu.interval: 100ms is out of range (500ms..3600s)`}},
		{"a path MTU idle interval shorter than its interval, no checks an hour", "tunnels:\n  - interface: wg0\n    path_mtu: {interval: 20m, idle_interval: 10m, checks_per_hour: 0}\n",
			[]string{`f.yaml: tunnels[0].path_mtu.idle_interval: 600s is shorter than interval (1200s): the idle interval is the longer one`,
				`f.yaml: tunnels[0].path_mtu.checks_per_hour: 0 is out of range (1..7200)`}},
		{"a rebind port out of range", "tunnels:\n  - interface: wg0\n    rebind_ports: 70000\n",
			[]string{`f.yaml: tunnels[0].rebind_ports: "70000": "70000" is not a UDP port (1..65535)`}},
		{"a malformed public key", "tunnels:\n  - interface: wg0\n    peers: [abc]\n",
			[]string{`f.yaml: tunnels[0].peers[0]: "abc" is not a WireGuard public key`}},
		{"a probe target without a port", "tunnels:\n  - interface: wg0\n    probe: {target: 'tcp://10.0.0.1'}\n",
			[]string{"f.yaml: tunnels[0].probe.target:", "tcp probes need an IP address and a port"}},
		{"an endpoint_host that is not a name", "tunnels:\n  - interface: wg0\n    endpoint_host: 'gw_1!'\n",
			[]string{`f.yaml: tunnels[0].endpoint_host: "gw_1!" is not a DNS name (or name:port)`}},
		{"an endpoint_host with a bad port", "tunnels:\n  - interface: wg0\n    endpoint_host: 'gw.example.com:70000'\n",
			[]string{`f.yaml: tunnels[0].endpoint_host: "gw.example.com:70000": the port must be 1..65535`}},
		{"a restart-unit of the network manager", "tunnels:\n  - interface: wg0\n    unit: NetworkManager.service\n",
			[]string{`f.yaml: tunnels[0].unit: "NetworkManager.service" owns the uplink (a network manager): restart-unit would take the node offline`}},
		{"a restart-unit of the unit the config marks as the uplink's", "uplinks:\n  - name: wwan0\n    unit: qmi-modem.service\ntunnels:\n  - interface: wg0\n    unit: qmi-modem.service\n",
			[]string{`f.yaml: tunnels[0].unit: "qmi-modem.service" owns the uplink (uplinks[0].unit)`}},
		{"an uplink unit that is not a unit name", "uplinks:\n  - name: wwan0\n    unit: modem\n",
			[]string{`f.yaml: uplinks[0].unit: "modem" is not a systemd unit name`}},
		{"a host_check that is not a probe target", "tunnels:\n  - interface: wg0\n    host_check: 'https://hub'\n",
			[]string{`f.yaml: tunnels[0].host_check: "https://hub": unknown scheme "https" (tcp or icmp)`}},
		{"a resume_grace out of range", "policy: {resume_grace: 1h}\n",
			[]string{"f.yaml: policy.resume_grace: 3600s is out of range (0..600s)"}},
		{"a stale_after that healthy tunnels reach", "tunnels:\n  - interface: wg0\n    stale_after: 150s\n",
			[]string{"f.yaml: tunnels[0].stale_after: 150s would flag healthy tunnels"}},
		{"two tunnels on one interface", "tunnels:\n  - interface: wg0\n  - interface: wg0\n",
			[]string{`f.yaml: tunnels[1].interface: "wg0" is already configured in tunnels[0]`}},
		{"a workload with no namespace source", "workloads:\n  - name: c\n    mqtt: {broker: 'tcp://10.0.0.1:1883'}\n",
			[]string{"f.yaml: workloads[0]: say where the pod's network namespace is"}},
		{"a workload with two namespace sources", "workloads:\n  - name: c\n    netns: /var/run/netns/x\n    pid: 12\n    mqtt: {broker: 'tcp://10.0.0.1:1883'}\n",
			[]string{"f.yaml: workloads[0]: pod, netns and pid are alternatives"}},
		{"a workload on an unknown tunnel", "workloads:\n  - name: c\n    pid: 12\n    tunnel: wg9\n    mqtt: {broker: 'tcp://10.0.0.1:1883'}\n",
			[]string{`f.yaml: workloads[0].tunnel: "wg9" is not one of the configured tunnels' interfaces`}},
		{"a broker URL without a port", "workloads:\n  - name: c\n    pid: 12\n    mqtt: {broker: 'tcp://broker'}\n",
			[]string{`f.yaml: workloads[0].mqtt.broker: "tcp://broker": give host and port`}},
		{"a client cert without its key", "report:\n  mqtt: {tls: {cert: /etc/edgeheal/c.pem}}\n",
			[]string{"f.yaml: report.mqtt.tls: cert and key go together"}},
		{"a relative state dir", "report: {state_dir: state}\n",
			[]string{`f.yaml: report.state_dir: "state": an absolute directory is needed`}},
		{"a wildcard in the topic prefix", "report:\n  mqtt: {topic_prefix: 'edgeheal/#'}\n",
			[]string{`f.yaml: report.mqtt.topic_prefix: "edgeheal/#": no wildcards`}},
		{"an uplink feature that is neither on nor off", "uplinks:\n  - name: wwan0\n    features: {tso: maybe}\n",
			[]string{`f.yaml: uplinks[0].features.tso: "maybe": must be on or off`}},
		{"an uplink name that is not a valid glob", "uplinks:\n  - name: 'eth['\n",
			[]string{`f.yaml: uplinks[0].name: "eth[" is not a valid glob`}},
		{"an uplink tx_checksum that is neither off nor leave", "uplinks:\n  - name: wwan0\n    tx_checksum: maybe\n",
			[]string{`f.yaml: uplinks[0].tx_checksum: "maybe": must be off or leave`}},
		{"a node name that would break topics", "node: {name: 'a/b'}\n",
			[]string{`f.yaml: node.name: "a/b" cannot be used in MQTT topics`}},
		{"an alias bomb is refused", bomb(),
			[]string{"f.yaml: more than 20000 values (aliases expanded): refusing to load"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := Parse("f.yaml", []byte(tc.yaml))
			if err == nil {
				t.Fatalf("Parse = %+v, nil; want an error", cfg)
			}
			if cfg != nil {
				t.Errorf("Parse returned a config with its error")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error does not contain %q:\n%v", w, err)
				}
			}
		})
	}
}

// bomb is a billion-laughs document: few bytes, exponentially many values.
func bomb() string {
	var b strings.Builder
	b.WriteString("a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n")
	for i := 1; i < 9; i++ {
		b.WriteString("a" + string(rune('0'+i)) + ": &a" + string(rune('0'+i)) + " [")
		for j := 0; j < 10; j++ {
			if j > 0 {
				b.WriteString(", ")
			}
			b.WriteString("*a" + string(rune('0'+i-1)))
		}
		b.WriteString("]\n")
	}
	return b.String()
}

func TestValidateReportsEveryProblemAtOnce(t *testing.T) {
	path := writeTree(t, map[string]string{
		"config.yaml":                "version: 1\n",
		"config.d/20-site.yaml":      "colour: blue\ninterval: soon\n",
		"config.d/30-tunnels.yaml":   "tunnels:\n  - interface: flannel-wg\n    persistent_keepalive: 70000s\n",
		"config.d/README.txt":        "not yaml, not read",
		"config.d/40-empty.yaml":     "# nothing here yet\n",
		"config.d/50-also-fine.yaml": "dry_run: true\n",
	})
	_, err := Load(path)
	if err == nil {
		t.Fatal("Load = nil error, want three problems")
	}
	dir := filepath.Dir(path)
	want := []string{
		filepath.Join(dir, "config.d/20-site.yaml") + `: interval: "soon" is not a duration: write it like 20s, 500ms or 1m30s`,
		filepath.Join(dir, "config.d/20-site.yaml") + ": colour: unknown key (known here: version, node, interval, dry_run, uplinks, tunnels, workloads, report, policy, kubernetes)",
		filepath.Join(dir, "config.d/30-tunnels.yaml") + ": tunnels[0].persistent_keepalive: 70000s is out of range (0..65535s)",
	}
	if diff := cmp.Diff(want, strings.Split(err.Error(), "\n")); diff != "" {
		t.Errorf("problems (-want +got):\n%s", diff)
	}
	var p Problem
	if !errors.As(err, &p) {
		t.Errorf("errors.As(err, *Problem) = false; callers need the file and path")
	}
}

func TestLayering(t *testing.T) {
	path := writeTree(t, map[string]string{
		"config.yaml": `version: 1
node: {site: plant-7}
uplinks:
  - name: wwan0
  - name: usb*
tunnels:
  - interface: flannel-wg
    persistent_keepalive: 20s
policy: {cooldown: 30s, max_disruptive: 3}
`,
		"config.d/10-class.yaml": "uplinks:\n  - name: eth1\n",
		"config.d/20-site.yaml":  "node: {name: gw-7}\npolicy: {cooldown: 10s}\n",
		"config.d/30-node.yaml":  "tunnels:\n  - interface: wg0\n    stale_after: 300s\n",
	})
	cfg, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Dir(path)
	t.Run("a drop-in overrides a scalar and the map around it merges", func(t *testing.T) {
		got := []any{cfg.Node.Name, cfg.Node.Site, cfg.Policy.Cooldown.D(), cfg.Policy.MaxDisruptive}
		want := []any{"gw-7", "plant-7", 10 * time.Second, 3}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("(-want +got):\n%s", diff)
		}
	})
	t.Run("a list is replaced, not appended", func(t *testing.T) {
		var names []string
		for _, u := range cfg.Uplinks {
			names = append(names, u.Name)
		}
		if diff := cmp.Diff([]string{"eth1"}, names); diff != "" {
			t.Errorf("uplinks (-want +got):\n%s", diff)
		}
		if len(cfg.Tunnels) != 1 || cfg.Tunnels[0].Interface != "wg0" || cfg.Tunnels[0].PersistentKeepalive.D() != 20*time.Second {
			t.Errorf("tunnels = %+v; want only wg0, with the default keepalive (the replaced list's 20s is not inherited either)", cfg.Tunnels)
		}
	})
	t.Run("every value keeps its file and line", func(t *testing.T) {
		got := map[string]string{}
		for _, p := range []string{"node.name", "node.site", "policy.cooldown", "policy.max_disruptive", "policy.window", "uplinks[0].name", "uplinks[0].tx_checksum", "tunnels[0].stale_after", "version"} {
			got[p] = strings.TrimPrefix(cfg.Origins.Of(p).String(), dir+"/")
		}
		want := map[string]string{
			"node.name":              "config.d/20-site.yaml:1",
			"node.site":              "config.yaml:2",
			"policy.cooldown":        "config.d/20-site.yaml:2",
			"policy.max_disruptive":  "config.yaml:9",
			"policy.window":          DefaultsName,
			"uplinks[0].name":        "config.d/10-class.yaml:2",
			"uplinks[0].tx_checksum": DefaultsName,
			"tunnels[0].stale_after": "config.d/30-node.yaml:3",
			"version":                "config.yaml:1",
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("origins (-want +got):\n%s", diff)
		}
	})
	t.Run("files are read in lexical order after the main file", func(t *testing.T) {
		var rel []string
		for _, f := range cfg.Files {
			rel = append(rel, strings.TrimPrefix(f, dir+"/"))
		}
		want := []string{"config.yaml", "config.d/10-class.yaml", "config.d/20-site.yaml", "config.d/30-node.yaml"}
		if diff := cmp.Diff(want, rel); diff != "" {
			t.Errorf("files (-want +got):\n%s", diff)
		}
	})
}

func TestLoadMissingFile(t *testing.T) {
	_, err := Load(filepath.Join(t.TempDir(), "config.yaml"))
	if !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Load(missing) = %v, want an error matching os.ErrNotExist", err)
	}
}

func TestRevisionFollowsValuesNotFiles(t *testing.T) {
	a, err := Parse("a.yaml", []byte("policy: {cooldown: 10s}\n"))
	if err != nil {
		t.Fatal(err)
	}
	b, err := Parse("b.yaml", []byte("# the same value, written elsewhere\npolicy:\n  cooldown: 10s\n"))
	if err != nil {
		t.Fatal(err)
	}
	c, err := Parse("c.yaml", []byte("policy: {cooldown: 11s}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if a.Revision != b.Revision || a.Revision == c.Revision || len(a.Revision) != 12 {
		t.Errorf("revisions %q %q %q: want the first two equal, the third different, 12 hex digits", a.Revision, b.Revision, c.Revision)
	}
}

func TestExampleIsValid(t *testing.T) {
	cfg, err := Load("examples/edge-node.yaml")
	if err != nil {
		t.Fatalf("the shipped example must load: %v", err)
	}
	if len(cfg.Tunnels) != 1 || len(cfg.Workloads) != 1 || len(cfg.Uplinks) != 1 {
		t.Errorf("example has %d uplinks, %d tunnels, %d workloads; want one of each to show every section", len(cfg.Uplinks), len(cfg.Tunnels), len(cfg.Workloads))
	}
}

func TestShowOriginGolden(t *testing.T) {
	path := writeTree(t, map[string]string{
		"config.yaml":           "version: 1\nnode: {site: plant-7}\nuplinks:\n  - name: wwan*\ntunnels:\n  - interface: flannel-wg\n    probe: {target: 'tcp://10.42.0.1:6443'}\n",
		"config.d/20-site.yaml": "tunnels:\n  - interface: wg0\n    persistent_keepalive: 25s\npolicy:\n  cooldown: 10s\n",
	})
	cfg, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	out, err := cfg.Marshal(true)
	if err != nil {
		t.Fatal(err)
	}
	got := strings.ReplaceAll(string(out), filepath.Dir(path)+"/", "")
	golden := filepath.Join("testdata", "show-origin.golden")
	if *update {
		if err := os.WriteFile(golden, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatalf("%v (run go test ./configs -run Golden -update to create it)", err)
	}
	if diff := cmp.Diff(string(want), got); diff != "" {
		t.Errorf("config show --origin (-want +got):\n%s", diff)
	}
}

func TestMarshalRoundTrip(t *testing.T) {
	cfg, err := Load("examples/edge-node.yaml")
	if err != nil {
		t.Fatal(err)
	}
	out, err := cfg.Marshal(false)
	if err != nil {
		t.Fatal(err)
	}
	again, err := Parse("shown.yaml", out)
	if err != nil {
		t.Fatalf("the output of config show must load again: %v\n%s", err, out)
	}
	if diff := cmp.Diff(cfg, again, cmpValuesOnly); diff != "" {
		t.Errorf("round trip (-want +got):\n%s", diff)
	}
}

var cmpValuesOnly = cmp.FilterPath(func(p cmp.Path) bool {
	switch p.String() {
	case "Origins", "Files":
		return true
	}
	return false
}, cmp.Ignore())

// FuzzParse checks that Parse never panics and never returns a config that
// fails Validate, and that Check (edgeheal-fleet render's validation)
// agrees with it: the same config but the revision, or the same problems.
func FuzzParse(f *testing.F) {
	for _, seed := range []string{
		"", "version: 1\n", "colour: blue\n", "interval: 1s\ninterval: 2s\n", bomb(),
		"tunnels:\n  - interface: wg0\n    persistent_keepalive: 70000s\n",
		"workloads:\n  - name: c\n    pid: 1\n    mqtt: {broker: 'tcp://10.0.0.1:1883'}\n",
		"a: &x {b: 1}\nc: *x\n",
	} {
		f.Add([]byte(seed))
	}
	if data, err := os.ReadFile("examples/edge-node.yaml"); err == nil {
		f.Add(data)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		cfg, err := Parse("fuzz.yaml", data)
		checked, cerr := Check("fuzz.yaml", data)
		if fmt.Sprint(err) != fmt.Sprint(cerr) {
			t.Fatalf("Parse: %v\nCheck: %v", err, cerr)
		}
		if err != nil {
			if cfg != nil {
				t.Fatalf("Parse returned a config with error %v", err)
			}
			return
		}
		if diff := cmp.Diff(cfg, checked, cmpopts.IgnoreFields(Config{}, "Revision")); diff != "" {
			t.Fatalf("Check's config differs from Parse's (-Parse +Check):\n%s", diff)
		}
		if checked.Revision != "" {
			t.Fatalf("Check computed a revision, %s", checked.Revision)
		}
		if err := cfg.Validate(); err != nil {
			t.Fatalf("Parse returned a config that fails Validate: %v", err)
		}
	})
}

func TestEndpointHostTakesAnOptionalPort(t *testing.T) {
	for _, host := range []string{"gw.example.com", "gw.example.com:51820", "gw-1"} {
		cfg, err := Parse("f.yaml", []byte("tunnels:\n  - interface: wg0\n    endpoint_host: '"+host+"'\n"))
		if err != nil {
			t.Errorf("%s: %v", host, err)
			continue
		}
		if got := cfg.Tunnels[0].EndpointHost; got != host {
			t.Errorf("endpoint_host = %q, want %q", got, host)
		}
	}
}

func TestARestartUnitThatOwnsTheUplinkIsFineWithoutTheRung(t *testing.T) {
	// The unit is only restarted by the restart-unit rung: a ladder without
	// it may name any unit (it is not used).
	_, err := Parse("f.yaml", []byte("tunnels:\n  - interface: wg0\n    unit: NetworkManager.service\n    heal: [reassert, handshake]\n"))
	if err != nil {
		t.Errorf("Parse: %v", err)
	}
}

// FuzzExpandInPlaceMatchesTheCopy holds parseLayer's in-place expansion
// (an optimisation measured on render's 10,000 Builds) to the copying
// expand it stands for: the same tree (kinds, tags, values, styles of
// values, lines), the same file recorded for every node and the same
// problems.
func FuzzExpandInPlaceMatchesTheCopy(f *testing.F) {
	for _, seed := range []string{
		"version: 1\n", "a: 1\na: 2\nb: {c: 1, c: 2}\n", "a: &x {b: 1, b: 2}\nc: *x\nd: [*x, *x]\n",
		"l: [a, {k: 1, k: 2}, [x, y]]\n", bomb(), "a: &s 1\nb: *s\n", "? [a]\n: 1\n",
		"m: {k0: 0, k1: 1, k2: 2, k3: 3, k4: 4, k5: 5, k6: 6, k7: 7, k8: 8, k9: 9, k10: 10, k11: 11, k12: 12, k13: 13, k14: 14, k15: 15, k16: 16, k3: 33}\n",
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var doc yaml.Node
		if err := yaml.Unmarshal(data, &doc); err != nil || len(doc.Content) == 0 {
			return
		}
		var again yaml.Node // a second tree: inPlace changes the one it is given
		if err := yaml.Unmarshal(data, &again); err != nil {
			t.Fatal(err)
		}
		copyFiles, inPlaceFiles := map[*yaml.Node]string{}, map[*yaml.Node]string{}
		budget := maxNodes
		var copyProblems []error
		want := expand(doc.Content[0], "f.yaml", "", copyFiles, &budget, &copyProblems)
		x := expander{file: "f.yaml", files: inPlaceFiles, budget: maxNodes}
		got := x.inPlace(again.Content[0])
		if diff := cmp.Diff(fmt.Sprint(copyProblems), fmt.Sprint(x.problems)); diff != "" {
			t.Fatalf("problems (-copy +inPlace):\n%s", diff)
		}
		if len(copyProblems) > 0 {
			return // the layer is refused either way
		}
		if diff := cmp.Diff(treeString(want, copyFiles), treeString(got, inPlaceFiles)); diff != "" {
			t.Fatalf("trees (-copy +inPlace):\n%s", diff)
		}
	})
}

// treeString writes what build reads of a tree, one node a line. The
// style of a key is left out: the copy drops it, and a key is only ever
// read as a string.
func treeString(n *yaml.Node, files map[*yaml.Node]string) string {
	var b strings.Builder
	var walk func(n *yaml.Node, depth int, key bool)
	walk = func(n *yaml.Node, depth int, key bool) {
		style := n.Style
		if key {
			style = 0
		}
		fmt.Fprintf(&b, "%*s%d %s %q line %d style %d file %q\n", 2*depth, "", n.Kind, n.Tag, n.Value, n.Line, style, files[n])
		for i, c := range n.Content {
			walk(c, depth+1, n.Kind == yaml.MappingNode && i%2 == 0)
		}
	}
	walk(n, 0, false)
	return b.String()
}
