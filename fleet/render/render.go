// Package render turns fleet templates and an inventory into one plain,
// validated config file per node, and writes those files into a
// directory: `edgeheal-fleet render`, run on an operator's workstation or
// in CI.
//
// It owns the template language (templates.go), the inventory
// (inventory.go), rendering and validating every node (this file) and
// replacing the files (write.go). It never decides what a valid config
// is: each file is checked by configs.Check, the schema code `edgeheal
// config check` runs on a node. The edge daemon must never link it, nor
// the fleet view's packages (internal/archtest holds both).
package render

import (
	"bytes"
	"errors"
	"fmt"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"sync"
	"text/template"

	"github.com/edgeheal/edgeheal/configs"
)

// File is one node's rendered, validated config file.
type File struct {
	Node string // the inventory node name
	Name string // the file name in the output directory: <node>.yaml
	Data []byte
}

// NodeError is why one node could not be rendered or did not validate.
type NodeError struct {
	Node string
	File string
	Err  error
}

func (e NodeError) Error() string {
	return fmt.Sprintf("node %s (%s): %s", e.Node, e.File, strings.ReplaceAll(e.Err.Error(), "\n", "\n    "))
}

func (e NodeError) Unwrap() error { return e.Err }

// Error lists every node that failed, sorted by node name.
type Error struct {
	Nodes []NodeError
}

func (e *Error) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d node(s) failed:", len(e.Nodes))
	for _, n := range e.Nodes {
		b.WriteString("\n  ")
		b.WriteString(strings.ReplaceAll(n.Error(), "\n", "\n  "))
	}
	return b.String()
}

// nodeNameRe is what a node (and so a file) name may be: it also has to pass
// node.name validation and stay inside the output directory.
var nodeNameRe = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]*$`)

// Render renders and validates every node of inv, and returns their files
// sorted by node name. When any node fails it returns no file and an
// *Error listing every failing node with its reason. The same inputs give
// the same bytes. Nodes are rendered on runtime.GOMAXPROCS(0) goroutines:
// each is independent, and the templates are only read.
func (t *Templates) Render(inv *Inventory) ([]File, error) {
	nodes := slices.Clone(inv.Nodes)
	slices.SortStableFunc(nodes, func(a, b Node) int { return strings.Compare(a.Name, b.Name) })
	files := make([]File, len(nodes))
	errs := make([]error, len(nodes))
	parallel(len(nodes), func(i int) {
		files[i], errs[i] = t.renderNode(inv.Vars, nodes[i])
	})
	var failed []NodeError
	for i, n := range nodes {
		err := errs[i]
		if i > 0 && nodes[i-1].Name == n.Name {
			err = errors.New("listed more than once in the inventory")
		}
		if err != nil {
			failed = append(failed, NodeError{Node: n.Name, File: fileName(n), Err: err})
		}
	}
	if len(failed) > 0 {
		return nil, &Error{Nodes: failed}
	}
	return files, nil
}

// parallel calls do(i) for every i in [0, n) on a pool of
// runtime.GOMAXPROCS(0) goroutines, and returns when every call has.
func parallel(n int, do func(i int)) {
	next := make(chan int)
	var wg sync.WaitGroup
	for range min(runtime.GOMAXPROCS(0), n) {
		wg.Go(func() {
			for i := range next {
				do(i)
			}
		})
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
}

func fileName(n Node) string { return n.Name + ".yaml" }

// renderNode runs the node's class template over its variables and
// validates the result as the node itself will.
func (t *Templates) renderNode(fleetVars map[string]any, n Node) (File, error) {
	f := File{Node: n.Name, Name: fileName(n)}
	if !nodeNameRe.MatchString(n.Name) {
		return f, fmt.Errorf("name %q: use letters, digits, '.', '_' and '-' (it is the file name and node.name)", n.Name)
	}
	class, err := t.class(n.Class)
	if err != nil {
		return f, err
	}
	siteVars, err := t.site(n.Site)
	if err != nil {
		return f, err
	}
	var d data
	d.Node.Name, d.Node.Site, d.Node.Class = n.Name, n.Site, n.Class
	d.Vars = mergeVars(mergeVars(mergeVars(map[string]any{}, fleetVars), siteVars), n.Vars)
	var buf bytes.Buffer
	if err := class.ExecuteTemplate(&buf, BaseTemplate, d); err != nil {
		return f, fmt.Errorf("rendering: %w", err)
	}
	if bytes.Contains(buf.Bytes(), []byte("<no value>")) {
		return f, errors.New("rendering: a variable is null (renders as <no value>): give it a value")
	}
	cfg, err := configs.Check(f.Name, buf.Bytes())
	if err != nil {
		return f, fmt.Errorf("invalid:\n%w", err)
	}
	if cfg.Node.Name != n.Name {
		return f, fmt.Errorf("renders node.name %q, want the inventory name %q: base must set node.name to .Node.Name", cfg.Node.Name, n.Name)
	}
	f.Data = buf.Bytes()
	return f, nil
}

// class is the template of a class: base with the class's overrides.
func (t *Templates) class(name string) (*template.Template, error) {
	if name == "" {
		return nil, errors.New("no class")
	}
	c, ok := t.classes[name]
	if !ok {
		return nil, fmt.Errorf("class %q has no template %s", name, filepath.Join(t.dir, ClassesDir, name+templateExt))
	}
	if c.err != nil {
		return nil, fmt.Errorf("class %q: %w", name, c.err)
	}
	return c.t, nil
}

// site is the variables of a site.
func (t *Templates) site(name string) (map[string]any, error) {
	if name == "" {
		return nil, errors.New("no site")
	}
	s, ok := t.sites[name]
	if !ok {
		return nil, fmt.Errorf("site %q has no variables file %s", name, filepath.Join(t.dir, SitesDir, name+".yaml"))
	}
	if s.err != nil {
		return nil, fmt.Errorf("site %q: %w", name, s.err)
	}
	return s.vars, nil
}
