package render

import (
	"errors"
	"flag"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/edgeheal/edgeheal/configs"
)

var update = flag.Bool("update", false, "rewrite golden files")

// shipped is the fleet templates directory the packages install, with
// its example inventory.
var shipped = filepath.Join("..", "..", "configs", "fleet")

// renderShipped renders the shipped templates for the example inventory.
func renderShipped(t *testing.T) []File {
	t.Helper()
	tmpl, err := LoadTemplates(shipped)
	if err != nil {
		t.Fatalf("LoadTemplates: %v", err)
	}
	inv, err := LoadInventory(filepath.Join(shipped, "inventory.example.yaml"))
	if err != nil {
		t.Fatalf("LoadInventory: %v", err)
	}
	files, err := tmpl.Render(inv)
	if err != nil {
		t.Fatalf("Render: %v", err)
	}
	return files
}

// The shipped templates and example inventory, rendered, must match the
// golden files (go test ./fleet/render -run RenderShipped -update rewrites them).
func TestRenderShippedFleetMatchesGolden(t *testing.T) {
	files := renderShipped(t)
	goldenDir := "testdata"
	var got []string
	for _, f := range files {
		got = append(got, f.Name)
		golden := filepath.Join(goldenDir, f.Name+".golden")
		if *update {
			if err := os.MkdirAll(goldenDir, 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(golden, f.Data, 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		want, err := os.ReadFile(golden)
		if err != nil {
			t.Fatalf("%v (run go test ./fleet/render -run RenderShipped -update to create it)", err)
		}
		if diff := cmp.Diff(string(want), string(f.Data)); diff != "" {
			t.Errorf("%s differs from %s (-want +got):\n%s", f.Name, golden, diff)
		}
	}
	want := []string{"plant7-gw-01.yaml", "plant7-gw-02.yaml", "plant7-worker-01.yaml", "plant9-gw-01.yaml", "plant9-worker-01.yaml"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("rendered files, sorted by node (-want +got):\n%s", diff)
	}
	// Golden files nobody renders any more would hide a dropped node.
	stale, _ := filepath.Glob(filepath.Join(goldenDir, "*.golden"))
	if len(stale) != len(want) && !*update {
		t.Errorf("%s holds %d golden files, want %d: remove the stale ones", goldenDir, len(stale), len(want))
	}
}

// Each rendered file is a drop-in over the packaged config.yaml: layered
// the way the node will load it, it must still be valid.
func TestRenderedFilesValidateOverThePackagedConfig(t *testing.T) {
	files := renderShipped(t)
	main, err := os.ReadFile(filepath.Join("..", "..", "packaging", "config.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		cfg, err := configs.Build(configs.Source{Name: "/etc/edgeheal/config.yaml", Data: main}, configs.Source{Name: "/etc/edgeheal/config.d/50-fleet.yaml", Data: f.Data})
		if err != nil {
			t.Errorf("%s over the packaged config: %v", f.Name, err)
			continue
		}
		if cfg.Node.Name != f.Node {
			t.Errorf("%s: node.name = %q, want %q", f.Name, cfg.Node.Name, f.Node)
		}
		// A fleet's nodes spread their return to a broker they share; the
		// rest of the reconnect policy stays the packaged defaults.
		rc := cfg.Report.MQTT.Reconnect
		if rc.ConnectJitter != configs.Duration(12*time.Second) || rc.ProbeInterval != configs.Duration(2*time.Second) {
			t.Errorf("%s: reconnect connect_jitter %v probe_interval %v, want 12s and the default 2s", f.Name, rc.ConnectJitter, rc.ProbeInterval)
		}
	}
}

func TestRenderIsDeterministic(t *testing.T) {
	inv, err := LoadInventory(filepath.Join(shipped, "inventory.example.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	f, err := LoadTemplates(shipped)
	if err != nil {
		t.Fatal(err)
	}
	first, err := f.Render(inv)
	if err != nil {
		t.Fatal(err)
	}
	// The same inventory with its nodes in reverse order, rendered many
	// times (map iteration order differs from run to run), gives the same
	// files in the same order with the same bytes.
	rev := *inv
	rev.Nodes = append([]Node(nil), inv.Nodes...)
	sort.Slice(rev.Nodes, func(i, j int) bool { return rev.Nodes[i].Name > rev.Nodes[j].Name })
	for i := 0; i < 20; i++ {
		again, err := f.Render(&rev)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(first, again); diff != "" {
			t.Fatalf("render %d differs (-first +again):\n%s", i, diff)
		}
	}
}

// fleetDir writes a small templates directory: files maps a path under the
// directory to its content.
func fleetDir(t *testing.T, files map[string]string) string {
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
	return dir
}

const testBase = `version: 1
node: {name: {{ quote .Node.Name }}, site: {{ quote .Node.Site }}}
{{ block "tunnels" . }}tunnels: []
{{ end }}report: {http: {listen: {{ quote .Vars.listen }}}}
`

const testClass = `{{ define "tunnels" }}tunnels:
  - interface: {{ quote .Vars.iface }}
    persistent_keepalive: {{ quote .Vars.keepalive }}
{{ end }}`

func testFleet(t *testing.T, extra map[string]string) *Templates {
	t.Helper()
	files := map[string]string{
		"base.yaml.tmpl":       testBase,
		"classes/gw.yaml.tmpl": testClass,
		"classes/plain.yaml.tmpl": `{{/* uses base's blocks as they are */}}
`,
		"sites/s1.yaml": "listen: 127.0.0.1:9469\niface: wg0\nkeepalive: 20s\n",
	}
	for k, v := range extra {
		files[k] = v
	}
	f, err := LoadTemplates(fleetDir(t, files))
	if err != nil {
		t.Fatalf("LoadTemplates: %v", err)
	}
	return f
}

func TestRenderFailsANodeWithTheReason(t *testing.T) {
	tests := []struct {
		name  string
		extra map[string]string
		node  Node
		want  []string // substrings of the node's error
	}{
		{
			name: "a variable no layer sets is an error naming it",
			extra: map[string]string{
				"sites/s2.yaml": "listen: 127.0.0.1:9469\nkeepalive: 20s\n",
			},
			node: Node{Name: "n1", Site: "s2", Class: "gw"},
			want: []string{`map has no entry for key "iface"`},
		},
		{
			name: "a null variable is an error, not the text <no value>",
			node: Node{Name: "n1", Site: "s1", Class: "plain", Vars: map[string]any{"listen": nil}},
			want: []string{"quote: the value is null"},
		},
		{
			name: "an unknown class names the template it looked for",
			node: Node{Name: "n1", Site: "s1", Class: "gw-satellite"},
			want: []string{`class "gw-satellite" has no template`, "classes/gw-satellite.yaml.tmpl"},
		},
		{
			name: "a site without a variables file is an error",
			node: Node{Name: "n1", Site: "mars", Class: "gw"},
			want: []string{`site "mars" has no variables file`, "sites/mars.yaml"},
		},
		{
			name:  "a site file that is not a mapping fails its nodes",
			extra: map[string]string{"sites/s3.yaml": "- a\n- b\n"},
			node:  Node{Name: "n1", Site: "s3", Class: "gw"},
			want:  []string{`site "s3"`, "not a YAML mapping of variables"},
		},
		{
			name: "a node name that cannot be a file or node name is refused",
			node: Node{Name: "../etc/passwd", Site: "s1", Class: "gw"},
			want: []string{`name "../etc/passwd"`},
		},
		{
			name: "a rendered value the validator refuses names the file and key",
			node: Node{Name: "n1", Site: "s1", Class: "gw", Vars: map[string]any{"keepalive": "70000s"}},
			want: []string{"n1.yaml: tunnels[0].persistent_keepalive: 70000s is out of range"},
		},
		{
			name: "a variable cannot inject YAML: quote keeps it one string",
			node: Node{Name: "n1", Site: "s1", Class: "gw", Vars: map[string]any{"iface": "wg0\ndry_run: true"}},
			want: []string{"tunnels[0].interface", "is not a valid link name"},
		},
		{
			name:  "a class with text outside define is refused",
			extra: map[string]string{"classes/bad.yaml.tmpl": "uplinks: []\n"},
			node:  Node{Name: "n1", Site: "s1", Class: "bad"},
			want:  []string{`class "bad"`, "text outside {{define}}"},
		},
		{
			name:  "a class defining a block base does not have is refused",
			extra: map[string]string{"classes/typo.yaml.tmpl": `{{ define "tunels" }}x{{ end }}`},
			node:  Node{Name: "n1", Site: "s1", Class: "typo"},
			want:  []string{"defines tunels, which base.yaml.tmpl has no block for (blocks: tunnels)"},
		},
		{
			name:  "a class that does not parse fails its nodes",
			extra: map[string]string{"classes/broken.yaml.tmpl": `{{ define "tunnels" }}{{ .Vars.x `},
			node:  Node{Name: "n1", Site: "s1", Class: "broken"},
			want:  []string{`class "broken"`, "parsing"},
		},
		{
			name:  "a base that does not set node.name to the node's name is refused",
			extra: map[string]string{"base.yaml.tmpl": "version: 1\nnode: {name: other}\n"},
			node:  Node{Name: "n1", Site: "s1", Class: "plain"},
			want:  []string{`renders node.name "other", want the inventory name "n1"`},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := testFleet(t, tt.extra)
			files, err := f.Render(&Inventory{Nodes: []Node{tt.node}})
			if files != nil {
				t.Errorf("Render returned %d files with an error; want none", len(files))
			}
			var re *Error
			if !errors.As(err, &re) || len(re.Nodes) != 1 {
				t.Fatalf("Render error = %v, want a *Error with one node", err)
			}
			msg := err.Error()
			for _, w := range append([]string{"node " + tt.node.Name + " (" + tt.node.Name + ".yaml)"}, tt.want...) {
				if !strings.Contains(msg, w) {
					t.Errorf("error lacks %q:\n%s", w, msg)
				}
			}
		})
	}
}

func TestRenderListsEveryFailingNodeAndReturnsNoFiles(t *testing.T) {
	f := testFleet(t, nil)
	inv := &Inventory{Nodes: []Node{
		{Name: "ok-1", Site: "s1", Class: "gw"},
		{Name: "bad-b", Site: "s1", Class: "nope"},
		{Name: "ok-2", Site: "s1", Class: "plain"},
		{Name: "bad-a", Site: "s1", Class: "gw", Vars: map[string]any{"keepalive": "1.5s"}},
		{Name: "ok-1", Site: "s1", Class: "gw"},
	}}
	files, err := f.Render(inv)
	if files != nil {
		t.Errorf("Render returned %d files; want none when a node fails", len(files))
	}
	var re *Error
	if !errors.As(err, &re) {
		t.Fatalf("error = %v, want *Error", err)
	}
	var got []string
	for _, n := range re.Nodes {
		got = append(got, n.Node)
	}
	if diff := cmp.Diff([]string{"bad-a", "bad-b", "ok-1"}, got); diff != "" {
		t.Errorf("failing nodes, sorted (-want +got):\n%s", diff)
	}
	for _, w := range []string{
		"3 node(s) failed",
		"node bad-a (bad-a.yaml)", "bad-a.yaml: tunnels[0].persistent_keepalive: 1.5s: WireGuard keepalive is whole seconds",
		"node bad-b (bad-b.yaml): class \"nope\"",
		"node ok-1 (ok-1.yaml): listed more than once",
	} {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("error lacks %q:\n%s", w, err)
		}
	}
}

func TestRenderMergesVariablesFleetThenSiteThenNode(t *testing.T) {
	f := testFleet(t, map[string]string{
		"base.yaml.tmpl": `version: 1
node: {name: {{ quote .Node.Name }}, site: {{ quote .Node.Site }}}
# {{ .Vars.a.x }} {{ .Vars.a.y }} {{ .Vars.a.z }} {{ .Vars.b }}
`,
		"sites/s1.yaml": "a: {x: site, y: site}\nb: site\n",
	})
	inv := &Inventory{
		Vars:  map[string]any{"a": map[string]any{"x": "fleet", "z": "fleet"}, "b": "fleet"},
		Nodes: []Node{{Name: "n1", Site: "s1", Class: "plain", Vars: map[string]any{"a": map[string]any{"y": "node"}}}},
	}
	files, err := f.Render(inv)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := string(files[0].Data), "# site node fleet site\n"; !strings.Contains(got, want) {
		t.Errorf("rendered:\n%s\nwant it to contain %q", got, want)
	}
}

func TestLoadInventoryRefusesUnknownKeysAndEmptyInventories(t *testing.T) {
	tests := []struct{ name, data, want string }{
		{"an unknown key is an error", "nodes:\n  - name: a\n    sight: s1\n", "field sight not found"},
		{"an inventory without nodes is an error", "vars: {}\n", "no nodes"},
		{"a list instead of a mapping is an error", "- a\n", "not a valid inventory"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ParseInventory("inv.yaml", []byte(tt.data))
			if err == nil || !strings.Contains(err.Error(), tt.want) || !strings.Contains(err.Error(), "inv.yaml") {
				t.Errorf("error = %v, want it to name inv.yaml and say %q", err, tt.want)
			}
		})
	}
	if _, err := LoadInventory(filepath.Join(t.TempDir(), "missing.yaml")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("missing inventory: error = %v, want a read error", err)
	}
}

// FuzzRenderInventory feeds arbitrary inventories through the shipped
// templates: rendering may fail, but must not panic, and whatever it
// returns must be valid config named after its node.
func FuzzRenderInventory(f *testing.F) {
	seed, err := os.ReadFile(filepath.Join(shipped, "inventory.example.yaml"))
	if err != nil {
		f.Fatal(err)
	}
	f.Add(seed)
	f.Add([]byte("nodes: [{name: a, site: plant-7, class: worker, vars: {tunnel: {keepalive: '{{'}}}}]\n"))
	f.Add([]byte("vars: {dry_run: [1, {a: b}]}\nnodes: [{name: a, site: plant-9, class: gw-fiber}]\n"))
	fl, err := LoadTemplates(shipped)
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		inv, err := ParseInventory("fuzz.yaml", data)
		if err != nil {
			return
		}
		files, err := fl.Render(inv)
		if err != nil {
			return
		}
		for _, r := range files {
			cfg, err := configs.Parse(r.Name, r.Data)
			if err != nil {
				t.Fatalf("%s rendered but does not validate: %v", r.Name, err)
			}
			if cfg.Node.Name != r.Node {
				t.Fatalf("%s: node.name %q", r.Name, cfg.Node.Name)
			}
		}
	})
}
