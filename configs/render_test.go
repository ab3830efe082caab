package configs

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// The shipped templates and example inventory, rendered, must match the
// golden files (go test ./configs -run RenderShipped -update rewrites them).
func TestRenderShippedFleetMatchesGolden(t *testing.T) {
	files, err := RenderFleet("fleet", filepath.Join("fleet", "inventory.example.yaml"))
	if err != nil {
		t.Fatalf("RenderFleet: %v", err)
	}
	goldenDir := filepath.Join("testdata", "render")
	var got []string
	for _, f := range files {
		got = append(got, f.File)
		golden := filepath.Join(goldenDir, f.File+".golden")
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
			t.Fatalf("%v (run go test ./configs -run RenderShipped -update to create it)", err)
		}
		if diff := cmp.Diff(string(want), string(f.Data)); diff != "" {
			t.Errorf("%s differs from %s (-want +got):\n%s", f.File, golden, diff)
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
	files, err := RenderFleet("fleet", filepath.Join("fleet", "inventory.example.yaml"))
	if err != nil {
		t.Fatalf("RenderFleet: %v", err)
	}
	main, err := os.ReadFile(filepath.Join("..", "packaging", "config.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		cfg, err := Build(Source{Name: "/etc/edgeheal/config.yaml", Data: main}, Source{Name: "/etc/edgeheal/config.d/50-fleet.yaml", Data: f.Data})
		if err != nil {
			t.Errorf("%s over the packaged config: %v", f.File, err)
			continue
		}
		if cfg.Node.Name != f.Node {
			t.Errorf("%s: node.name = %q, want %q", f.File, cfg.Node.Name, f.Node)
		}
		// A fleet's nodes spread their return to a broker they share; the
		// rest of the reconnect policy stays the packaged defaults.
		rc := cfg.Report.MQTT.Reconnect
		if rc.ConnectJitter != Duration(12*time.Second) || rc.ProbeInterval != Duration(2*time.Second) {
			t.Errorf("%s: reconnect connect_jitter %v probe_interval %v, want 12s and the default 2s", f.File, rc.ConnectJitter, rc.ProbeInterval)
		}
	}
}

func TestRenderIsDeterministic(t *testing.T) {
	inv, err := LoadInventory(filepath.Join("fleet", "inventory.example.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	f, err := LoadFleet("fleet")
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
	rev.Nodes = append([]InventoryNode(nil), inv.Nodes...)
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

func testFleet(t *testing.T, extra map[string]string) *Fleet {
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
	f, err := LoadFleet(fleetDir(t, files))
	if err != nil {
		t.Fatalf("LoadFleet: %v", err)
	}
	return f
}

func TestRenderFailsANodeWithTheReason(t *testing.T) {
	tests := []struct {
		name  string
		extra map[string]string
		node  InventoryNode
		want  []string // substrings of the node's error
	}{
		{
			name: "a variable no layer sets is an error naming it",
			extra: map[string]string{
				"sites/s2.yaml": "listen: 127.0.0.1:9469\nkeepalive: 20s\n",
			},
			node: InventoryNode{Name: "n1", Site: "s2", Class: "gw"},
			want: []string{`map has no entry for key "iface"`},
		},
		{
			name: "a null variable is an error, not the text <no value>",
			node: InventoryNode{Name: "n1", Site: "s1", Class: "plain", Vars: map[string]any{"listen": nil}},
			want: []string{"quote: the value is null"},
		},
		{
			name: "an unknown class names the template it looked for",
			node: InventoryNode{Name: "n1", Site: "s1", Class: "gw-satellite"},
			want: []string{`class "gw-satellite" has no template`, "classes/gw-satellite.yaml.tmpl"},
		},
		{
			name: "a site without a variables file is an error",
			node: InventoryNode{Name: "n1", Site: "mars", Class: "gw"},
			want: []string{`site "mars" has no variables file`, "sites/mars.yaml"},
		},
		{
			name:  "a site file that is not a mapping fails its nodes",
			extra: map[string]string{"sites/s3.yaml": "- a\n- b\n"},
			node:  InventoryNode{Name: "n1", Site: "s3", Class: "gw"},
			want:  []string{`site "s3"`, "not a YAML mapping of variables"},
		},
		{
			name: "a node name that cannot be a file or node name is refused",
			node: InventoryNode{Name: "../etc/passwd", Site: "s1", Class: "gw"},
			want: []string{`name "../etc/passwd"`},
		},
		{
			name: "a rendered value the validator refuses names the file and key",
			node: InventoryNode{Name: "n1", Site: "s1", Class: "gw", Vars: map[string]any{"keepalive": "70000s"}},
			want: []string{"n1.yaml: tunnels[0].persistent_keepalive: 70000s is out of range"},
		},
		{
			name: "a variable cannot inject YAML: quote keeps it one string",
			node: InventoryNode{Name: "n1", Site: "s1", Class: "gw", Vars: map[string]any{"iface": "wg0\ndry_run: true"}},
			want: []string{"tunnels[0].interface", "is not a valid link name"},
		},
		{
			name:  "a class with text outside define is refused",
			extra: map[string]string{"classes/bad.yaml.tmpl": "uplinks: []\n"},
			node:  InventoryNode{Name: "n1", Site: "s1", Class: "bad"},
			want:  []string{`class "bad"`, "text outside {{define}}"},
		},
		{
			name:  "a class defining a block base does not have is refused",
			extra: map[string]string{"classes/typo.yaml.tmpl": `{{ define "tunels" }}x{{ end }}`},
			node:  InventoryNode{Name: "n1", Site: "s1", Class: "typo"},
			want:  []string{"defines tunels, which base.yaml.tmpl has no block for (blocks: tunnels)"},
		},
		{
			name:  "a class that does not parse fails its nodes",
			extra: map[string]string{"classes/broken.yaml.tmpl": `{{ define "tunnels" }}{{ .Vars.x `},
			node:  InventoryNode{Name: "n1", Site: "s1", Class: "broken"},
			want:  []string{`class "broken"`, "parsing"},
		},
		{
			name:  "a base that does not set node.name to the node's name is refused",
			extra: map[string]string{"base.yaml.tmpl": "version: 1\nnode: {name: other}\n"},
			node:  InventoryNode{Name: "n1", Site: "s1", Class: "plain"},
			want:  []string{`renders node.name "other", want the inventory name "n1"`},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := testFleet(t, tt.extra)
			files, err := f.Render(&Inventory{Nodes: []InventoryNode{tt.node}})
			if files != nil {
				t.Errorf("Render returned %d files with an error; want none", len(files))
			}
			var re *RenderError
			if !errors.As(err, &re) || len(re.Nodes) != 1 {
				t.Fatalf("Render error = %v, want a *RenderError with one node", err)
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
	inv := &Inventory{Nodes: []InventoryNode{
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
	var re *RenderError
	if !errors.As(err, &re) {
		t.Fatalf("error = %v, want *RenderError", err)
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
		Nodes: []InventoryNode{{Name: "n1", Site: "s1", Class: "plain", Vars: map[string]any{"a": map[string]any{"y": "node"}}}},
	}
	files, err := f.Render(inv)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := string(files[0].Data), "# site node fleet site\n"; !strings.Contains(got, want) {
		t.Errorf("rendered:\n%s\nwant it to contain %q", got, want)
	}
}

func TestWriteRenderedWritesEachFileWithMode0644(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "out")
	in := []Rendered{{Node: "a", File: "a.yaml", Data: []byte("version: 1\n")}, {Node: "b", File: "b.yaml", Data: []byte("version: 1\n# b\n")}}
	written, err := WriteRendered(dir, in)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]bool{true, true}, written); diff != "" {
		t.Errorf("written (-want +got):\n%s", diff)
	}
	want := []string{"a.yaml -rw-r--r-- version: 1\n", "b.yaml -rw-r--r-- version: 1\n# b\n"}
	if diff := cmp.Diff(want, dirListing(t, dir)); diff != "" {
		t.Errorf("output directory (-want +got):\n%s", diff)
	}
}

// dirListing is every entry of dir (temporary files included) with its
// mode and content.
func dirListing(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range entries {
		info, err := e.Info()
		if err != nil {
			t.Fatal(err)
		}
		data, _ := os.ReadFile(filepath.Join(dir, e.Name()))
		got = append(got, e.Name()+" "+info.Mode().String()+" "+string(data))
	}
	return got
}

// An operator re-renders a whole fleet in which a few nodes changed: only
// those files are written; the others keep their inode and their
// modification time (a deployment tool that compares times sees nothing
// to ship).
func TestWriteRenderedWritesOnlyTheFilesThatChanged(t *testing.T) {
	dir := t.TempDir()
	first := []Rendered{
		{Node: "a", File: "a.yaml", Data: []byte("version: 1\n# a\n")},
		{Node: "b", File: "b.yaml", Data: []byte("version: 1\n# b\n")},
		{Node: "c", File: "c.yaml", Data: []byte("version: 1\n# c\n")},
	}
	if _, err := WriteRendered(dir, first); err != nil {
		t.Fatal(err)
	}
	past := time.Date(2001, 2, 3, 4, 5, 6, 0, time.UTC)
	before := map[string]os.FileInfo{}
	for _, r := range first {
		p := filepath.Join(dir, r.File)
		if err := os.Chtimes(p, past, past); err != nil {
			t.Fatal(err)
		}
		before[r.File], _ = os.Stat(p)
	}
	again := append([]Rendered(nil), first...)
	again[1].Data = []byte("version: 1\n# b, changed\n")
	written, err := WriteRendered(dir, again)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]bool{false, true, false}, written); diff != "" {
		t.Errorf("written (-want +got):\n%s", diff)
	}
	for _, r := range again {
		after, err := os.Stat(filepath.Join(dir, r.File))
		if err != nil {
			t.Fatal(err)
		}
		kept := os.SameFile(before[r.File], after) && after.ModTime().Equal(past)
		if changed := r.File == "b.yaml"; kept == changed {
			t.Errorf("%s: same inode and time %v (%v), want %v", r.File, kept, after.ModTime(), !changed)
		}
	}
	want := []string{"a.yaml -rw-r--r-- version: 1\n# a\n", "b.yaml -rw-r--r-- version: 1\n# b, changed\n", "c.yaml -rw-r--r-- version: 1\n# c\n"}
	if diff := cmp.Diff(want, dirListing(t, dir)); diff != "" {
		t.Errorf("output directory (-want +got):\n%s", diff)
	}
}

// A file with the right bytes is not yet the rendered file when it has
// another mode or is a link to somewhere else: it is replaced.
func TestWriteRenderedReplacesTheRightBytesInTheWrongFile(t *testing.T) {
	dir := t.TempDir()
	data := []byte("version: 1\n")
	if err := os.WriteFile(filepath.Join(dir, "private.yaml"), data, 0o600); err != nil {
		t.Fatal(err)
	}
	elsewhere := filepath.Join(t.TempDir(), "elsewhere.yaml")
	if err := os.WriteFile(elsewhere, data, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(elsewhere, filepath.Join(dir, "link.yaml")); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "longer.yaml"), append(data, '#'), 0o644); err != nil {
		t.Fatal(err)
	}
	written, err := WriteRendered(dir, []Rendered{
		{Node: "link", File: "link.yaml", Data: data},
		{Node: "longer", File: "longer.yaml", Data: data},
		{Node: "private", File: "private.yaml", Data: data},
	})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]bool{true, true, true}, written); diff != "" {
		t.Errorf("written (-want +got):\n%s", diff)
	}
	want := []string{"link.yaml -rw-r--r-- version: 1\n", "longer.yaml -rw-r--r-- version: 1\n", "private.yaml -rw-r--r-- version: 1\n"}
	if diff := cmp.Diff(want, dirListing(t, dir)); diff != "" {
		t.Errorf("output directory (-want +got):\n%s", diff)
	}
}

// A file that cannot be written leaves no partial or temporary file, and
// when its temporary file cannot even be made, no file is replaced.
func TestWriteRenderedLeavesNoPartialFile(t *testing.T) {
	old := []byte("version: 1\n# old\n")
	tests := []struct {
		name    string
		files   []Rendered
		wantErr string
		want    []string // the directory afterwards
	}{
		{
			name: "a rename that fails replaces the files before it and no other",
			files: []Rendered{
				{Node: "a", File: "a.yaml", Data: []byte("version: 1\n# new a\n")},
				{Node: "b", File: "b.yaml", Data: []byte("version: 1\n# new b\n")}, // b.yaml is a directory
				{Node: "c", File: "c.yaml", Data: []byte("version: 1\n# new c\n")},
			},
			wantErr: "b.yaml",
			want:    []string{"a.yaml -rw-r--r-- version: 1\n# new a\n", "b.yaml drwxr-xr-x ", "c.yaml -rw-r--r-- version: 1\n# old\n"},
		},
		{
			name: "a temporary file that cannot be made replaces nothing",
			files: []Rendered{
				{Node: "a", File: "a.yaml", Data: []byte("version: 1\n# new a\n")},
				{Node: "c", File: "c.yaml", Data: []byte("version: 1\n# new c\n")},
				{Node: "long", File: strings.Repeat("n", 250) + ".yaml", Data: []byte("version: 1\n")}, // its temporary name is too long
			},
			wantErr: strings.Repeat("n", 250) + ".yaml",
			want:    []string{"a.yaml -rw-r--r-- version: 1\n# old\n", "b.yaml drwxr-xr-x ", "c.yaml -rw-r--r-- version: 1\n# old\n"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			for _, f := range []string{"a.yaml", "c.yaml"} {
				if err := os.WriteFile(filepath.Join(dir, f), old, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			if err := os.MkdirAll(filepath.Join(dir, "b.yaml", "x"), 0o755); err != nil {
				t.Fatal(err)
			}
			written, err := WriteRendered(dir, tt.files)
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) || written != nil {
				t.Errorf("WriteRendered = %v, %v; want no result and an error naming %s", written, err, tt.wantErr)
			}
			if diff := cmp.Diff(tt.want, dirListing(t, dir)); diff != "" {
				t.Errorf("output directory (-want +got):\n%s", diff)
			}
		})
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
	if _, err := LoadInventory(filepath.Join(t.TempDir(), "missing.yaml")); !IsReadError(err) {
		t.Errorf("missing inventory: error = %v, want a read error", err)
	}
}

// FuzzRenderInventory feeds arbitrary inventories through the shipped
// templates: rendering may fail, but must not panic, and whatever it
// returns must be valid config named after its node.
func FuzzRenderInventory(f *testing.F) {
	seed, err := os.ReadFile(filepath.Join("fleet", "inventory.example.yaml"))
	if err != nil {
		f.Fatal(err)
	}
	f.Add(seed)
	f.Add([]byte("nodes: [{name: a, site: plant-7, class: worker, vars: {tunnel: {keepalive: '{{'}}}}]\n"))
	f.Add([]byte("vars: {dry_run: [1, {a: b}]}\nnodes: [{name: a, site: plant-9, class: gw-fiber}]\n"))
	fl, err := LoadFleet("fleet")
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
			cfg, err := Parse(r.File, r.Data)
			if err != nil {
				t.Fatalf("%s rendered but does not validate: %v", r.File, err)
			}
			if cfg.Node.Name != r.Node {
				t.Fatalf("%s: node.name %q", r.File, cfg.Node.Name)
			}
		}
	})
}

// RenderInto, which stages each file while the other nodes render, ends
// with the directory Render then WriteRendered give: into an empty
// directory, again with nothing changed, and with one node changed.
func TestRenderIntoIsRenderThenWriteRendered(t *testing.T) {
	f := testFleet(t, nil)
	inv := &Inventory{Nodes: []InventoryNode{
		{Name: "gw-2", Site: "s1", Class: "gw"}, {Name: "gw-1", Site: "s1", Class: "gw"}, {Name: "plain-1", Site: "s1", Class: "plain"},
	}}
	changed := &Inventory{Nodes: append([]InventoryNode(nil), inv.Nodes...)}
	changed.Nodes[0].Vars = map[string]any{"keepalive": "25s"}
	into, apart := filepath.Join(t.TempDir(), "into"), filepath.Join(t.TempDir(), "apart")
	for _, step := range []struct {
		name        string
		inv         *Inventory
		wantWritten []bool // by node name: gw-1, gw-2, plain-1
	}{
		{"into an empty directory", inv, []bool{true, true, true}},
		{"again, nothing changed", inv, []bool{false, false, false}},
		{"again, gw-2 changed", changed, []bool{false, true, false}},
	} {
		files, written, err := f.RenderInto(step.inv, into)
		if err != nil {
			t.Fatalf("%s: %v", step.name, err)
		}
		wantFiles, err := f.Render(step.inv)
		if err != nil {
			t.Fatal(err)
		}
		wantWritten, err := WriteRendered(apart, wantFiles)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(wantFiles, files); diff != "" {
			t.Errorf("%s: files (-Render +RenderInto):\n%s", step.name, diff)
		}
		if diff := cmp.Diff(wantWritten, written); diff != "" || !slices.Equal(written, step.wantWritten) {
			t.Errorf("%s: written %v, WriteRendered %v, want %v", step.name, written, wantWritten, step.wantWritten)
		}
		if diff := cmp.Diff(dirListing(t, apart), dirListing(t, into)); diff != "" {
			t.Errorf("%s: directory (-Render then WriteRendered +RenderInto):\n%s", step.name, diff)
		}
	}
}

// When a node fails, RenderInto has staged the files of others already:
// none of them replaces anything, no temporary file is left, and a
// directory it made is gone again.
func TestRenderIntoWritesNothingWhenANodeFails(t *testing.T) {
	f := testFleet(t, nil)
	var nodes []InventoryNode
	for i := range 50 {
		nodes = append(nodes, InventoryNode{Name: fmt.Sprintf("ok-%02d", i), Site: "s1", Class: "gw"})
	}
	bad := &Inventory{Nodes: append(nodes, InventoryNode{Name: "bad", Site: "s1", Class: "gw", Vars: map[string]any{"keepalive": "1.5s"}})}
	t.Run("an existing directory keeps its files", func(t *testing.T) {
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, "ok-01.yaml"), []byte("version: 1\n# old\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		before := dirListing(t, dir)
		files, written, err := f.RenderInto(bad, dir)
		var re *RenderError
		if !errors.As(err, &re) || files != nil || written != nil {
			t.Fatalf("RenderInto = %d files, %v, %v; want nothing and a *RenderError", len(files), written, err)
		}
		if !strings.Contains(err.Error(), "node bad (bad.yaml)") {
			t.Errorf("error does not name the failing node: %v", err)
		}
		if diff := cmp.Diff(before, dirListing(t, dir)); diff != "" {
			t.Errorf("directory changed (-before +after):\n%s", diff)
		}
	})
	t.Run("a directory it made is removed", func(t *testing.T) {
		parent := t.TempDir()
		dir := filepath.Join(parent, "fleet", "rendered")
		if _, _, err := f.RenderInto(bad, dir); err == nil {
			t.Fatal("no error")
		}
		if entries, err := os.ReadDir(parent); err != nil || len(entries) != 0 {
			t.Errorf("%s holds %v (%v), want nothing: the directories RenderInto made are left", parent, entries, err)
		}
	})
	t.Run("a file that cannot be staged replaces nothing", func(t *testing.T) {
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, "ok-01.yaml"), []byte("version: 1\n# old\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		before := dirListing(t, dir)
		long := &Inventory{Nodes: append(append([]InventoryNode(nil), nodes...), InventoryNode{Name: strings.Repeat("n", 250), Site: "s1", Class: "gw"})}
		files, written, err := f.RenderInto(long, dir)
		if err == nil || !strings.Contains(err.Error(), strings.Repeat("n", 250)+".yaml") || files != nil || written != nil {
			t.Fatalf("RenderInto = %d files, %v, %v; want nothing and an error naming the file", len(files), written, err)
		}
		if diff := cmp.Diff(before, dirListing(t, dir)); diff != "" {
			t.Errorf("directory changed (-before +after):\n%s", diff)
		}
	})
}
