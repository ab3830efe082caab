package configs

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"sort"
	"strings"
	"sync"
	"sync/atomic"

	"text/template/parse"

	"go.yaml.in/yaml/v3"

	"github.com/edgeheal/edgeheal/configs/internal/template"
)

// A fleet templates directory holds:
//
//	base.yaml.tmpl            the whole document; {{block "name" .}} marks what a class may replace
//	classes/<class>.yaml.tmpl {{define "name"}} overrides of base's blocks, nothing else
//	sites/<site>.yaml         variables of one site (a YAML mapping)
//
// Templates are Go text/template with missingkey=error (executed by
// configs/internal/template: the same language without method calls on
// data, which this data has none of): a variable that no
// layer sets stops that node's rendering. A template sees
//
//	.Node.Name .Node.Site .Node.Class   from the inventory
//	.Vars                               inventory vars < site file < node vars, maps merged
//
// and the functions quote (a value as a YAML double-quoted string) and json
// (a value as YAML flow: lists, maps, numbers, booleans).
const (
	BaseTemplate = "base.yaml.tmpl"
	ClassesDir   = "classes"
	SitesDir     = "sites"
	templateExt  = ".yaml.tmpl"
)

// Inventory lists the nodes to render. Vars are fleet-wide variables, the
// lowest layer under each site's and node's own.
type Inventory struct {
	Vars  map[string]any  `yaml:"vars"`
	Nodes []InventoryNode `yaml:"nodes"`
}

// InventoryNode is one node: its name (also its rendered file's name), its
// site (sites/<site>.yaml), its class (classes/<class>.yaml.tmpl) and its
// own variables, which win over the site's.
type InventoryNode struct {
	Name  string         `yaml:"name"`
	Site  string         `yaml:"site"`
	Class string         `yaml:"class"`
	Vars  map[string]any `yaml:"vars"`
}

