package fleet

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/go-json-experiment/json/jsontext"
)

// The walk over a JSON payload whose syntax is checked (historyjson.go
// reads a history with it), with encoding/json's rules for what each
// value may be.

// dec walks a payload whose syntax jsontext has checked whole (one pass,
// the costly part of a tokenizer), so that it needs to find only where
// each value ends; and it keeps the strings it has made for the next
// payload (the kinds, targets, diagnoses and rungs that every node
// repeats cost nothing after the first).
type dec struct {
	b    []byte
	i    int
	strs map[string]string
}

func (d *dec) ws() {
	for d.i < len(d.b) && isSpace(d.b[d.i]) {
		d.i++
	}
}

// PeekKind is the kind of the next value ('0' for a number) or of the
// closing bracket.
func (d *dec) PeekKind() byte {
	d.ws()
	if d.i >= len(d.b) {
		return 0
	}
	if c := d.b[d.i]; c == '-' || c >= '0' && c <= '9' {
		return '0'
	}
	return d.b[d.i]
}

// ReadValue is the next value's bytes; it moves past the value and a
// colon or comma after it.
func (d *dec) ReadValue() (jsontext.Value, error) {
	d.ws()
	start := d.i
	switch d.b[d.i] {
	case '"':
		d.skipString()
	case '{', '[':
		for depth := 0; ; {
			switch c := d.b[d.i]; c {
			case '"':
				d.skipString()
				continue
			case '{', '[':
				depth++
			case '}', ']':
				depth--
			}
			d.i++
			if depth == 0 {
				break
			}
		}
	default:
		for d.i < len(d.b) && !isSpace(d.b[d.i]) && d.b[d.i] != ',' && d.b[d.i] != ':' && d.b[d.i] != '}' && d.b[d.i] != ']' {
			d.i++
		}
	}
	v := jsontext.Value(d.b[start:d.i])
	d.separator()
	return v, nil
}

func (d *dec) skipString() {
	for d.i++; d.b[d.i] != '"'; d.i++ {
		if d.b[d.i] == '\\' {
			d.i++
		}
	}
	d.i++
}

func (d *dec) separator() {
	d.ws()
	if d.i < len(d.b) && (d.b[d.i] == ',' || d.b[d.i] == ':') {
		d.i++
	}
}

// open moves into an object or array; close out of it.
func (d *dec) open() { d.ws(); d.i++ }

func (d *dec) close() { d.ws(); d.i++; d.separator() }

// SkipValue moves past the next value.
func (d *dec) SkipValue() error {
	_, err := d.ReadValue()
	return err
}

// is matches a JSON name to a field's as encoding/json does: without
// regard to case (Unicode's simple folding, which maps only K and ſ of
// all non-ASCII letters to an ASCII one).
func is(name []byte, field string) bool {
	if len(name) == len(field) { // the usual case, ASCII: no decoding of runes
		ascii := true
		for i := range len(name) {
			c := name[i]
			if c >= 0x80 {
				ascii = false
				break
			}
			if c|0x20 != field[i]|0x20 || (c|0x20 < 'a' || c|0x20 > 'z') && c != field[i] {
				return false
			}
		}
		if ascii {
			return true
		}
	}
	return len(name) <= 3*len(field) && strings.EqualFold(string(name), field)
}

var errType = errors.New("a value of the wrong type")

func null(d *dec) bool { return d.PeekKind() == 'n' }

// object reads an object, calling fn for each name with the decoder at
// its value; null is no object and leaves everything as it is. The name
// is the decoder's bytes (unescaped): fn reads them before it reads on.
func object(d *dec, what string, fn func(name []byte) error) error {
	switch d.PeekKind() {
	case 'n':
		return d.SkipValue()
	case '{':
		d.open()
	default:
		return fmt.Errorf("%s: %w", what, errType)
	}
	for d.PeekKind() != '}' {
		raw, err := d.ReadValue()
		if err != nil {
			return err
		}
		name := []byte(raw[1 : len(raw)-1])
		if bytes.IndexByte(name, '\\') >= 0 || !utf8.Valid(name) {
			var s string
			if err := json.Unmarshal(raw, &s); err != nil {
				return err
			}
			name = []byte(s)
		}
		if err := fn(name); err != nil {
			return err
		}
	}
	d.close()
	return nil
}

// array reads an array into *list (replacing it, as encoding/json does);
// null sets it to nil.
func array[T any](d *dec, list *[]T, fn func(*T) error) error {
	switch d.PeekKind() {
	case 'n':
		*list = nil
		return d.SkipValue()
	case '[':
		d.open()
	default:
		return errType
	}
	out := (*list)[:0]
	if out == nil {
		out = make([]T, 0, 4)
	}
	for d.PeekKind() != ']' {
		out = append(out, *new(T))
		if err := fn(&out[len(out)-1]); err != nil {
			return err
		}
	}
	*list = out
	d.close()
	return nil
}

