package archtest

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
)

const module = "github.com/edgeheal/edgeheal"

// pkg is the part of `go list -json` these tests read.
type pkg struct {
	ImportPath string
	Imports    []string
	Deps       []string
}

// goList runs `go list -json` with args from the module root.
func goList(t *testing.T, args ...string) []pkg {
	t.Helper()
	cmd := exec.Command("go", append([]string{"list", "-json"}, args...)...)
	cmd.Dir = moduleRoot(t)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list %v: %v\n%s", args, err, stderr.String())
	}
	var pkgs []pkg
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		var p pkg
		if err := dec.Decode(&p); err == io.EOF {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		pkgs = append(pkgs, p)
	}
	return pkgs
}

func moduleRoot(t *testing.T) string {
	t.Helper()
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for d := wd; d != filepath.Dir(d); d = filepath.Dir(d) {
		if _, err := os.Stat(filepath.Join(d, "go.mod")); err == nil {
			return d
		}
	}
	t.Fatal("no go.mod above " + wd)
	return ""
}

func ours(path string) (string, bool) {
	if path == module {
		return ".", true
	}
	rel, ok := strings.CutPrefix(path, module+"/")
	return rel, ok
}

func under(rel, dir string) bool { return rel == dir || strings.HasPrefix(rel, dir+"/") }

// TestTheDaemonLinksOnlyProductCode: the edge binary links no lab, bench
// or test-support package, nothing of fleet/ (the fleet view, nor
// fleet/render: rendering fleet templates is edgeheal-fleet's), not the
// testing package, no template package, and none of the dependencies
// replaced for its weight (grpc-go, client_golang and protobuf's runtime);
// cmd/edgeheal imports only agent (and its subpackages), configs, broker
// and wire of ours.
// templatePackages are the standard library's template packages: only the
// fleet side (fleet/render, and fleet/web's page) may link them.
var templatePackages = map[string]bool{
	"text/template":       true,
	"text/template/parse": true,
	"html/template":       true,
}

func TestTheDaemonLinksOnlyProductCode(t *testing.T) {
	p := goList(t, "-deps", "./cmd/edgeheal")
	var bad []string
	for _, d := range p {
		rel, mine := ours(d.ImportPath)
		switch {
		case d.ImportPath == "testing":
			bad = append(bad, "testing (the standard library's test support)")
		case mine && (under(rel, "lab") || under(rel, "internal") || under(rel, "fleet")):
			bad = append(bad, d.ImportPath)
		case under(d.ImportPath, "google.golang.org/grpc") || under(d.ImportPath, "k8s.io/cri-api"):
			// probes speaks the two CRI calls itself: grpc-go was 2.9 MB of
			// the binary and 3 MiB of its RSS (docs/performance.md).
			bad = append(bad, d.ImportPath+" (the edge binary's weight: probes/cri_client.go speaks CRI without it)")
		case under(d.ImportPath, "github.com/prometheus") || under(d.ImportPath, "google.golang.org/protobuf/proto") ||
			under(d.ImportPath, "google.golang.org/protobuf/reflect"):
			// agent/metrics writes the text format itself: client_golang
			// with client_model, protobuf and procfs was 2.1 MB of the
			// binary (docs/performance.md, "Binary size"). probes'
			// CRI client uses only protobuf's protowire.
			bad = append(bad, d.ImportPath+" (the edge binary's weight: agent/metrics writes the Prometheus text format itself)")
		case templatePackages[d.ImportPath]:
			// The agent renders no templates (edgeheal-fleet render does),
			// and text/template's MethodByName keeps every exported method
			// of every type in the binary: 2.8 MB (docs/performance.md,
			// "Binary size").
			bad = append(bad, d.ImportPath+" (templates are edgeheal-fleet render's, not the daemon's)")
		}
	}
	for _, d := range p {
		if d.ImportPath != module+"/cmd/edgeheal" {
			continue
		}
		for _, imp := range d.Imports {
			rel, mine := ours(imp)
			if mine && !under(rel, "agent") && rel != "configs" && rel != "broker" && rel != "wire" && rel != "localapi" {
				bad = append(bad, "cmd/edgeheal imports "+rel+" (only agent/..., configs, broker, localapi and wire of ours)")
			}
		}
	}
	if len(bad) > 0 {
		t.Errorf("the daemon links what it must not:\n  %s", strings.Join(bad, "\n  "))
	}
}

