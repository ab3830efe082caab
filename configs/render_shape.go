package configs

// A fleet's rendered files differ mostly in their values: node names,
// addresses, a keepalive. Parsing the YAML of each file was more than half
// of edgeheal render (docs/performance.md, "edgeheal render at fleet
// scale"), so render parses each distinct *shape* of file once and gives
// every other file of that shape a copy of the parsed tree with its own
// values put in. The tree is then validated by the same code as
// `edgeheal config check`, and it is the tree that check would parse from
// the file's bytes, for the reasons below; anything outside them is parsed
// from the bytes as before.
//
// A shape is the rendered file with some printed values replaced by a
// placeholder (a random word, new for each Render). Two kinds of value
// are replaced:
//
//   - a quoted value: a JSON string of printable ASCII using only the
//     escapes YAML reads the same way (\" \\ \b \f \n \r \t \uXXXX outside
//     the surrogates), as the quote function writes it. Its placeholder
//     keeps the quotes: "ehNONCE_3_".
//   - a word: a letter, then letters, digits, '.', '_' and '-' (a node,
//     site or class name), and not true, false or null in any of YAML's
//     spellings: a word YAML reads as a string even unquoted. Replaced by
//     ehNONCE_3_.
//
// Any other value (false, 25, a JSON list, a name that starts with a
// digit) stays in the shape as it is, so files with different ones have
// different shapes.
//
// A shape is used only when its parse puts every placeholder, exactly
// once, in one of these places, and the shape holds no anchor, alias or
// placeholder anywhere else (a key, a tag, part of a longer scalar):
//
//   - the whole of a double-quoted string scalar (tag !!str) that is not
//     a mapping key, starting at the placeholder's opening quote (for a
//     quoted value) or just inside the scalar's quotes (a word; single
//     quotes also). The YAML scanner ends a quoted scalar at the first
//     unescaped quote of its kind and folds it only at a line break; the
//     value put in has neither, so the file's scalar spans the value
//     exactly where the shape's spans the placeholder, and reads as the
//     same string the escapes spell (render_shape_test.go holds the
//     decoding to the YAML library's).
//   - the whole of a plain scalar (tag !!str, not a key), for a word: a
//     plain scalar ends at a line break, at ": " or " #", at a flow
//     indicator inside [] or {}, none of which a word holds, and a word
//     starts with no indicator; so the file's scalar is the word, and
//     YAML resolves it as a string, as it did the placeholder.
//   - a comment, which runs to the end of its line whatever it holds; the
//     value has no line break. Validation never reads comments.
//
// Everything else in the file is the shape's own bytes, so the file's
// tree is the shape's with those scalars' values replaced. Only the
// columns after a replaced value differ, and only a problem's message
// uses them: a file that fails is parsed again from its bytes
// (validate), so what the problem says is as before. The YAML library's
// rules these reasons rest on, and the measurements: docs/performance.md,
// "Issue 17: each shape parsed once, writing while rendering".

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"unicode/utf8"

	"go.yaml.in/yaml/v3"
)

// maxShapes bounds the shapes one Render remembers: a fleet whose every
// file has its own shape parses each from its bytes, as without shapes.
const maxShapes = 4096

// shapeCache is one Render's shapes.
type shapeCache struct {
	nonce string // the placeholders' prefix: ehNONCE_

	mu     sync.Mutex
	byKey  map[string]*shape
	parsed atomic.Int64 // shapes parsed (for tests)
	reused atomic.Int64 // files validated from a shape's tree (for tests)
}

// shape is one distinct shape. A shape seen once is not parsed: the file
// that had it was parsed from its bytes, and a shape no other file has
// would only double that work.
type shape struct {
	once  sync.Once
	doc   *yaml.Node         // the shape's parse; nil when it cannot be used
	subst map[*yaml.Node]int // scalars of doc that are a placeholder: its index
	// the placeholders in comments: with subst, every one of the shape
	inComments int
}

func newShapeCache() *shapeCache {
	var b [8]byte
	rand.Read(b[:]) // never fails (crypto/rand)
	return &shapeCache{nonce: "eh" + hex.EncodeToString(b[:]) + "_", byKey: map[string]*shape{}}
}

// valueKind is how a printed value stands in a shape.
type valueKind uint8

const (
	verbatim valueKind = iota
	quotedValue
	wordValue
)

// shapeValue is a value the shape has a placeholder for.
type shapeValue struct {
	kind valueKind
	text string // as printed
}

// shapeWriter is the writer a node's template runs into: the file's bytes
// in file, its shape in shape (configs/internal/template.ValueWriter).
type shapeWriter struct {
	nonce  string
	file   bytes.Buffer
	shape  bytes.Buffer
	values []shapeValue
}

