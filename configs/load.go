package configs

import (
	"bytes"
	"crypto/sha256"
	_ "embed"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.yaml.in/yaml/v3"
)

//go:embed defaults.yaml
var defaultsYAML []byte

//go:embed element-defaults.yaml
var elementDefaultsYAML []byte

// DefaultPath is where the daemon looks for its main file.
const DefaultPath = "/etc/edgeheal/config.yaml"

// HostnameName is the origin of a node name taken from the hostname.
const HostnameName = "(hostname)"

// hostname is replaced in tests so that golden output does not depend on the machine.
var hostname = os.Hostname

// maxNodes bounds the nodes one file may expand to (aliases included), so a
// hostile or broken file cannot make the agent allocate without bound.
const maxNodes = 20_000

// Source is one layer's bytes and the name problems are reported under.
type Source struct {
	Name string
	Data []byte
}

// Problem is one thing wrong with the configuration.
type Problem struct {
	File   string // where the offending value was written
	Path   string // key path, e.g. "tunnels[0].persistent_keepalive"; empty for a whole file
	Reason string
}

func (p Problem) Error() string {
	if p.Path == "" {
		return p.File + ": " + p.Reason
	}
	return p.File + ": " + p.Path + ": " + p.Reason
}

// Files lists the layers Load reads for the main file path, in order:
// path itself, then config.d/*.yaml next to it in lexical order. A missing
// config.d is not an error.
func Files(path string) ([]string, error) {
	files := []string{path}
	dropins, err := filepath.Glob(filepath.Join(filepath.Dir(path), "config.d", "*.yaml"))
	if err != nil {
		return nil, fmt.Errorf("listing drop-ins of %s: %w", path, err)
	}
	sort.Strings(dropins)
	return append(files, dropins...), nil
}

// Load reads the defaults, the main file at path and its config.d drop-ins,
// merges them (maps merge, scalars and lists are replaced by the later file),
// decodes and validates the result. The error lists every problem, each
// naming its file and key path. A missing main file is an error that
// matches os.ErrNotExist.
func Load(path string) (*Config, error) {
	files, err := Files(path)
	if err != nil {
		return nil, err
	}
	srcs := make([]Source, 0, len(files))
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			return nil, fmt.Errorf("reading config: %w", err)
		}
		srcs = append(srcs, Source{Name: f, Data: data})
	}
	return Build(srcs...)
}

// Parse is Build with one source: the defaults with data over them.
func Parse(name string, data []byte) (*Config, error) {
	return Build(Source{Name: name, Data: data})
}

// Build layers the sources over the embedded defaults, in order, and returns
// the decoded, validated config. It never returns a config together with an
// error, and never a config that fails Validate.
func Build(srcs ...Source) (*Config, error) {
	return build(buildFull, srcs...)
}

// A buildMode says what build computes beyond the verdict and the values.
type buildMode int

const (
	// buildFull is Build: origins (config show --origin, and the file
	// named in each problem) and the revision.
	buildFull buildMode = iota
	// buildCheck records no origins and no key paths and hashes no
	// revision: the config's values and whether it is valid, for a caller
	// that only validates (edgeheal render). Its problems name no file or
	// key: validate builds again with buildNoRevision for them.
	buildCheck
	// buildNoRevision is buildFull without the revision, which costs a
	// sixth of a Build and which render never shows.
	buildNoRevision
)

// validate is build for a caller that needs the verdict and the values,
// not the origins: the quick build (buildCheck) first, and, only for a
// config that fails, the full one for problems that name file and key.
// Both give the same verdict: origins and paths only say where a problem
// is, never whether there is one.
func validate(srcs ...Source) (*Config, error) {
	cfg, err := build(buildCheck, srcs...)
	if err == nil {
		return cfg, nil
	}
	if _, full := build(buildNoRevision, srcs...); full != nil {
		return nil, full
	}
	return nil, err // not reached while both builds agree
}