// Rendered is one node's plain config file.
type Rendered struct {
	Node string // the inventory node name
	File string // the file name in the output directory: <node>.yaml
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

// RenderError lists every node that failed, sorted by node name.
type RenderError struct {
	Nodes []NodeError
}

func (e *RenderError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d node(s) failed:", len(e.Nodes))
	for _, n := range e.Nodes {
		b.WriteString("\n  ")
		b.WriteString(strings.ReplaceAll(n.Error(), "\n", "\n  "))
	}
	return b.String()
}

// Fleet is a parsed fleet templates directory.
type Fleet struct {
	dir     string
	base    *template.Template
	blocks  map[string]bool           // templates base defines (its blocks)
	classes map[string]classTemplate  // by class name
	sites   map[string]map[string]any // by site name
}

type classTemplate struct {
	t   *template.Template // base with the class's overrides
	err error              // why the class template is unusable
}

// nodeNameRe is what a node (and so a file) name may be: it also has to pass
// node.name validation and stay inside the output directory.
var nodeNameRe = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]*$`)

var templateFuncs = template.FuncMap{
	"quote": quoteYAML,
	"json":  flowYAML,
}

// quoteYAML writes v as a double-quoted scalar: JSON strings are valid YAML
// and cannot break out of the line they are on.
func quoteYAML(v any) (string, error) {
	if v == nil {
		return "", errors.New("quote: the value is null")
	}
	s, ok := v.(string)
	if !ok {
		s = fmt.Sprint(v)
	}
	out, err := json.Marshal(s)
	return string(out), err
}

// flowYAML writes v in YAML flow style (JSON, with map keys sorted).
func flowYAML(v any) (string, error) {
	out, err := json.Marshal(v)
	if err != nil {
		return "", fmt.Errorf("json: %w", err)
	}
	return string(out), nil
}

// LoadFleet reads and parses a templates directory. An unreadable or
// unparsable base template is an error; a broken class template or site
// file fails only the nodes that use it, at Render.
func LoadFleet(dir string) (*Fleet, error) {
	f := &Fleet{dir: dir, blocks: map[string]bool{}, classes: map[string]classTemplate{}, sites: map[string]map[string]any{}}
	basePath := filepath.Join(dir, BaseTemplate)
	data, err := os.ReadFile(basePath)
	if err != nil {
		return nil, fmt.Errorf("reading fleet templates: %w", err)
	}
	f.base, err = template.New(BaseTemplate).Option("missingkey=error").Funcs(templateFuncs).Parse(string(data))
	if err != nil {
		return nil, fmt.Errorf("parsing %s: %w", basePath, err)
	}
	for _, t := range f.base.Templates() {
		if t.Name() != BaseTemplate {
			f.blocks[t.Name()] = true
		}
	}
	classFiles, err := filepath.Glob(filepath.Join(dir, ClassesDir, "*"+templateExt))
	if err != nil {
		return nil, fmt.Errorf("listing class templates: %w", err)
	}
	for _, path := range classFiles {
		name := strings.TrimSuffix(filepath.Base(path), templateExt)
		data, err := os.ReadFile(path)
		if err != nil {
			return nil, fmt.Errorf("reading class template: %w", err)
		}
		f.classes[name] = f.parseClass(path, data)
	}
	siteFiles, err := filepath.Glob(filepath.Join(dir, SitesDir, "*.yaml"))
	if err != nil {
		return nil, fmt.Errorf("listing site files: %w", err)
	}
	for _, path := range siteFiles {
		name := strings.TrimSuffix(filepath.Base(path), ".yaml")
		data, err := os.ReadFile(path)
		if err != nil {
			return nil, fmt.Errorf("reading site variables: %w", err)
		}
		vars, err := decodeVars(data)
		if err != nil {
			// Kept as a nil map with the reason: only this site's nodes fail.
			f.sites[name] = map[string]any{siteErrKey: fmt.Errorf("%s: %w", path, err)}
			continue
		}
		f.sites[name] = vars
	}
	return f, nil
}

// siteErrKey cannot be a YAML key written by a person: it marks a site file
// that did not decode.
const siteErrKey = "\x00error"

// parseClass parses a class file over a copy of base. Its only content may
// be {{define}}s of blocks base has, so that a typo in a block name is an
// error rather than a silently ignored override.
func (f *Fleet) parseClass(path string, data []byte) classTemplate {
	t, err := f.base.Clone()
	if err != nil {
		return classTemplate{err: err}
	}
	body := path // names the class file in template errors
	ct, err := t.New(body).Parse(string(data))
	if err != nil {
		return classTemplate{err: fmt.Errorf("parsing %s: %w", path, err)}
	}
	if ct.Tree != nil && !onlySpace(ct.Tree.Root) {
		return classTemplate{err: fmt.Errorf("%s: text outside {{define}}: a class template only overrides base's blocks", path)}
	}
	var unknown []string
	for _, d := range t.Templates() {
		if n := d.Name(); n != BaseTemplate && n != body && !f.blocks[n] {
			unknown = append(unknown, n)
		}
	}
	if len(unknown) > 0 {
		sort.Strings(unknown)
		known := make([]string, 0, len(f.blocks))
		for b := range f.blocks {
			known = append(known, b)
		}
		sort.Strings(known)
		return classTemplate{err: fmt.Errorf("%s: defines %s, which %s has no block for (blocks: %s)",
			path, strings.Join(unknown, ", "), BaseTemplate, strings.Join(known, ", "))}
	}
	return classTemplate{t: t}
}

// onlySpace reports whether a template body holds nothing but white space.
func onlySpace(root *parse.ListNode) bool {
	if root == nil {
		return true
	}
	for _, n := range root.Nodes {
		tn, ok := n.(*parse.TextNode)
		if !ok || len(bytes.TrimSpace(tn.Text)) > 0 {
			return false
		}
	}
	return true
}

// decodeVars decodes a YAML mapping of variables; empty is an empty map.
func decodeVars(data []byte) (map[string]any, error) {
	var vars map[string]any
	if err := yaml.Unmarshal(data, &vars); err != nil {
		return nil, fmt.Errorf("not a YAML mapping of variables: %s", strings.TrimPrefix(err.Error(), "yaml: "))
	}
	if vars == nil {
		vars = map[string]any{}
	}
	return vars, nil
}

// LoadInventory reads an inventory file strictly: unknown keys are errors.
// An unreadable file is an error matching os.ErrNotExist or
// os.ErrPermission; a malformed one is not.
func LoadInventory(path string) (*Inventory, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading inventory: %w", err)
	}
	return ParseInventory(path, data)
}

// ParseInventory decodes inventory bytes; name is used in errors.
func ParseInventory(name string, data []byte) (*Inventory, error) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	var inv Inventory
	if err := dec.Decode(&inv); err != nil {
		return nil, fmt.Errorf("%s: not a valid inventory: %s", name, strings.TrimPrefix(err.Error(), "yaml: "))
	}
	if len(inv.Nodes) == 0 {
		return nil, fmt.Errorf("%s: no nodes", name)
	}
	return &inv, nil
}

// Render renders and validates every node of inv, sorted by node name. It
// returns all files or, when any node fails, no file and a *RenderError
// listing every failing node with its reason. The same inputs give the same
// bytes.
func (f *Fleet) Render(inv *Inventory) ([]Rendered, error) {
	return f.render(inv, newShapeCache(), nil)
}

// render is Render, parsing each shape of file once with shapes
// (configs/render_shape.go), or every file from its bytes when shapes is
// nil. each, when set, is called with every node that rendered and
// validated, as soon as it has, with its index among the nodes sorted by
// name (which is its index in the result when no node fails).
func (f *Fleet) render(inv *Inventory, shapes *shapeCache, each func(i int, r Rendered)) ([]Rendered, error) {
	nodes := append([]InventoryNode(nil), inv.Nodes...)
	sort.SliceStable(nodes, func(i, j int) bool { return nodes[i].Name < nodes[j].Name })
	data, errs := f.renderAll(inv.Vars, nodes, shapes, each)
	var out []Rendered
	var failed []NodeError
	for i, n := range nodes {
		file := n.Name + ".yaml"
		err := errs[i]
		if i > 0 && nodes[i-1].Name == n.Name {
			err = fmt.Errorf("listed more than once in the inventory")
		}
		if err != nil {
			failed = append(failed, NodeError{Node: n.Name, File: file, Err: err})
			continue
		}
		out = append(out, Rendered{Node: n.Name, File: file, Data: data[i]})
	}
	if len(failed) > 0 {
		return nil, &RenderError{Nodes: failed}
	}
	return out, nil
}

// renderAll renders and validates every node on every core: each node is
// independent (the templates are only read, each Build has its own
// trees), and validation is most of the cost (docs/performance.md,
// "edgeheal render at fleet scale"). Results keep the order of nodes.
func (f *Fleet) renderAll(fleetVars map[string]any, nodes []InventoryNode, shapes *shapeCache, each func(i int, r Rendered)) ([][]byte, []error) {
	data := make([][]byte, len(nodes))
	errs := make([]error, len(nodes))
	forEach(len(nodes), runtime.GOMAXPROCS(0), func(i int) {
		file := nodes[i].Name + ".yaml"
		data[i], errs[i] = f.renderNode(fleetVars, nodes[i], file, shapes)
		if errs[i] == nil && each != nil {
			each(i, Rendered{Node: nodes[i].Name, File: file, Data: data[i]})
		}
	})
	return data, errs
}

// forEach calls do(i) for every i in [0, n) on at most workers goroutines
// and returns when every call has.
func forEach(n, workers int, do func(i int)) {
	var next atomic.Int64
	var wg sync.WaitGroup
	for range min(workers, n) {
		wg.Go(func() {
			for i := int(next.Add(1) - 1); i < n; i = int(next.Add(1) - 1) {
				do(i)
			}
		})
	}
	wg.Wait()
}

func (f *Fleet) renderNode(fleetVars map[string]any, n InventoryNode, file string, shapes *shapeCache) ([]byte, error) {
	if !nodeNameRe.MatchString(n.Name) {
		return nil, fmt.Errorf("name %q: use letters, digits, '.', '_' and '-' (it is the file name and node.name)", n.Name)
	}
	if n.Class == "" {
		return nil, errors.New("no class")
	}
	ct, ok := f.classes[n.Class]
	if !ok {
		return nil, fmt.Errorf("class %q has no template %s", n.Class, filepath.Join(f.dir, ClassesDir, n.Class+templateExt))
	}
	if ct.err != nil {
		return nil, fmt.Errorf("class %q: %w", n.Class, ct.err)
	}
	if n.Site == "" {
		return nil, errors.New("no site")
	}
	site, ok := f.sites[n.Site]
	if !ok {
		return nil, fmt.Errorf("site %q has no variables file %s", n.Site, filepath.Join(f.dir, SitesDir, n.Site+".yaml"))
	}
	if e, bad := site[siteErrKey].(error); bad {
		return nil, fmt.Errorf("site %q: %w", n.Site, e)
	}
	vars := mergeVars(mergeVars(mergeVars(map[string]any{}, fleetVars), site), n.Vars)
	data := struct {
		Node struct{ Name, Site, Class string }
		Vars map[string]any
	}{Vars: vars}
	data.Node.Name, data.Node.Site, data.Node.Class = n.Name, n.Site, n.Class
	var out io.Writer
	var buf bytes.Buffer
	var w *shapeWriter
	if shapes != nil {
		w = &shapeWriter{nonce: shapes.nonce}
		out = w
	} else {
		out = &buf
	}
	if err := ct.t.ExecuteTemplate(out, BaseTemplate, data); err != nil {
		return nil, fmt.Errorf("rendering: %w", err)
	}
	src := Source{Name: file, Data: buf.Bytes()}
	if w != nil {
		src.Data = w.file.Bytes()
	}
	if bytes.Contains(src.Data, []byte("<no value>")) {
		return nil, errors.New("rendering: a variable is null (renders as <no value>): give it a value")
	}
	if w != nil {
		src.doc = shapes.tree(w.shape.Bytes(), w.values)
	}
	cfg, err := validate(src)
	if err != nil {
		return nil, fmt.Errorf("invalid:\n%w", err)
	}
	if cfg.Node.Name != n.Name {
		return nil, fmt.Errorf("renders node.name %q, want the inventory name %q: base must set node.name to .Node.Name", cfg.Node.Name, n.Name)
	}
	return src.Data, nil
}

// mergeVars merges src over dst: maps merge key by key, anything else is
// replaced. dst is modified and returned; src is not shared.
func mergeVars(dst, src map[string]any) map[string]any {
	for k, v := range src {
		if sm, ok := v.(map[string]any); ok {
			if dm, ok := dst[k].(map[string]any); ok {
				dst[k] = mergeVars(dm, sm)
				continue
			}
			dst[k] = mergeVars(map[string]any{}, sm)
			continue
		}
		dst[k] = v
	}
	return dst
}

// RenderFleet loads the templates in dir and the inventory file and renders
// every node (see Fleet.Render).
func RenderFleet(dir, inventory string) ([]Rendered, error) {
	f, err := LoadFleet(dir)
	if err != nil {
		return nil, err
	}
	inv, err := LoadInventory(inventory)
	if err != nil {
		return nil, err
	}
	return f.Render(inv)
}

// IsReadError reports whether err means an input could not be read at all
// (as opposed to being invalid).
func IsReadError(err error) bool {
	return errors.Is(err, fs.ErrNotExist) || errors.Is(err, fs.ErrPermission)
}
