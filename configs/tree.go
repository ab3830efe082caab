package configs

import "go.yaml.in/yaml/v3"

// treeCopy copies a parsed tree into two slices made at the tree's size,
// one for its nodes and one for their content lists: a Build copies the
// defaults, each list element's defaults and, in edgeheal render, a
// shape's parse (render_shape.go), and allocating those nodes one by one
// was about a tenth of a render (docs/performance.md, "edgeheal render at
// fleet scale").
type treeCopy struct {
	nodes []yaml.Node
	refs  []*yaml.Node
	lines bool // keep each node's line and column

	// value, when set, gives the copy of a scalar another value: ok is
	// false to keep the original's.
	value func(orig *yaml.Node) (v string, ok bool)
}

// copyTree copies n without its comments (nothing after the parse reads
// them), its anchors or its aliases (no tree copied here has any: the
// defaults are expanded, and a shape with one is not used).
func (tc treeCopy) copyTree(n *yaml.Node) *yaml.Node {
	nodes, refs := countNodes(n)
	tc.nodes = make([]yaml.Node, 0, nodes)
	tc.refs = make([]*yaml.Node, 0, refs)
	return tc.node(n)
}

func (tc *treeCopy) node(n *yaml.Node) *yaml.Node {
	tc.nodes = append(tc.nodes, yaml.Node{Kind: n.Kind, Style: n.Style, Tag: n.Tag, Value: n.Value})
	c := &tc.nodes[len(tc.nodes)-1] // never moved: the slice was made at its size
	if tc.lines {
		c.Line, c.Column = n.Line, n.Column
	}
	if tc.value != nil && n.Kind == yaml.ScalarNode {
		if v, ok := tc.value(n); ok {
			c.Value = v
		}
	}
	if len(n.Content) > 0 {
		start, end := len(tc.refs), len(tc.refs)+len(n.Content)
		tc.refs = tc.refs[:end]
		c.Content = tc.refs[start:end:end] // its own capacity: an append to it never reaches a neighbour's
		for i, e := range n.Content {
			c.Content[i] = tc.node(e)
		}
	}
	return c
}

// countNodes counts the nodes of a tree and the content pointers they hold.
func countNodes(n *yaml.Node) (nodes, refs int) {
	nodes, refs = 1, len(n.Content)
	for _, e := range n.Content {
		a, b := countNodes(e)
		nodes += a
		refs += b
	}
	return nodes, refs
}
