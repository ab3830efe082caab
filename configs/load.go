package configs

import (
	"crypto/sha256"
	_ "embed"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"sort"
	"strconv"
	"sync"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/edgeheal/edgeheal/regfile"
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

// maxNodes bounds the nodes all the layers of a config may expand to
// together (aliases included), so that hostile or broken files cannot make
// the agent keep without bound what it parsed.
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

// ErrRead matches (errors.Is) the error of Load when a layer could not be
// read at all (missing, not a regular file, too large, unreadable), as
// opposed to a configuration that was read and is invalid.
var ErrRead = errors.New("reading config")

// maxFiles bounds the layers Load reads: the main file and its drop-ins.
const maxFiles = 64

// Load reads the defaults, the main file at path and its config.d drop-ins,
// merges them (maps merge, scalars and lists are replaced by the later file),
// decodes and validates the result. The error lists every problem, each
// naming its file and key path. A missing main file is an error that
// matches os.ErrNotExist. Every layer must be a regular file of at most
// regfile.ConfigLimit, read without blocking (regfile.Read): a FIFO, a
// device or a directory among them is an error naming it, never a wait;
// at most maxFiles layers of at most regfile.ConfigLimit together (parsing
// YAML costs about 50 times its size at its densest: docs/performance.md,
// "Hostile inputs").
func Load(path string) (*Config, error) {
	files, err := Files(path)
	if err != nil {
		return nil, err
	}
	srcs := make([]Source, 0, len(files))
	if len(files) > maxFiles {
		return nil, fmt.Errorf("%w: %s has %d drop-ins in config.d, more than the %d allowed", ErrRead, path, len(files)-1, maxFiles-1)
	}
	total := 0
	for _, f := range files {
		data, err := regfile.Read(f, regfile.ConfigLimit)
		if err != nil {
			return nil, fmt.Errorf("%w: %w", ErrRead, err)
		}
		if total += len(data); total > regfile.ConfigLimit {
			return nil, fmt.Errorf("%w: %s and its drop-ins hold more than the %d KiB allowed together (at %s)", ErrRead, path, regfile.ConfigLimit>>10, f)
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
// the decoded, validated config with its revision. It never returns a
// config together with an error, and never a config that fails Validate.
func Build(srcs ...Source) (*Config, error) {
	cfg, err := build(srcs...)
	if err != nil {
		return nil, err
	}
	cfg.Revision = revision(cfg)
	return cfg, nil
}

// Check is Parse without the revision: the same verdict, values, origins
// and problems, for a caller that validates many files and shows no
// revision (edgeheal-fleet render validates every node's file with it).
// The revision, a hash of the merged values' YAML, is about 40 % of a
// Parse of a rendered node file.
func Check(name string, data []byte) (*Config, error) {
	return build(Source{Name: name, Data: data})
}

// build is Build without the revision.
func build(srcs ...Source) (*Config, error) {
	files := make(map[*yaml.Node]string, layerNodesHint(srcs))
	defaults, elemDefaults, err := embeddedDefaults()
	if err != nil {
		return nil, fmt.Errorf("embedded defaults: %w", err) // a build defect
	}
	root := shallowCopy(defaults) // its nodes are shared, never changed (mergeOver)
	budget := maxNodes            // for all the layers together: what is kept is bounded
	var problems []error
	var names []string
	for _, src := range srcs {
		names = append(names, src.Name)
		layer, err := parseLayer(src, files, &budget)
		if err != nil {
			problems = append(problems, err)
			continue
		}
		if layer != nil {
			root = mergeOver(root, layer)
		}
	}
	if len(problems) > 0 {
		return nil, errors.Join(problems...)
	}
	applyElementDefaults(root, elemDefaults, files)
	w := walker{files: files, origins: Origins{}}
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
			cfg.Origins["node.name"] = Origin{File: HostnameName}
		}
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

// mergeOver is src merged over dst: a key present in both merges when both
// values are mappings; otherwise src's value (scalar, list, or a mapping
// replacing a non-mapping) replaces dst's. dst is not changed: the result
// is a new mapping, and so is every mapping both have, down to where they
// differ; everything else is shared with dst and src. So every Build
// shares the parsed defaults rather than copying them (copying them was a
// tenth of a Build, measured in render's 10,000 Builds,
// docs/performance.md), and nothing after the merge may change a node it
// did not make (applyElementDefaults copies a list before it changes one).
func mergeOver(dst, src *yaml.Node) *yaml.Node {
	out := shallowCopy(dst)
	for i := 0; i+1 < len(src.Content); i += 2 {
		k, v := src.Content[i], src.Content[i+1]
		j := keyIndex(out, k.Value)
		switch {
		case j < 0:
			out.Content = append(out.Content, k, v)
		case out.Content[j+1].Kind == yaml.MappingNode && v.Kind == yaml.MappingNode:
			out.Content[j+1] = mergeOver(out.Content[j+1], v)
		default:
			out.Content[j], out.Content[j+1] = k, v
		}
	}
	return out
}

// shallowCopy is a new node like n with its own content list (of the same
// nodes).
func shallowCopy(n *yaml.Node) *yaml.Node {
	c := &yaml.Node{Kind: n.Kind, Style: n.Style, Tag: n.Tag, Value: n.Value, Line: n.Line, Column: n.Column}
	c.Content = append(make([]*yaml.Node, 0, len(n.Content)+2), n.Content...)
	return c
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
// every Build shares them and never changes them (mergeOver). The
// element defaults have line 0, so that origins show no line for them.
var embeddedDefaults = func() func() (defaults, elements *yaml.Node, err error) {
	type parsed struct{ defaults, elements *yaml.Node }
	once := sync.OnceValues(func() (parsed, error) {
		budget := maxNodes
		d, err := parseLayer(Source{Name: DefaultsName, Data: defaultsYAML}, map[*yaml.Node]string{}, &budget)
		if err != nil {
			return parsed{}, err
		}
		budget = maxNodes
		e, err := parseLayer(Source{Name: DefaultsName, Data: elementDefaultsYAML}, map[*yaml.Node]string{}, &budget)
		if err != nil {
			return parsed{}, fmt.Errorf("element defaults: %w", err)
		}
		for i := 1; i < len(e.Content); i += 2 {
			noLines(e.Content[i])
		}
		return parsed{d, e}, nil
	})
	return func() (*yaml.Node, *yaml.Node, error) {
		p, err := once()
		return p.defaults, p.elements, err
	}
}()

// noLines sets the line and column of every node under n to 0.
func noLines(n *yaml.Node) {
	n.Line, n.Column = 0, 0
	for _, c := range n.Content {
		noLines(c)
	}
}

// layerNodesHint is about how many nodes the sources' trees hold (a
// rendered node file: one per 14 bytes), so that build's files map is
// made once at its size rather than grown through every power of two: the
// growing was 8 % of a Build (measured in render's 10,000 Builds,
// docs/performance.md). The defaults' nodes are not in the map at all
// (walker.file).
func layerNodesHint(srcs []Source) int {
	n := 0
	for _, s := range srcs {
		n += len(s.Data) / 14
	}
	return n
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
		if _, own := files[seq]; !own && len(seq.Content) > 0 {
			seq = shallowCopy(seq) // the defaults' list: shared by every Build
			root.Content[j+1] = seq
		}
		for e, elem := range seq.Content {
			if elem.Kind != yaml.MappingNode {
				continue
			}
			base := mergeOver(def, elem)
			if f, ok := files[elem]; ok { // else elem is from the defaults, and so is base
				files[base] = f
			}
			base.Line = elem.Line
			seq.Content[e] = base
		}
	}
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
	switch {
	case err == nil:
		return d, nil
	case durationRe.MatchString(s):
		// Written as a duration, but past what one can hold.
		return 0, fmt.Errorf("%q is out of range: a duration is at most %s", s, Duration(maxDuration))
	}
	return 0, fmt.Errorf("%q is not a duration: write it like 20s, 500ms or 1m30s", s)
}

// durationRe is the syntax time.ParseDuration reads: a string it matches
// that time.ParseDuration refuses overflows.
var durationRe = regexp.MustCompile(`^[-+]?(([0-9]+(\.[0-9]*)?|\.[0-9]+)(ns|us|µs|μs|ms|s|m|h))+$`)

// maxDuration is the longest duration, whole hours.
const maxDuration = time.Duration(math.MaxInt64) / time.Hour * time.Hour

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
