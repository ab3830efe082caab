package configs

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"go.yaml.in/yaml/v3"
)

// sameTree compares two parses as validation sees them: kinds, tags,
// styles, values and lines; not columns (a value put in moves what follows
// it on its line) and not comments (validation never reads them).
func sameTree(a, b *yaml.Node) string {
	var out strings.Builder
	var walk func(a, b *yaml.Node, path string)
	walk = func(a, b *yaml.Node, path string) {
		if out.Len() > 0 {
			return
		}
		if a.Kind != b.Kind || a.Tag != b.Tag || a.Style != b.Style || a.Value != b.Value || a.Line != b.Line ||
			a.Anchor != b.Anchor || len(a.Content) != len(b.Content) {
			fmt.Fprintf(&out, "%s: kind %v/%v tag %q/%q style %v/%v value %q/%q line %d/%d, %d/%d children",
				path, a.Kind, b.Kind, a.Tag, b.Tag, a.Style, b.Style, a.Value, b.Value, a.Line, b.Line, len(a.Content), len(b.Content))
			return
		}
		for i := range a.Content {
			walk(a.Content[i], b.Content[i], fmt.Sprintf("%s/%d", path, i))
		}
	}
	walk(a, b, "")
	return out.String()
}

// writeShaped runs the writes of one file through a shapeWriter: text
// pieces of tmpl, and at each \x01 the next of values.
func writeShaped(c *shapeCache, tmpl string, values []string) *shapeWriter {
	w := &shapeWriter{nonce: c.nonce}
	pieces := strings.Split(tmpl, "\x01")
	for i, p := range pieces {
		w.Write([]byte(p))
		if i < len(pieces)-1 && len(values) > 0 {
			w.WriteValue(values[i%len(values)])
		}
	}
	return w
}

// A file's tree from its shape is the tree its bytes parse to, whatever
// the values and the text around them; when that cannot be shown, there
// is no tree from the shape and the file is parsed from its bytes.
func FuzzShapeTreeIsTheParse(f *testing.F) {
	seeds := []struct{ tmpl, a, b string }{
		{"node: {name: \x01, site: \x01}\n", `"n1"` + "\x00s1", `"n2"` + "\x00s2"},
		{"# node \x01\nname: \x01\n", "gw-1\x00\"gw-1\"", "gw-2\x00\"a: b # c\""},
		{"a: \x01\nb: [\x01, x]\n", "word\x00\"q\"", "other\x00\"\\u00e9\\n\\\"\""},
		{"\x01: 1\n", `"k"`, `"j"`},
		{"a: x\x01\n", "y", "z"},
		{"a: &x \x01\nb: *x\n", `"v"`, `"w"`},
		{"a: !!int \x01\n", `"1"`, `"2"`},
		{"a: '\x01'\nb: \"\x01\"\n", "w1", "w2"},
		{"a: \x01\n  continued\n", "w1", "w2"},
		{"a: \x01\n", "yes", "true"},
		{"- \x01\n- \x01\n", "a\x00b", "c\x00d"},
		{"a: {b: \x01}\n", "w", "x"},
		{"a: \x01\n", `"` + strings.Repeat("x", 2000) + `"`, `"y"`},
	}
	for _, s := range seeds {
		f.Add(s.tmpl, s.a, s.b)
	}
	f.Fuzz(func(t *testing.T, tmpl, a, b string) {
		c := newShapeCache()
		va, vb := strings.Split(a, "\x00"), strings.Split(b, "\x00")
		wa, wb := writeShaped(c, tmpl, va), writeShaped(c, tmpl, vb)
		for _, w := range []*shapeWriter{wa, wb, wa} {
			tree := c.tree(w.shape.Bytes(), w.values)
			if tree == nil {
				continue
			}
			want, err := parseDocument("f.yaml", w.file.Bytes())
			if err != nil || want == nil {
				t.Fatalf("a tree from the shape, but the file does not parse (%v):\n%s", err, w.file.Bytes())
			}
			if diff := sameTree(want, tree); diff != "" {
				t.Fatalf("the tree from the shape is not the file's parse: %s\nshape:\n%s\nfile:\n%s", diff, w.shape.Bytes(), w.file.Bytes())
			}
		}
	})
}

// decodeQuoted reads a value as YAML and JSON both read it.
func FuzzDecodeQuotedReadsAsYAMLAndJSON(f *testing.F) {
	for _, s := range []string{`"plain"`, `"a\"b\\c"`, `"\u00e9\n\t\r\b\f"`, `"\ud800"`, `"\/"`, `"tab	"`, `"  spaced  out  "`, `"é"`, `"\u0000"`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got, ok := decodeQuoted(s)
		if !ok {
			return
		}
		var y map[string]string
		if err := yaml.Unmarshal([]byte("v: "+s+"\n"), &y); err != nil {
			t.Fatalf("decodeQuoted takes %s, YAML refuses it: %v", s, err)
		}
		var j string
		if err := json.Unmarshal([]byte(s), &j); err != nil {
			t.Fatalf("decodeQuoted takes %s, JSON refuses it: %v", s, err)
		}
		if got != y["v"] || got != j {
			t.Fatalf("%s: decodeQuoted %q, YAML %q, JSON %q", s, got, y["v"], j)
		}
	})
}

