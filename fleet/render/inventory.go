package render

import (
	"bytes"
	"fmt"
	"os"
	"strings"

	"go.yaml.in/yaml/v3"
)

// Inventory lists the nodes to render. Vars are fleet-wide variables, the
// lowest layer under each site's and node's own.
type Inventory struct {
	Vars  map[string]any `yaml:"vars"`
	Nodes []Node         `yaml:"nodes"`
}

// Node is one node of an inventory: its name (also its rendered file's
// name), its site (sites/<site>.yaml), its class (classes/<class>.yaml.tmpl)
// and its own variables, which win over the site's.
type Node struct {
	Name  string         `yaml:"name"`
	Site  string         `yaml:"site"`
	Class string         `yaml:"class"`
	Vars  map[string]any `yaml:"vars"`
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