// build is Build, computing what mode says.
func build(mode buildMode, srcs ...Source) (*Config, error) {
	files := make(map[*yaml.Node]string, layerNodesHint(srcs))
	defaults, elemDefaults, err := embeddedDefaults()
	if err != nil {
		return nil, fmt.Errorf("embedded defaults: %w", err) // a build defect
	}
	root := cloneTree(defaults)
	var problems []error
	var names []string
	for _, src := range srcs {
		names = append(names, src.Name)
		layer, err := parseLayer(src, files)
		if err != nil {
			problems = append(problems, err)
			continue
		}
		if layer != nil {
			mergeMaps(root, layer)
		}
	}
	if len(problems) > 0 {
		return nil, errors.Join(problems...)
	}
	applyElementDefaults(root, elemDefaults, files)
	w := walker{files: files}
	if mode != buildCheck {
		w.origins = Origins{}
	}
	w.check(root, reflect.TypeOf(Config{}), "")
	cfg := &Config{}
	// With schema problems Decode skips the bad values (type errors do not
	// stop it, unknown keys are ignored), so Validate can still report the
	// rest of the file in the same pass.
	if err := root.Decode(cfg); err != nil && len(w.problems) == 0 {
		return nil, fmt.Errorf("decoding config: %w", err)
	}
	cfg.Origins = w.origins
	cfg.Files = names
	if cfg.Node.Name == "" {
		if h, err := hostname(); err == nil {
			cfg.Node.Name = h
			if cfg.Origins != nil {
				cfg.Origins["node.name"] = Origin{File: HostnameName}
			}
		}
	}
	if mode == buildFull {
		cfg.Revision = revision(cfg)
	}
	problems = w.problems
	if err := cfg.Validate(); err != nil {
		for _, e := range err.(interface{ Unwrap() []error }).Unwrap() {
			if p, ok := e.(Problem); !ok || !w.reported(p.Path) {
				problems = append(problems, e)
			}
		}
	}
	if len(problems) > 0 {
		return nil, errors.Join(problems...)
	}
	return cfg, nil
}

// revision is a short hash of the merged values: the same values give the
// same revision on every node, whatever files they came from.
func revision(c *Config) string {
	out, err := yaml.Marshal(c)
	if err != nil {
		return ""
	}
	sum := sha256.Sum256(out)
	return hex.EncodeToString(sum[:6])
}

// parseLayer parses one source into a mapping node (nil for an empty file),
// with aliases expanded, recording each node's file. Duplicate keys are
// problems.
func parseLayer(src Source, files map[*yaml.Node]string) (*yaml.Node, error) {
	dec := yaml.NewDecoder(bytes.NewReader(src.Data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, nil
		}
		return nil, Problem{File: src.Name, Reason: "not valid YAML: " + strings.TrimPrefix(err.Error(), "yaml: ")}
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		return nil, Problem{File: src.Name, Reason: "more than one YAML document; put each layer in its own file"}
	}
	if len(doc.Content) == 0 {
		return nil, nil
	}
	top := doc.Content[0]
	if top.Kind == yaml.ScalarNode && top.Tag == "!!null" {
		return nil, nil // a file of comments only
	}
	x := expander{file: src.Name, files: files, budget: maxNodes}
	out := x.inPlace(top)
	if len(x.problems) > 0 {
		return nil, errors.Join(x.problems...)
	}
	if out.Kind != yaml.MappingNode {
		return nil, Problem{File: src.Name, Reason: fmt.Sprintf("the top level must be a mapping of keys (version, node, uplinks, ...), not %s", kindName(out))}
	}
	return out, nil
}

// An expander resolves the aliases of one freshly parsed layer, checks it
// for duplicate keys and records the file of each of its nodes. It works
// on the parsed tree itself (inPlace), which nothing else holds, and
// copies only what an alias points at (expand), so that a node is never
// shared between two places of the merged tree. Key paths are built only
// for a problem: copying every node and joining every path was a fifth of
// a Build (edgeheal render, docs/performance.md).
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

// mergeMaps merges src into dst: a key present in both merges when both values
// are mappings; otherwise src's value (scalar, list, or a mapping replacing a
// non-mapping) replaces dst's.
func mergeMaps(dst, src *yaml.Node) {
	for i := 0; i+1 < len(src.Content); i += 2 {
		k, v := src.Content[i], src.Content[i+1]
		j := keyIndex(dst, k.Value)
		switch {
		case j < 0:
			dst.Content = append(dst.Content, k, v)
		case dst.Content[j+1].Kind == yaml.MappingNode && v.Kind == yaml.MappingNode:
			mergeMaps(dst.Content[j+1], v)
		default:
			dst.Content[j], dst.Content[j+1] = k, v
		}
	}
}

func keyIndex(m *yaml.Node, key string) int {
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == key {
			return i
		}
	}
	return -1
}