func TestShapeIsUsedOnlyWhereItIsTheParse(t *testing.T) {
	cases := []struct {
		name, tmpl string
		a, b       []string
		used       bool
	}{
		{"quoted values", "node: {name: \x01, site: \x01}\n", []string{`"n1"`, `"s"`}, []string{`"n2"`, `"s"`}, true},
		{"words in comments, quotes and plain", "# for \x01\na: '\x01'\nb: \"\x01\"\nc: \x01\n", []string{"w1"}, []string{"w2"}, true},
		{"a key", "\x01: 1\n", []string{`"k"`}, []string{`"j"`}, false},
		{"part of a scalar", "a: x-\x01\n", []string{"y"}, []string{"z"}, false},
		{"a shape with an anchor", "a: &x \x01\nb: *x\n", []string{`"v"`}, []string{`"w"`}, false},
		{"an explicit tag", "a: !!int \x01\n", []string{`"1"`}, []string{`"2"`}, false},
		{"a plain scalar going on", "a: \x01\n  more\n", []string{"w1"}, []string{"w2"}, false},
		{"a value that is not a string unquoted stays in the shape", "a: \x01\n", []string{"true"}, []string{"true"}, false},
		{"not YAML", "a: [\x01\n", []string{`"v"`}, []string{`"w"`}, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := newShapeCache()
			wa, wb := writeShaped(c, tc.tmpl, tc.a), writeShaped(c, tc.tmpl, tc.b)
			if c.tree(wa.shape.Bytes(), wa.values) != nil {
				t.Fatal("a tree from a shape seen once: it should have been parsed from its bytes")
			}
			tree := c.tree(wb.shape.Bytes(), wb.values)
			if used := tree != nil; used != tc.used {
				t.Fatalf("shape used: %v, want %v\nshape:\n%s", used, tc.used, wb.shape.Bytes())
			}
			if tree == nil {
				return
			}
			want, err := parseDocument("b.yaml", wb.file.Bytes())
			if err != nil {
				t.Fatal(err)
			}
			if diff := sameTree(want, tree); diff != "" {
				t.Fatal(diff)
			}
		})
	}
}

// The shipped templates: each of the two sites' four classes is parsed
// once and every other node of its shape reuses it; the files and the
// verdicts are the same as when every file is parsed.
func TestRenderWithShapesIsRenderWithout(t *testing.T) {
	f, err := LoadFleet("fleet")
	if err != nil {
		t.Fatal(err)
	}
	inv := &Inventory{Vars: map[string]any{}}
	base, err := LoadInventory("fleet/inventory.example.yaml")
	if err != nil {
		t.Fatal(err)
	}
	inv.Vars = base.Vars
	sites, classes := []string{"plant-7", "plant-9"}, []string{"gw-lte", "gw-fiber", "worker"}
	odd := []any{"a: b # c", "é", "line\nbreak", `"quoted"`, "yes", "1e3", "null", strings.Repeat("k", 3000), "\u0085", "tab\t"}
	for i := range 600 {
		n := InventoryNode{Name: fmt.Sprintf("node-%04d", i), Site: sites[i%2], Class: classes[i%3], Vars: map[string]any{"uplink": "wwan0"}}
		if i%7 == 0 {
			n.Vars = map[string]any{"uplink": odd[i%len(odd)], "tunnel": map[string]any{"endpoint_host": odd[(i/7)%len(odd)]}}
		}
		if i%11 == 0 {
			n.Vars = mergeVars(map[string]any{"tunnel": map[string]any{"keepalive": odd[(i/11)%len(odd)]}}, n.Vars)
		}
		inv.Nodes = append(inv.Nodes, n)
	}
	inv.Nodes = append(inv.Nodes, InventoryNode{Name: "7up", Site: "plant-7", Class: "worker"}) // a name that is not a word
	c := newShapeCache()
	got, gotErrs := f.renderAll(inv.Vars, inv.Nodes, c, nil)
	want, wantErrs := f.renderAll(inv.Vars, inv.Nodes, nil, nil)
	failed := 0
	for i, n := range inv.Nodes {
		if diff := cmp.Diff(fmt.Sprint(wantErrs[i]), fmt.Sprint(gotErrs[i])); diff != "" {
			t.Errorf("%s: the error with shapes differs from without (-without +with):\n%s", n.Name, diff)
		}
		if diff := cmp.Diff(string(want[i]), string(got[i])); diff != "" {
			t.Errorf("%s: the file with shapes differs from without (-without +with):\n%s", n.Name, diff)
		}
		if wantErrs[i] != nil {
			failed++
		}
	}
	t.Logf("%d of %d nodes failed, %d validated from %d shapes", failed, len(inv.Nodes), c.reused.Load(), c.parsed.Load())
	if failed == 0 || failed > len(inv.Nodes)/4 {
		t.Errorf("%d of %d nodes failed: want some (the odd values), not most", failed, len(inv.Nodes))
	}
	if r := c.reused.Load(); r < int64(len(inv.Nodes))*3/4 {
		t.Errorf("%d of %d nodes validated from a shape's tree (%d shapes parsed), want most", r, len(inv.Nodes), c.parsed.Load())
	}
}

// A file whose own text spells a placeholder has the shape of a file with
// one more value: it is parsed from its bytes (and nothing goes out of
// range). The nonce is new for each Render, so this takes a test to make.
func TestAFileThatSpellsAPlaceholderIsParsedFromItsBytes(t *testing.T) {
	c := newShapeCache()
	two := writeShaped(c, "a: \x01\nb: \x01\n", []string{`"x"`, `"y"`})
	spelt := writeShaped(c, "a: \x01\nb: \""+c.nonce+"1_\"\n", []string{`"x"`})
	if two.shape.String() != spelt.shape.String() {
		t.Fatalf("the premise: the two shapes differ:\n%s\n%s", two.shape.Bytes(), spelt.shape.Bytes())
	}
	c.tree(two.shape.Bytes(), two.values)
	if c.tree(two.shape.Bytes(), two.values) == nil {
		t.Fatal("the shape of two quoted values is not used")
	}
	if c.tree(spelt.shape.Bytes(), spelt.values) != nil {
		t.Error("a tree from the shape for a file with one value less")
	}
}