// TestTheFleetViewLinksOnlyItsOwnCode: edgeheal-fleet is a second
// product, deployed in the cloud. It links fleet/..., broker (the one
// parsing of broker URLs, TLS and password files) and wire (the JSON it
// reads) of ours, and nothing of the agent: the agent's internals (its OS
// backend, netlink, ethtool, wgctrl) have no business in the cloud. Nor
// does it link the lab, test support or the testing package. configs,
// the edge schema, comes in only through fleet/render, which validates
// each rendered node file with the agent's own code.
func TestTheFleetViewLinksOnlyItsOwnCode(t *testing.T) {
	var bad []string
	for _, d := range goList(t, "-deps", "./cmd/edgeheal-fleet") {
		rel, mine := ours(d.ImportPath)
		switch {
		case d.ImportPath == "testing":
			bad = append(bad, "testing (the standard library's test support)")
		case mine && !under(rel, "fleet") && !under(rel, "configs") && rel != "broker" && rel != "wire" && rel != "regfile" && rel != "cmd/edgeheal-fleet":
			bad = append(bad, rel+" (only fleet/..., broker, regfile and wire of ours, configs through fleet/render)")
		}
		for _, imp := range d.Imports {
			irel, _ := ours(imp)
			if mine && under(irel, "configs") && !configsImporters[rel] {
				bad = append(bad, rel+" imports "+irel+" (edgeheal-fleet links configs only through fleet/render)")
			}
		}
	}
	if len(bad) > 0 {
		t.Errorf("edgeheal-fleet links what it must not:\n  %s", strings.Join(bad, "\n  "))
	}
}

// configsImporters are the packages of edgeheal-fleet that may import
// configs: fleet/render alone, which validates every node file it renders
// with the agent's schema code.
var configsImporters = map[string]bool{
	"fleet/render": true,
}

// TestTheFleetViewDoesNotRender: the fleet view's packages serve what the
// agents report; rendering their configs is fleet/render's, which they
// never import, so that neither grows into the other.
func TestTheFleetViewDoesNotRender(t *testing.T) {
	view := map[string]bool{"fleet": true, "fleet/source": true, "fleet/web": true}
	var bad []string
	for _, p := range goList(t, "-deps", "./fleet/...") {
		rel, _ := ours(p.ImportPath)
		if !view[rel] {
			continue
		}
		delete(view, rel)
		for _, d := range p.Deps {
			if drel, _ := ours(d); under(drel, "fleet/render") {
				bad = append(bad, rel+" depends on "+drel)
			}
		}
	}
	for rel := range view {
		bad = append(bad, rel+" is gone: say in this test which packages are the fleet view now")
	}
	sort.Strings(bad)
	if len(bad) > 0 {
		t.Errorf("the fleet view renders:\n  %s", strings.Join(bad, "\n  "))
	}
}