// ints reads an array of ints. The decoder has checked the array's
// syntax whole, so its elements are split at the commas here, each a
// number without fraction or exponent, or null (0, as encoding/json
// leaves a fresh element); anything else is the wrong type.
func ints(d *dec, list *[]int) error {
	raw, err := d.ReadValue()
	if err != nil {
		return err
	}
	switch raw.Kind() {
	case 'n':
		*list = nil
		return nil
	case '[':
	default:
		return errType
	}
	out := (*list)[:0]
	if out == nil {
		out = make([]int, 0, 4)
	}
	for i := 1; i < len(raw)-1; {
		for i < len(raw) && isSpace(raw[i]) {
			i++
		}
		if raw[i] == ']' { // an empty array
			break
		}
		start := i
		for i < len(raw) && raw[i] != ',' && raw[i] != ']' && !isSpace(raw[i]) {
			i++
		}
		el := raw[start:i]
		switch {
		case string(el) == "null":
			out = append(out, 0)
		case el[0] == '-' || el[0] >= '0' && el[0] <= '9':
			n, ok := parseInt(el)
			if !ok {
				return errType
			}
			out = append(out, int(n))
		default:
			return errType
		}
		for i < len(raw) && (isSpace(raw[i]) || raw[i] == ',') {
			i++
			if raw[i-1] == ',' {
				break
			}
		}
	}
	*list = out
	return nil
}

func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

// number reads a number's raw JSON, or reports null (nil, nil).
func number(d *dec) (jsontext.Value, error) {
	v, err := d.ReadValue()
	if err != nil {
		return nil, err
	}
	switch v.Kind() {
	case 'n':
		return nil, nil
	case '0':
		return v, nil
	}
	return nil, errType
}

func int64Value(d *dec, to *int64) error {
	v, err := number(d)
	if v == nil || err != nil {
		return err
	}
	n, ok := parseInt(v)
	if !ok {
		return errType
	}
	*to = n
	return nil
}

func intValue(d *dec, to *int) error {
	n := int64(*to)
	err := int64Value(d, &n)
	*to = int(n) // int is 64 bits wide where the view runs (amd64, arm64)
	return err
}

// parseInt is strconv.ParseInt(s, 10, 64) of a JSON number, without a
// copy: a fraction or an exponent is not an int.
func parseInt(v []byte) (int64, bool) {
	neg := len(v) > 0 && v[0] == '-'
	if neg {
		v = v[1:]
	}
	if len(v) == 0 || len(v) > 19 { // 20 digits are beyond int64
		return 0, false
	}
	var n uint64
	for _, c := range v {
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + uint64(c-'0')
	}
	if neg {
		if n > 1<<63 {
			return 0, false
		}
		return -int64(n), true
	}
	if n > 1<<63-1 {
		return 0, false
	}
	return int64(n), true
}

func floatValue(d *dec, to *float64) error {
	v, err := number(d)
	if v == nil || err != nil {
		return err
	}
	f, err := strconv.ParseFloat(string(v), 64)
	if err != nil {
		return errType
	}
	*to = f
	return nil
}

func stringValue(d *dec, to *string) error {
	raw, err := d.ReadValue()
	if err != nil {
		return err
	}
	switch raw.Kind() {
	case 'n':
		return nil
	case '"':
	default:
		return errType
	}
	inner := raw[1 : len(raw)-1]
	if bytes.IndexByte(inner, '\\') >= 0 || !utf8.Valid(inner) {
		return json.Unmarshal(raw, to) // escapes, or bytes that are not UTF-8: encoding/json's own reading
	}
	if v, ok := d.strs[string(inner)]; ok {
		*to = v
		return nil
	}
	*to = string(inner)
	if d.strs != nil && len(d.strs) < maxDecodedStrings {
		d.strs[*to] = *to
	}
	return nil
}

func boolValue(d *dec, to *bool) error {
	raw, err := d.ReadValue()
	if err != nil {
		return err
	}
	switch raw[0] {
	case 'n':
		return nil
	case 't', 'f':
		*to = raw[0] == 't'
		return nil
	}
	return errType
}

// timeValue reads a time as time.Time's UnmarshalJSON does (RFC 3339).
func timeValue(d *dec, to *time.Time) error {
	v, err := d.ReadValue()
	if err != nil {
		return err
	}
	switch v.Kind() {
	case 'n':
		return nil
	case '"':
		var t time.Time
		if err := t.UnmarshalJSON(v); err != nil {
			return err
		}
		*to = t
		return nil
	}
	return errType
}