// embeddedDefaults parses the embedded defaults and element defaults once;
// every Build works on copies (cloneTree, copyTree), never on these.
var embeddedDefaults = func() func() (defaults, elements *yaml.Node, err error) {
	type parsed struct{ defaults, elements *yaml.Node }
	once := sync.OnceValues(func() (parsed, error) {
		d, err := parseLayer(Source{Name: DefaultsName, Data: defaultsYAML}, map[*yaml.Node]string{})
		if err != nil {
			return parsed{}, err
		}
		e, err := parseLayer(Source{Name: DefaultsName, Data: elementDefaultsYAML}, map[*yaml.Node]string{})
		if err != nil {
			return parsed{}, fmt.Errorf("element defaults: %w", err)
		}
		return parsed{d, e}, nil
	})
	return func() (*yaml.Node, *yaml.Node, error) {
		p, err := once()
		return p.defaults, p.elements, err
	}
}()

// layerNodesHint is about how many nodes the sources' trees hold (a
// rendered node file: one per 14 bytes), so that build's files map is
// made once at its size rather than grown through every power of two: the
// growing was 8 % of edgeheal render (docs/performance.md). The defaults'
// nodes are not in the map at all (walker.file).
func layerNodesHint(srcs []Source) int {
	n := 0
	for _, s := range srcs {
		n += len(s.Data) / 14
	}
	return n
}

// cloneTree copies the parsed defaults exactly (lines included, so origins
// read as they did when the defaults were parsed for each Build). Its
// nodes are not put in files: a node missing there is from the defaults
// (walker.file).
func cloneTree(n *yaml.Node) *yaml.Node {
	c := &yaml.Node{Kind: n.Kind, Style: n.Style, Tag: n.Tag, Value: n.Value, Line: n.Line, Column: n.Column}
	if len(n.Content) > 0 {
		c.Content = make([]*yaml.Node, len(n.Content))
		for i, e := range n.Content {
			c.Content[i] = cloneTree(e)
		}
	}
	return c
}

// applyElementDefaults merges each element of the uplinks, tunnels and
// workloads lists over that list's element defaults, defs.
func applyElementDefaults(root, defs *yaml.Node, files map[*yaml.Node]string) {
	for i := 0; i+1 < len(defs.Content); i += 2 {
		list, def := defs.Content[i].Value, defs.Content[i+1]
		j := keyIndex(root, list)
		if j < 0 || root.Content[j+1].Kind != yaml.SequenceNode {
			continue // missing or wrong kind: the schema walk reports it
		}
		seq := root.Content[j+1]
		for e, elem := range seq.Content {
			if elem.Kind != yaml.MappingNode {
				continue
			}
			base := copyTree(def)
			mergeMaps(base, elem)
			if f, ok := files[elem]; ok { // else elem is from the defaults, and so is base
				files[base] = f
			}
			base.Line = elem.Line
			seq.Content[e] = base
		}
	}
}

// copyTree copies a defaults tree with line 0, so origins show no line for
// defaults; like cloneTree it leaves its nodes out of files.
func copyTree(n *yaml.Node) *yaml.Node {
	c := &yaml.Node{Kind: n.Kind, Style: n.Style, Tag: n.Tag, Value: n.Value}
	if len(n.Content) > 0 {
		c.Content = make([]*yaml.Node, len(n.Content))
		for i, e := range n.Content {
			c.Content[i] = copyTree(e)
		}
	}
	return c
}

func joinKey(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

func kindName(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.ScalarNode:
		if n.Tag == "!!null" {
			return "an empty value"
		}
		return fmt.Sprintf("the value %q", n.Value)
	}
	return "an unexpected YAML node"
}

// parseDuration reads a Go duration string, refusing a bare number (is 20
// seconds or 20 nanoseconds meant?).
func parseDuration(s string) (time.Duration, error) {
	if _, err := strconv.ParseFloat(s, 64); err == nil {
		return 0, fmt.Errorf("%q has no unit: write it as %ss (or ms, m, h)", s, s)
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, fmt.Errorf("%q is not a duration: write it like 20s, 500ms or 1m30s", s)
	}
	return d, nil
}

// UnmarshalYAML reads a duration string.
func (d *Duration) UnmarshalYAML(n *yaml.Node) error {
	v, err := parseDuration(n.Value)
	if err != nil {
		// A TypeError lets Decode go on with the other values.
		return &yaml.TypeError{Errors: []string{err.Error()}}
	}
	*d = Duration(v)
	return nil
}

// UnmarshalYAML reads "all" or a list of keys.
func (p *PeerSelector) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind == yaml.ScalarNode && n.Value == "all" {
		*p = PeerSelector{All: true}
		return nil
	}
	var keys []string
	if err := n.Decode(&keys); err != nil {
		return &yaml.TypeError{Errors: []string{err.Error()}}
	}
	*p = PeerSelector{Keys: keys}
	return nil
}