// TestTheKubernetesReporterLinksOnlyItsOwnCode: edgeheal-kube reads the
// agent's JSON, not its code, which keeps it small; it renders nothing,
// so it links no template package and not fleet/render.
func TestTheKubernetesReporterLinksOnlyItsOwnCode(t *testing.T) {
	var bad []string
	for _, d := range goList(t, "-deps", "./cmd/edgeheal-kube") {
		rel, mine := ours(d.ImportPath)
		switch {
		case d.ImportPath == "testing":
			bad = append(bad, "testing (the standard library's test support)")
		case templatePackages[d.ImportPath] || (mine && under(rel, "fleet/render")):
			bad = append(bad, d.ImportPath+" (edgeheal-kube renders nothing)")
		case mine && !under(rel, "kube") && !under(rel, "configs") && rel != "broker" && rel != "wire" && rel != "regfile" &&
			rel != "localapi" && rel != "cmd/edgeheal-kube":
			bad = append(bad, rel+" (only kube/..., configs, broker, regfile, localapi and wire of ours)")
		}
	}
	if len(bad) > 0 {
		t.Errorf("edgeheal-kube links what it must not:\n  %s", strings.Join(bad, "\n  "))
	}
}

// TestImportsFlowOneWay: cmd → agent → (components, reporters) → core →
// (probes, netfix, configs, wire); probes and netfix never import each
// other, and none of them imports agent. Within agent, the components
// (offload, tunnel, workload, clock) import the core, never each other,
// the reporting packages or the wiring; the reporting packages import
// the core, never a component: whatever one part does, it cannot reach
// into another. wire and broker import nothing of ours: every program
// may link them.
func TestImportsFlowOneWay(t *testing.T) {
	components := []string{"agent/offload", "agent/tunnel", "agent/workload", "agent/clock"}
	reporters := []string{"agent/recorder", "agent/history", "agent/outbox", "agent/mqtt", "agent/httpapi", "agent/metrics", "agent/evidence", "agent/system"}
	rules := []struct {
		pkg, must string
		not       []string
	}{
		{"probes", "probes never imports netfix or agent", []string{"netfix", "agent"}},
		{"netfix", "netfix never imports probes or agent", []string{"probes", "agent"}},
		{"configs", "configs imports nothing of agent, probes or netfix", []string{"agent", "probes", "netfix"}},
		{"agent", "agent imports no command, lab, test support or fleet view", []string{"cmd", "lab", "internal", "fleet"}},
		{"fleet", "the fleet view reads the agents' JSON, not their code: no agent, probes, netfix, lab, command or test support",
			[]string{"agent", "probes", "netfix", "lab", "cmd", "internal"}},
		{"wire", "wire is the shared vocabulary: it imports nothing of ours", []string{""}},
		{"regfile", "regfile, the one way files are read, imports nothing of ours", []string{""}},
		{"broker", "broker imports nothing of ours but regfile", []string{"!regfile"}},
		{"localapi", "localapi, the local API's client, imports nothing of ours but wire", []string{"!wire"}},
		{"agent/core", "the core imports no other part of the agent", append(append([]string{"agent/"}, components...), reporters...)},
	}
	for _, c := range components {
		rules = append(rules, struct {
			pkg, must string
			not       []string
		}{c, c + " imports the core, never another component, a reporting package or the wiring", append(append([]string{"agent"}, components...), reporters...)})
	}
	for _, r := range reporters {
		rules = append(rules, struct {
			pkg, must string
			not       []string
		}{r, r + " imports the core, never a component or the wiring", append([]string{"agent"}, components...)})
	}
	var bad []string
	for _, p := range goList(t, "-deps", "./...") {
		rel, mine := ours(p.ImportPath)
		if !mine {
			continue
		}
		for _, r := range rules {
			if !under(rel, r.pkg) {
				continue
			}
			for _, d := range p.Deps {
				drel, dmine := ours(d)
				if !dmine || drel == rel {
					continue
				}
				for _, n := range r.not {
					if forbidden(r.pkg, drel, n) {
						bad = append(bad, fmt.Sprintf("%s depends on %s: %s", rel, drel, r.must))
					}
				}
			}
		}
	}
	sort.Strings(bad)
	bad = slices.Compact(bad)
	if len(bad) > 0 {
		t.Errorf("imports that run the wrong way:\n  %s", strings.Join(bad, "\n  "))
	}
}

