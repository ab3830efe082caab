package configs

// One layer of a configuration: parsed, its aliases expanded, its
// duplicate keys found, the file of every node recorded.

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"strings"

	"go.yaml.in/yaml/v3"
)

// parseLayer parses one source into a mapping node (nil for an empty file),
// with aliases expanded, recording each node's file. Duplicate keys are
// problems.
func parseLayer(src Source, files map[*yaml.Node]string, budget *int) (*yaml.Node, error) {
	doc, err := parseDocument(src.Name, src.Data)
	if err != nil || doc == nil {
		return nil, err
	}
	if len(doc.Content) == 0 {
		return nil, nil
	}
	top := doc.Content[0]
	if top.Kind == yaml.ScalarNode && top.Tag == "!!null" {
		return nil, nil // a file of comments only
	}
	x := expander{file: src.Name, files: files, budget: *budget}
	out := x.inPlace(top)
	*budget = max(x.budget, 0)
	if len(x.problems) > 0 {
		return nil, errors.Join(x.problems...)
	}
	if out.Kind != yaml.MappingNode {
		return nil, Problem{File: src.Name, Reason: fmt.Sprintf("the top level must be a mapping of keys (version, node, uplinks, ...), not %s", kindName(out))}
	}
	return out, nil
}

// parseDocument parses a file that must hold at most one YAML document:
// nil for an empty file.
func parseDocument(name string, data []byte) (*yaml.Node, error) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, nil
		}
		return nil, Problem{File: name, Reason: "not valid YAML: " + strings.TrimPrefix(err.Error(), "yaml: ")}
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		return nil, Problem{File: name, Reason: "more than one YAML document; put each layer in its own file"}
	}
	return &doc, nil
}

// An expander resolves the aliases of one freshly parsed layer, checks it
// for duplicate keys and records the file of each of its nodes. It works
// on the parsed tree itself (inPlace), which nothing else holds, and
// copies only what an alias points at (expand), so that a node is never
// shared between two places of the merged tree. Key paths are built only
// for a problem: copying every node and joining every path was a fifth of
// a Build (measured in render's 10,000 Builds, docs/performance.md).
type expander struct {
	file     string
	files    map[*yaml.Node]string
	budget   int
	problems []error
	path     []pathElem // where inPlace is, from the top
}

// pathElem is one step of a key path: a mapping key, or a list index.
type pathElem struct {
	key   string
	index int // -1 for a key
}

// pathString is the key path of x.path, as joinKey and "[i]" write it.
func (x *expander) pathString() string {
	path := ""
	for _, e := range x.path {
		if e.index < 0 {
			path = joinKey(path, e.key)
		} else {
			path = fmt.Sprintf("%s[%d]", path, e.index)
		}
	}
	return path
}

// inPlace is expand without the copy, for nodes no alias can point at: a
// node with an anchor (and everything under it) is copied by expand, so
// that every use of it gets the original.
func (x *expander) inPlace(n *yaml.Node) *yaml.Node {
	if n.Anchor != "" || (n.Kind == yaml.AliasNode && n.Alias != nil) {
		return expand(n, x.file, x.pathString(), x.files, &x.budget, &x.problems)
	}
	x.budget--
	if x.budget < 0 {
		if x.budget == -1 {
			x.problems = append(x.problems, Problem{File: x.file, Reason: fmt.Sprintf("more than %d values (aliases expanded): refusing to load", maxNodes)})
		}
		return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!null"}
	}
	x.files[n] = x.file
	switch n.Kind {
	case yaml.MappingNode:
		var seen map[string]int // only for a large mapping: keyLine is quadratic
		if len(n.Content) > 2*smallMapping {
			seen = make(map[string]int, len(n.Content)/2)
		}
		kept := n.Content[:0]
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			x.path = append(x.path, pathElem{key: k.Value, index: -1})
			var first int
			var dup bool
			if seen == nil {
				first, dup = keyLine(kept, k.Value)
			} else if first, dup = seen[k.Value]; !dup {
				seen[k.Value] = k.Line
			}
			if dup {
				x.problems = append(x.problems, Problem{File: x.file, Path: x.pathString(), Reason: fmt.Sprintf("duplicate key (line %d repeats line %d)", k.Line, first)})
			} else {
				if k.Kind != yaml.ScalarNode {
					// As expand: a key is read as a string; a list or
					// mapping as a key keeps none of its content.
					k = &yaml.Node{Kind: k.Kind, Tag: k.Tag, Value: k.Value, Line: k.Line, Column: k.Column}
				}
				x.files[k] = x.file
				kept = append(kept, k, x.inPlace(v))
			}
			x.path = x.path[:len(x.path)-1]
		}
		clear(n.Content[len(kept):])
		n.Content = kept
	case yaml.SequenceNode:
		for i, e := range n.Content {
			x.path = append(x.path, pathElem{index: i})
			n.Content[i] = x.inPlace(e)
			x.path = x.path[:len(x.path)-1]
		}
	}
	return n
}

// smallMapping is how many keys a mapping may have for inPlace to look
// for duplicates without a map.
const smallMapping = 16

// keyLine is the line of key among the keys of the key-value pairs kv, if
// it is there. A linear search: a config's mappings have a few keys each.
func keyLine(kv []*yaml.Node, key string) (int, bool) {
	for i := 0; i+1 < len(kv); i += 2 {
		if kv[i].Value == key {
			return kv[i].Line, true
		}
	}
	return 0, false
}

// expand copies n with aliases resolved, checks for duplicate keys and
// records the file of every node of the copy.
func expand(n *yaml.Node, file, path string, files map[*yaml.Node]string, budget *int, problems *[]error) *yaml.Node {
	*budget--
	if *budget < 0 {
		if *budget == -1 {
			*problems = append(*problems, Problem{File: file, Reason: fmt.Sprintf("more than %d values (aliases expanded): refusing to load", maxNodes)})
		}
		return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!null"}
	}
	if n.Kind == yaml.AliasNode && n.Alias != nil {
		c := expand(n.Alias, file, path, files, budget, problems)
		c.Line = n.Line // report where the alias was used
		return c
	}
	c := &yaml.Node{Kind: n.Kind, Style: n.Style, Tag: n.Tag, Value: n.Value, Line: n.Line, Column: n.Column}
	files[c] = file
	switch n.Kind {
	case yaml.MappingNode:
		seen := map[string]int{}
		for i := 0; i+1 < len(n.Content); i += 2 {
			k := n.Content[i]
			kp := joinKey(path, k.Value)
			if first, dup := seen[k.Value]; dup {
				*problems = append(*problems, Problem{File: file, Path: kp, Reason: fmt.Sprintf("duplicate key (line %d repeats line %d)", k.Line, first)})
				continue
			}
			seen[k.Value] = k.Line
			kc := &yaml.Node{Kind: k.Kind, Tag: k.Tag, Value: k.Value, Line: k.Line, Column: k.Column}
			files[kc] = file
			c.Content = append(c.Content, kc, expand(n.Content[i+1], file, kp, files, budget, problems))
		}
	case yaml.SequenceNode:
		for i, e := range n.Content {
			c.Content = append(c.Content, expand(e, file, fmt.Sprintf("%s[%d]", path, i), files, budget, problems))
		}
	}
	return c
}