func (w *shapeWriter) Write(p []byte) (int, error) {
	w.file.Write(p)
	w.shape.Write(p)
	return len(p), nil
}

func (w *shapeWriter) WriteValue(text string) error {
	w.file.WriteString(text)
	kind := kindOf(text)
	if kind == verbatim {
		w.shape.WriteString(text)
		return nil
	}
	i := len(w.values)
	w.values = append(w.values, shapeValue{kind: kind, text: text})
	if kind == quotedValue {
		w.shape.WriteByte('"')
	}
	w.shape.WriteString(w.nonce)
	w.shape.WriteString(strconv.Itoa(i))
	w.shape.WriteByte('_')
	if kind == quotedValue {
		w.shape.WriteByte('"')
	}
	return nil
}

// kindOf says whether a printed value can have a placeholder.
func kindOf(text string) valueKind {
	if text == "" {
		return verbatim
	}
	if isWord(text) && plainString(text) {
		return wordValue
	}
	if _, ok := decodeQuoted(text); ok {
		return quotedValue
	}
	return verbatim
}

func isWord(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '.' || c == '_' || c == '-') {
			return false
		}
	}
	return s != ""
}

// plainString reports whether a word YAML reads as a string when it is
// unquoted: it starts with a letter (no number, no indicator, no ".inf")
// and is none of YAML's spellings of true, false and null (go.yaml.in/yaml/v3
// resolve.go).
func plainString(w string) bool {
	if c := w[0]; !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z') {
		return false
	}
	switch w {
	case "true", "True", "TRUE", "false", "False", "FALSE", "null", "Null", "NULL":
		return false
	}
	return true
}

// decodeQuoted reads s as a double-quoted scalar that YAML and JSON read
// alike (see the top of this file): printable ASCII in quotes, escapes
// \" \\ \b \f \n \r \t and \uXXXX outside the surrogates. ok is false for
// anything else.
func decodeQuoted(s string) (string, bool) {
	if len(s) < 2 || s[0] != '"' || s[len(s)-1] != '"' {
		return "", false
	}
	in := s[1 : len(s)-1]
	if !strings.ContainsRune(in, '\\') {
		for i := 0; i < len(in); i++ {
			if in[i] < 0x20 || in[i] > 0x7e || in[i] == '"' {
				return "", false
			}
		}
		return in, true
	}
	out := make([]byte, 0, len(in))
	for i := 0; i < len(in); i++ {
		c := in[i]
		switch {
		case c < 0x20 || c > 0x7e || c == '"':
			return "", false
		case c != '\\':
			out = append(out, c)
			continue
		}
		if i+1 >= len(in) {
			return "", false
		}
		i++
		switch in[i] {
		case '"', '\\':
			out = append(out, in[i])
		case 'b':
			out = append(out, '\b')
		case 'f':
			out = append(out, '\f')
		case 'n':
			out = append(out, '\n')
		case 'r':
			out = append(out, '\r')
		case 't':
			out = append(out, '\t')
		case 'u':
			if i+4 >= len(in) {
				return "", false
			}
			v, err := strconv.ParseUint(in[i+1:i+5], 16, 32)
			if err != nil || (0xd800 <= v && v <= 0xdfff) {
				return "", false
			}
			out = utf8.AppendRune(out, rune(v))
			i += 4
		default:
			return "", false
		}
	}
	return string(out), true
}

// lookup returns the shape of key when a file had it before (a shape is
// worth parsing from its second file on), and remembers it otherwise.
func (c *shapeCache) lookup(key []byte) *shape {
	c.mu.Lock()
	defer c.mu.Unlock()
	sh := c.byKey[string(key)]
	if sh == nil && len(c.byKey) < maxShapes {
		c.byKey[string(key)] = &shape{} // the first file of it: parsed from its bytes
	}
	return sh
}

// tree is the parse of the file whose shape is key and whose printed
// values are values, or nil when the shape cannot be used: the file is
// then parsed from its bytes.
func (c *shapeCache) tree(key []byte, values []shapeValue) *yaml.Node {
	sh := c.lookup(key)
	if sh == nil {
		return nil
	}
	sh.once.Do(func() {
		c.parsed.Add(1)
		sh.doc, sh.subst, sh.inComments = c.prepare(key, values)
	})
	if sh.doc == nil || len(values) != len(sh.subst)+sh.inComments {
		return nil // (a file whose own text holds the nonce: never by chance)
	}
	c.reused.Add(1)
	return treeCopy{lines: true, value: func(n *yaml.Node) (string, bool) {
		i, ok := sh.subst[n]
		if !ok {
			return "", false
		}
		if v := values[i]; v.kind == quotedValue {
			return decodeQuoted(v.text)
		}
		return values[i].text, true
	}}.copyTree(sh.doc)
}