// forbidden reports whether pkg may not depend on dep by the rule "not n":
// "" forbids everything of ours, "!x" everything of ours but x, "agent/" every package under agent but
// the core's own dependencies, "agent" the agent package itself (its
// subpackages are the rules' business) and anything else n and what is
// under it. A package is never forbidden what is under itself.
func forbidden(pkg, dep, n string) bool {
	switch {
	case under(dep, pkg):
		return false
	case n == "":
		return true
	case strings.HasPrefix(n, "!"):
		// "!x": everything of ours but x
		return !under(dep, n[1:])
	case n == "agent/":
		return strings.HasPrefix(dep, "agent/") && dep != "agent/core"
	case n == "agent" && strings.HasPrefix(pkg, "agent"):
		return dep == "agent"
	}
	return under(dep, n) && !(n == "agent" && under(pkg, "agent"))
}

// TestNoCodeOfOursLaysOutKernelStructs: no package of ours (tests and
// test support included) imports unsafe, so every struct handed to the
// kernel is declared by x/sys/unix (generated for each architecture) or
// by a library whose layout docs/development.md, "Architectures",
// vouches for: the arm64 build cannot differ from the amd64 one in a
// layout of ours.
func TestNoCodeOfOursLaysOutKernelStructs(t *testing.T) {
	seen := map[string]bool{}
	var bad []string
	for _, p := range goList(t, "-test", "./...") {
		rel, mine := ours(p.ImportPath)
		rel, _, _ = strings.Cut(rel, " ") // "agent [agent.test]": agent with its tests
		if !mine || seen[rel] {
			continue
		}
		for _, imp := range p.Imports {
			if imp == "unsafe" {
				seen[rel] = true
				bad = append(bad, rel)
			}
		}
	}
	if len(bad) > 0 {
		t.Errorf("import unsafe (lay out kernel structs through x/sys/unix or a library docs/development.md, \"Architectures\", names):\n  %s", strings.Join(bad, "\n  "))
	}
}

// Sizes of production code: no function over 80 lines, no file over 500.
const (
	maxFuncLines = 80
	maxFileLines = 500
)

// sizeExempt are the production files allowed to be longer, each with
// why. A table can make the lab or the bench larger; say so here rather
// than raising the limits.
var sizeExempt = map[string]string{}

// production reports whether a Go file is product code (the daemon, the
// fleet side and the lab): not a test, not test support.
func production(rel string) bool {
	return strings.HasSuffix(rel, ".go") && !strings.HasSuffix(rel, "_test.go") &&
		!under(rel, "internal") && !under(rel, "packaging")
}

func TestProductionFunctionsAndFilesStaySmall(t *testing.T) {
	root := moduleRoot(t)
	var bad []string
	fset := token.NewFileSet()
	err := filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		if d.IsDir() && (strings.HasPrefix(d.Name(), ".") && rel != ".") {
			return filepath.SkipDir
		}
		if d.IsDir() || !production(filepath.ToSlash(rel)) {
			return nil
		}
		if _, ok := sizeExempt[filepath.ToSlash(rel)]; ok {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, 0)
		if err != nil {
			return err
		}
		if n := lineCount(t, path); n > maxFileLines {
			bad = append(bad, fmt.Sprintf("%s: %d lines (at most %d)", rel, n, maxFileLines))
		}
		for _, decl := range f.Decls {
			fd, ok := decl.(*ast.FuncDecl)
			if !ok {
				continue
			}
			n := fset.Position(fd.End()).Line - fset.Position(fd.Pos()).Line + 1
			if n > maxFuncLines {
				bad = append(bad, fmt.Sprintf("%s: func %s: %d lines (at most %d)", rel, fd.Name.Name, n, maxFuncLines))
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(bad) > 0 {
		t.Errorf("production code over its size limits (split it by concern):\n  %s", strings.Join(bad, "\n  "))
	}
}

func lineCount(t *testing.T, path string) int {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	n := 0
	s := bufio.NewScanner(f)
	for s.Scan() {
		n++
	}
	return n
}
