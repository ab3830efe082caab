package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/edgeheal/edgeheal/configs"
)

const fleetDir = "../../configs/fleet"

// Exit codes of render, as they were when it was the daemon's command.
const (
	exitOK      = 0
	exitProblem = 1
	exitCantRun = 2
)

// runCommand runs edgeheal-fleet with args.
func runCommand(args ...string) (code int, stdout, stderr string) {
	var out, errb bytes.Buffer
	code = run(args, &out, &errb)
	return code, out.String(), errb.String()
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestRenderWritesOneValidFilePerNode(t *testing.T) {
	out := filepath.Join(t.TempDir(), "out")
	code, stdout, stderr := runCommand("render", "--templates", fleetDir, "--inventory", filepath.Join(fleetDir, "inventory.example.yaml"), "--out", out)
	if code != exitOK {
		t.Fatalf("exit code = %d, want 0; stderr:\n%s", code, stderr)
	}
	if !strings.Contains(stdout, "rendered 5 node(s)") {
		t.Errorf("stdout = %q", stdout)
	}
	// Each file, installed as the node's drop-in over the packaged main
	// file, loads as `edgeheal config check` loads it.
	for _, node := range []string{"plant7-gw-01", "plant9-worker-01"} {
		etc := t.TempDir()
		data, err := os.ReadFile(filepath.Join(out, node+".yaml"))
		if err != nil {
			t.Fatal(err)
		}
		writeFile(t, filepath.Join(etc, "config.d", "50-fleet.yaml"), string(data))
		main, err := os.ReadFile("../../packaging/config.yaml")
		if err != nil {
			t.Fatal(err)
		}
		writeFile(t, filepath.Join(etc, "config.yaml"), string(main))
		if _, err := configs.Load(filepath.Join(etc, "config.yaml")); err != nil {
			t.Errorf("%s's file over the packaged config: %v", node, err)
		}
	}
}

// Rendering again into the same directory writes only the nodes whose
// file changed, and says so for each node and in the summary.
func TestRenderAgainWritesOnlyTheNodesThatChanged(t *testing.T) {
	dir := t.TempDir()
	example, err := os.ReadFile(filepath.Join(fleetDir, "inventory.example.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	inv := filepath.Join(dir, "inventory.yaml")
	writeFile(t, inv, string(example))
	out := filepath.Join(dir, "out")
	render := func() string {
		t.Helper()
		code, stdout, stderr := runCommand("render", "--templates", fleetDir, "--inventory", inv, "--out", out)
		if code != exitOK {
			t.Fatalf("exit code = %d, want 0; stderr:\n%s", code, stderr)
		}
		return stdout
	}
	if got := render(); !strings.Contains(got, "rendered 5 node(s) into "+out+": 5 written, 0 unchanged\n") {
		t.Errorf("first render, stdout:\n%s", got)
	}
	if got := render(); !strings.Contains(got, ": 0 written, 5 unchanged\n") || !strings.Contains(got, "plant9-gw-01: plant9-gw-01.yaml valid, unchanged\n") {
		t.Errorf("the same render again, stdout:\n%s", got)
	}
	changed := strings.Replace(string(example), "  - name: plant9-gw-01\n    site: plant-9\n    class: gw-fiber\n",
		"  - name: plant9-gw-01\n    site: plant-9\n    class: gw-fiber\n    vars: {dry_run: true}\n", 1)
	if changed == string(example) {
		t.Fatal("the example inventory no longer lists plant9-gw-01 as this test expects")
	}
	writeFile(t, inv, changed)
	got := render()
	for _, want := range []string{": 1 written, 4 unchanged\n", "plant9-gw-01: plant9-gw-01.yaml valid, written\n", "plant7-gw-01: plant7-gw-01.yaml valid, unchanged\n"} {
		if !strings.Contains(got, want) {
			t.Errorf("after one node changed, stdout lacks %q:\n%s", want, got)
		}
	}
	data, err := os.ReadFile(filepath.Join(out, "plant9-gw-01.yaml"))
	if err != nil || !strings.Contains(string(data), "dry_run: true\n") {
		t.Errorf("plant9-gw-01.yaml after the change (err %v):\n%s", err, data)
	}
}

func TestRenderWithTwoBadNodesListsBothAndWritesNothing(t *testing.T) {
	dir := t.TempDir()
	inv := filepath.Join(dir, "inventory.yaml")
	writeFile(t, inv, `vars:
  dry_run: false
  report: {broker: "ssl://mqtt.example.net:8883", server_name: mqtt.example.net}
nodes:
  - {name: good-1, site: plant-7, class: worker}
  - {name: bad-lte, site: plant-7, class: gw-lte}          # no uplink variable
  - {name: bad-keepalive, site: plant-9, class: gw-fiber, vars: {tunnel: {keepalive: 90000s}}}
  - {name: good-2, site: plant-9, class: gw-fiber}
`)
	out := filepath.Join(dir, "out")
	code, stdout, stderr := runCommand("render", "--templates", fleetDir, "--inventory", inv, "--out", out)
	if code != exitProblem {
		t.Errorf("exit code = %d, want %d", code, exitProblem)
	}
	if stdout != "" {
		t.Errorf("stdout = %q, want nothing", stdout)
	}
	for _, want := range []string{
		"nothing written",
		"2 node(s) failed",
		`node bad-lte (bad-lte.yaml): rendering:`, `map has no entry for key "uplink"`,
		"node bad-keepalive (bad-keepalive.yaml): invalid:",
		"bad-keepalive.yaml: tunnels[0].persistent_keepalive: 90000s is out of range (0..65535s)",
	} {
		if !strings.Contains(stderr, want) {
			t.Errorf("stderr lacks %q:\n%s", want, stderr)
		}
	}
	if strings.Contains(stderr, "good-") {
		t.Errorf("stderr names a good node:\n%s", stderr)
	}
	if _, err := os.Stat(out); !os.IsNotExist(err) {
		t.Errorf("output directory exists (err %v): nothing may be written when a node fails", err)
	}
}

// A render that fails leaves the last render's directory as it was: no
// file replaced, no temporary file left.
func TestRenderThatFailsLeavesTheOutputDirectoryAsItWas(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "out")
	if code, _, stderr := runCommand("render", "--templates", fleetDir, "--inventory", filepath.Join(fleetDir, "inventory.example.yaml"), "--out", out); code != exitOK {
		t.Fatalf("the first render: exit %d\n%s", code, stderr)
	}
	before := listing(t, out)
	inv := filepath.Join(dir, "inventory.yaml")
	writeFile(t, inv, `vars:
  dry_run: true
  report: {broker: "ssl://mqtt.example.net:8883", server_name: mqtt.example.net}
nodes:
  - {name: plant7-worker-01, site: plant-7, class: worker}
  - {name: plant9-gw-01, site: plant-9, class: gw-fiber, vars: {tunnel: {keepalive: 1.5s}}}
`)
	code, stdout, stderr := runCommand("render", "--templates", fleetDir, "--inventory", inv, "--out", out)
	if code != exitProblem || stdout != "" || !strings.Contains(stderr, "node plant9-gw-01 (plant9-gw-01.yaml): invalid:") {
		t.Errorf("exit %d, stdout %q, stderr:\n%s\nwant exit %d, nothing on stdout and plant9-gw-01's problem", code, stdout, stderr, exitProblem)
	}
	if diff := cmp.Diff(before, listing(t, out)); diff != "" {
		t.Errorf("the output directory changed (-before +after):\n%s", diff)
	}
}

// listing is every entry of dir, temporary files included, with its content.
func listing(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range entries {
		data, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, e.Name()+"\n"+string(data))
	}
	return got
}

func TestRenderExitCodesForUsageAndUnreadableInput(t *testing.T) {
	dir := t.TempDir()
	tests := []struct {
		name string
		args []string
		code int
		want string
	}{
		{"a missing flag is a usage error", []string{"render", "--templates", fleetDir}, exitCantRun, "are all required"},
		{"a missing inventory could not be read", []string{"render", "--templates", fleetDir, "--inventory", filepath.Join(dir, "nope.yaml"), "--out", dir}, exitCantRun, "reading inventory"},
		{"a missing templates directory could not be read", []string{"render", "--templates", filepath.Join(dir, "nope"), "--inventory", filepath.Join(fleetDir, "inventory.example.yaml"), "--out", dir}, exitCantRun, "reading fleet templates"},
		{"a stray argument is a usage error", []string{"render", "--templates", fleetDir, "--inventory", filepath.Join(fleetDir, "inventory.example.yaml"), "--out", dir, "extra"}, exitCantRun, `unexpected argument "extra"`},
		{"a malformed inventory is a problem, not a usage error", []string{"render", "--templates", fleetDir, "--inventory", filepath.Join(fleetDir, "sites", "plant-7.yaml"), "--out", dir}, exitProblem, "not a valid inventory"},
		{"an output directory that cannot be made could not run", []string{"render", "--templates", fleetDir, "--inventory", filepath.Join(fleetDir, "inventory.example.yaml"), "--out", filepath.Join(fleetDir, "base.yaml.tmpl", "out")}, exitCantRun, "creating output directory"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, _, stderr := runCommand(tt.args...)
			if code != tt.code || !strings.Contains(stderr, tt.want) {
				t.Errorf("exit %d, stderr:\n%s\nwant exit %d and %q", code, stderr, tt.code, tt.want)
			}
		})
	}
}
