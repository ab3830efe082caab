package configs

// The schema walk: a merged YAML tree checked against the Config struct
// before decoding, so that every problem is reported at once with its file
// and key path, and the origin of every value is recorded.

import (
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"sync"

	"go.yaml.in/yaml/v3"
)

var (
	durationType = reflect.TypeOf(Duration(0))
	peersType    = reflect.TypeOf(PeerSelector{})
)

// walker checks a merged tree against the schema before decoding, so that
// every problem is reported at once with its file and key path, and records
// the origin of every value.
type walker struct {
	files    map[*yaml.Node]string
	origins  Origins
	problems []error
}

// reported says whether the schema walk already reported path or an
// ancestor of it, so that Validate does not report a value Decode skipped.
func (w *walker) reported(path string) bool {
	for _, e := range w.problems {
		p := e.(Problem).Path
		if p == path || strings.HasPrefix(path, p+".") || strings.HasPrefix(path, p+"[") {
			return true
		}
	}
	return false
}

func (w *walker) problem(n *yaml.Node, path, format string, args ...any) {
	w.problems = append(w.problems, Problem{File: w.file(n), Path: path, Reason: fmt.Sprintf(format, args...)})
}

// file is where n was written: a node build did not record is a copy of
// the defaults.
func (w *walker) file(n *yaml.Node) string {
	if f, ok := w.files[n]; ok {
		return f
	}
	return DefaultsName
}

func (w *walker) record(n *yaml.Node, line int, path string) {
	if path == "" {
		return
	}
	o := Origin{File: w.file(n), Line: line}
	if o.File == DefaultsName {
		o.Line = 0
	}
	w.origins[path] = o
}

func (w *walker) check(n *yaml.Node, t reflect.Type, path string) {
	null := n.Kind == yaml.ScalarNode && n.Tag == "!!null"
	switch {
	case t == durationType:
		if n.Kind != yaml.ScalarNode || null {
			w.problem(n, path, "expected a duration such as 20s or 1m30s, got %s", kindName(n))
			return
		}
		if _, err := parseDuration(n.Value); err != nil {
			w.problem(n, path, "%v", err)
		}
	case t == peersType:
		w.checkPeers(n, path)
	case t.Kind() == reflect.Struct:
		w.checkStruct(n, t, path, null)
	case t.Kind() == reflect.Slice:
		w.checkList(n, t, path, null)
	case t.Kind() == reflect.Map:
		w.checkMap(n, t, path, null)
	case t.Kind() == reflect.String:
		if n.Kind != yaml.ScalarNode {
			w.problem(n, path, "expected a string, got %s", kindName(n))
		}
	case t.Kind() == reflect.Int:
		if n.Kind != yaml.ScalarNode || null {
			w.problem(n, path, "expected a whole number, got %s", kindName(n))
			return
		}
		if _, err := strconv.ParseInt(n.Value, 10, 32); err != nil {
			w.problem(n, path, "expected a whole number, got %q", n.Value)
		}
	case t.Kind() == reflect.Bool:
		if n.Kind != yaml.ScalarNode || (n.Value != "true" && n.Value != "false") {
			w.problem(n, path, "expected true or false, got %s", kindName(n))
		}
	default:
		w.problem(n, path, "internal: no schema check for %s", t) // a build defect
	}
}

func (w *walker) checkPeers(n *yaml.Node, path string) {
	switch {
	case n.Kind == yaml.ScalarNode && n.Value == "all":
	case n.Kind == yaml.SequenceNode:
		for i, e := range n.Content {
			if e.Kind != yaml.ScalarNode {
				w.problem(e, fmt.Sprintf("%s[%d]", path, i), "expected a base64 public key, got %s", kindName(e))
			}
		}
	default:
		w.problem(n, path, `expected "all" or a list of public keys, got %s`, kindName(n))
	}
}

func (w *walker) checkStruct(n *yaml.Node, t reflect.Type, path string, null bool) {
	if n.Kind != yaml.MappingNode {
		if !null { // "key:" with nothing keeps the defaults
			w.problem(n, path, "expected a mapping with keys %s, got %s", strings.Join(yamlKeys(t), ", "), kindName(n))
		}
		return
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		kp := joinKey(path, k.Value)
		ft, ok := fieldByTag(t, k.Value)
		if !ok {
			w.problem(k, kp, "unknown key (known here: %s)", strings.Join(yamlKeys(t), ", "))
			continue
		}
		w.record(v, k.Line, kp)
		w.check(v, ft, kp)
	}
}

func (w *walker) checkList(n *yaml.Node, t reflect.Type, path string, null bool) {
	if n.Kind != yaml.SequenceNode {
		if !null {
			w.problem(n, path, "expected a list, got %s", kindName(n))
		}
		return
	}
	for i, e := range n.Content {
		ep := fmt.Sprintf("%s[%d]", path, i)
		w.record(e, e.Line, ep)
		w.check(e, t.Elem(), ep)
	}
}

func (w *walker) checkMap(n *yaml.Node, t reflect.Type, path string, null bool) {
	if n.Kind != yaml.MappingNode {
		if !null {
			w.problem(n, path, "expected a mapping, got %s", kindName(n))
		}
		return
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		kp := joinKey(path, k.Value)
		if k.Value == "" {
			w.problem(k, kp, "empty key")
		}
		w.record(v, k.Line, kp)
		w.check(v, t.Elem(), kp)
	}
}

// fieldByTag is the type of t's field whose yaml tag is key. The schema
// walk asks it for every key of every file, and edgeheal-fleet render
// walks thousands of files: each struct type's keys are read from its tags
// once (structKeys) rather than by scanning its fields and parsing their
// tags at every key (7 % of a render, docs/performance.md).
func fieldByTag(t reflect.Type, key string) (reflect.Type, bool) {
	ft, ok := structKeys(t)[key]
	return ft, ok
}

// structKeysCache caches structKeys: reflect.Type to map[string]reflect.Type.
// The schema's struct types are few and fixed, so it never grows past them.
var structKeysCache sync.Map

// structKeys maps each yaml key of struct type t to its field's type.
func structKeys(t reflect.Type) map[string]reflect.Type {
	if m, ok := structKeysCache.Load(t); ok {
		return m.(map[string]reflect.Type)
	}
	m := map[string]reflect.Type{}
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		if name := tagName(f); name != "" {
			if _, dup := m[name]; !dup { // the first field with a tag wins, as the scan did
				m[name] = f.Type
			}
		}
	}
	structKeysCache.Store(t, m)
	return m
}

func tagName(f reflect.StructField) string {
	name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
	if name == "-" {
		return ""
	}
	return name
}

func yamlKeys(t reflect.Type) []string {
	var keys []string
	for i := 0; i < t.NumField(); i++ {
		if n := tagName(t.Field(i)); n != "" {
			keys = append(keys, n)
		}
	}
	return keys
}