// prepare parses a shape and checks that every placeholder is where it may
// be (the top of this file). It returns nil when the shape cannot be used.
func (c *shapeCache) prepare(key []byte, values []shapeValue) (*yaml.Node, map[*yaml.Node]int, int) {
	nonce := []byte(c.nonce)
	if bytes.Count(key, nonce) != len(values) || len(values) == 0 {
		return nil, nil, 0 // a value or the template's text holds the nonce
	}
	doc, err := parseDocument("", key)
	if err != nil || doc == nil {
		return nil, nil, 0
	}
	p := placeholders{nonce: c.nonce, key: key, values: values, found: make([]int, len(values)), subst: map[*yaml.Node]int{}}
	if !p.walk(doc, false) {
		return nil, nil, 0
	}
	for _, n := range p.found {
		if n != 1 {
			return nil, nil, 0
		}
	}
	return doc, p.subst, len(values) - len(p.subst)
}

// placeholders finds the placeholders of one shape's parse.
type placeholders struct {
	nonce  string
	key    []byte // the shape
	lines  []int  // offsets of the shape's lines, made when first needed
	values []shapeValue
	found  []int // times each placeholder was found
	subst  map[*yaml.Node]int
}

// walk reports whether n and everything under it hold placeholders only
// where they may be.
func (p *placeholders) walk(n *yaml.Node, isKey bool) bool {
	if n.Anchor != "" || n.Kind == yaml.AliasNode || strings.Contains(n.Tag, p.nonce) {
		return false
	}
	for _, comment := range []string{n.HeadComment, n.LineComment, n.FootComment} {
		if !p.inComment(comment) {
			return false
		}
	}
	if strings.Contains(n.Value, p.nonce) {
		if isKey || n.Kind != yaml.ScalarNode || !p.scalar(n) {
			return false
		}
	}
	for i, e := range n.Content {
		if !p.walk(e, n.Kind == yaml.MappingNode && i%2 == 0) {
			return false
		}
	}
	return true
}

// inComment counts the placeholders in a comment.
func (p *placeholders) inComment(comment string) bool {
	for {
		at := strings.Index(comment, p.nonce)
		if at < 0 {
			return true
		}
		comment = comment[at+len(p.nonce):]
		i, rest, ok := p.index(comment)
		if !ok {
			return false
		}
		p.found[i]++
		comment = rest
	}
}

// index reads a placeholder's "N_" after the nonce.
func (p *placeholders) index(s string) (int, string, bool) {
	end := strings.IndexByte(s, '_')
	if end <= 0 {
		return 0, "", false
	}
	i, err := strconv.Atoi(s[:end])
	if err != nil || i < 0 || i >= len(p.values) || strconv.Itoa(i) != s[:end] {
		return 0, "", false
	}
	return i, s[end+1:], true
}

// scalar checks a scalar whose value holds the nonce: the whole of a
// quoted !!str scalar, and at its place in the shape.
func (p *placeholders) scalar(n *yaml.Node) bool {
	if !strings.HasPrefix(n.Value, p.nonce) || n.Tag != "!!str" {
		return false
	}
	i, rest, ok := p.index(n.Value[len(p.nonce):])
	if !ok || rest != "" {
		return false
	}
	ph := p.nonce + strconv.Itoa(i) + "_"
	var at string // what the shape must hold where the scalar starts
	switch {
	case p.values[i].kind == quotedValue && n.Style&yaml.DoubleQuotedStyle != 0:
		at = `"` + ph + `"`
	case p.values[i].kind == wordValue && n.Style&yaml.DoubleQuotedStyle != 0:
		at = `"` + ph + `"`
	case p.values[i].kind == wordValue && n.Style&yaml.SingleQuotedStyle != 0:
		at = `'` + ph + `'`
	case p.values[i].kind == wordValue && n.Style == 0:
		at = ph
	default:
		return false
	}
	off, ok := p.offset(n.Line, n.Column)
	if !ok || !bytes.HasPrefix(p.key[off:], []byte(at)) {
		return false
	}
	p.found[i]++
	p.subst[n] = i
	return true
}

// offset is the byte offset of a parse position (line and column from 1,
// the column in characters).
func (p *placeholders) offset(line, column int) (int, bool) {
	if p.lines == nil {
		p.lines = []int{0}
		for i, c := range p.key {
			if c == '\n' {
				p.lines = append(p.lines, i+1)
			}
		}
	}
	if line < 1 || line > len(p.lines) || column < 1 {
		return 0, false
	}
	off := p.lines[line-1]
	for range column - 1 {
		if off >= len(p.key) || p.key[off] == '\n' {
			return 0, false
		}
		_, size := utf8.DecodeRune(p.key[off:])
		off += size
	}
	return off, true
}
