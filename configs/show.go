package configs

import (
	"bytes"
	"fmt"

	"go.yaml.in/yaml/v3"
)

// Marshal writes the merged config as YAML. With origins, every value carries
// a comment saying where it came from (file:line, or (defaults)).
func (c *Config) Marshal(origins bool) ([]byte, error) {
	var doc yaml.Node
	if err := doc.Encode(c); err != nil {
		return nil, fmt.Errorf("encoding config: %w", err)
	}
	if origins {
		c.annotate(&doc, "")
	}
	var buf bytes.Buffer
	enc := yaml.NewEncoder(&buf)
	enc.SetIndent(2)
	if err := enc.Encode(&doc); err != nil {
		return nil, fmt.Errorf("encoding config: %w", err)
	}
	if err := enc.Close(); err != nil {
		return nil, fmt.Errorf("encoding config: %w", err)
	}
	return buf.Bytes(), nil
}

// annotate puts each leaf's origin in its line comment. A mapping's or a
// list's own origin goes on its key when it is empty.
func (c *Config) annotate(n *yaml.Node, path string) {
	switch n.Kind {
	case yaml.DocumentNode:
		for _, e := range n.Content {
			c.annotate(e, path)
		}
	case yaml.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			kp := joinKey(path, k.Value)
			if v.Kind == yaml.ScalarNode || len(v.Content) == 0 {
				v.LineComment = c.Origins.Of(kp).String()
				continue
			}
			c.annotate(v, kp)
		}
	case yaml.SequenceNode:
		for i, e := range n.Content {
			ep := fmt.Sprintf("%s[%d]", path, i)
			if e.Kind == yaml.ScalarNode {
				e.LineComment = c.Origins.Of(ep).String()
				continue
			}
			c.annotate(e, ep)
		}
	}
}
