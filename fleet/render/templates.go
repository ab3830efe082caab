package render

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"text/template"
	"text/template/parse"

	"go.yaml.in/yaml/v3"
)

// A fleet templates directory holds:
//
//	base.yaml.tmpl            the whole document; {{block "name" .}} marks what a class may replace
//	classes/<class>.yaml.tmpl {{define "name"}} overrides of base's blocks, nothing else
//	sites/<site>.yaml         variables of one site (a YAML mapping)
//
// Templates are Go text/template with missingkey=error: a variable that no
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

// data is what a template sees.
type data struct {
	Node struct{ Name, Site, Class string }
	Vars map[string]any
}

// Templates is a parsed fleet templates directory. Render may be called
// on it from several goroutines.
type Templates struct {
	dir     string
	base    *template.Template
	blocks  map[string]bool  // templates base defines (its blocks)
	classes map[string]class // by class name
	sites   map[string]site  // by site name
}

// class is one class template, or why it cannot be used.
type class struct {
	t   *template.Template // base with the class's overrides
	err error
}

// site is one site's variables, or why they cannot be used.
type site struct {
	vars map[string]any
	err  error
}

var funcs = template.FuncMap{
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

// LoadTemplates reads and parses a templates directory. An unreadable or
// unparsable base template is an error (an unreadable one matches
// os.ErrNotExist or os.ErrPermission); a broken class template or site
// file fails only the nodes that use it, at Render.
func LoadTemplates(dir string) (*Templates, error) {
	t := &Templates{dir: dir, blocks: map[string]bool{}, classes: map[string]class{}, sites: map[string]site{}}
	basePath := filepath.Join(dir, BaseTemplate)
	text, err := os.ReadFile(basePath)
	if err != nil {
		return nil, fmt.Errorf("reading fleet templates: %w", err)
	}
	t.base, err = template.New(BaseTemplate).Option("missingkey=error").Funcs(funcs).Parse(string(text))
	if err != nil {
		return nil, fmt.Errorf("parsing %s: %w", basePath, err)
	}
	for _, b := range t.base.Templates() {
		if b.Name() != BaseTemplate {
			t.blocks[b.Name()] = true
		}
	}
	classFiles, err := filepath.Glob(filepath.Join(dir, ClassesDir, "*"+templateExt))
	if err != nil {
		return nil, fmt.Errorf("listing class templates: %w", err)
	}
	for _, path := range classFiles {
		text, err := os.ReadFile(path)
		if err != nil {
			return nil, fmt.Errorf("reading class template: %w", err)
		}
		t.classes[strings.TrimSuffix(filepath.Base(path), templateExt)] = t.parseClass(path, text)
	}
	siteFiles, err := filepath.Glob(filepath.Join(dir, SitesDir, "*.yaml"))
	if err != nil {
		return nil, fmt.Errorf("listing site files: %w", err)
	}
	for _, path := range siteFiles {
		text, err := os.ReadFile(path)
		if err != nil {
			return nil, fmt.Errorf("reading site variables: %w", err)
		}
		vars, err := decodeVars(text)
		if err != nil {
			err = fmt.Errorf("%s: %w", path, err)
		}
		t.sites[strings.TrimSuffix(filepath.Base(path), ".yaml")] = site{vars: vars, err: err}
	}
	return t, nil
}

// parseClass parses a class file over a copy of base. Its only content may
// be {{define}}s of blocks base has, so that a typo in a block name is an
// error rather than a silently ignored override.
func (t *Templates) parseClass(path string, text []byte) class {
	c, err := t.base.Clone()
	if err != nil {
		return class{err: err}
	}
	body := path // names the class file in template errors
	ct, err := c.New(body).Parse(string(text))
	if err != nil {
		return class{err: fmt.Errorf("parsing %s: %w", path, err)}
	}
	if ct.Tree != nil && !onlySpace(ct.Tree.Root) {
		return class{err: fmt.Errorf("%s: text outside {{define}}: a class template only overrides base's blocks", path)}
	}
	var unknown []string
	for _, d := range c.Templates() {
		if n := d.Name(); n != BaseTemplate && n != body && !t.blocks[n] {
			unknown = append(unknown, n)
		}
	}
	if len(unknown) > 0 {
		slices.Sort(unknown)
		known := make([]string, 0, len(t.blocks))
		for b := range t.blocks {
			known = append(known, b)
		}
		slices.Sort(known)
		return class{err: fmt.Errorf("%s: defines %s, which %s has no block for (blocks: %s)",
			path, strings.Join(unknown, ", "), BaseTemplate, strings.Join(known, ", "))}
	}
	return class{t: c}
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
func decodeVars(text []byte) (map[string]any, error) {
	var vars map[string]any
	if err := yaml.Unmarshal(text, &vars); err != nil {
		return nil, fmt.Errorf("not a YAML mapping of variables: %s", strings.TrimPrefix(err.Error(), "yaml: "))
	}
	if vars == nil {
		vars = map[string]any{}
	}
	return vars, nil
}
