package fleet

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/go-json-experiment/json/jsontext"

	"github.com/edgeheal/edgeheal/wire"
)

// decodeHistory reads a history payload as wire.DecodeHistory does, to
// the same value and the same acceptance (FuzzDecodeHistory holds the
// two together), 2.6 times faster with a tenth of the garbage for a
// worker's decoder (BenchmarkDecodeHistory): a view reads every node's
// history at its start, 100,000 of them at once in a large fleet. It
// walks the JSON's tokens (jsontext, the tokenizer of encoding/json/v2)
// into the fields it knows and skips the others, with encoding/json's
// rules: names matched without regard to case, the last of a duplicated
// name wins, null leaves a field as it is, a value of the wrong type is
// an error.
func decodeHistory(b []byte) (wire.History, error) {
	var h wire.History
	err := decodeHistoryInto(b, &h)
	return h, err
}

// decodeHistoryInto is decodeHistory into h, whose lists' room it reuses
// (what it held before does not matter; a list the payload lacks is then
// empty rather than nil): a worker decodes thousands with little
// garbage. On error h holds no history.
func decodeHistoryInto(b []byte, h *wire.History) error {
	return decodeWith(b, h, nil)
}

// dec is a JSON decoder and the strings it has made, shared with the
// next payload it decodes (the kinds, targets, diagnoses and rungs that
// every node repeats cost nothing after the first).
type dec struct {
	*jsontext.Decoder
	strs map[string]string
}

// maxDecodedStrings bounds a decoder's strings.
const maxDecodedStrings = 4096

// historyDecoder decodes histories one after another, reusing its
// history's room and its strings. Not for concurrent use.
type historyDecoder struct {
	h    wire.History
	strs map[string]string
}

func (hd *historyDecoder) decode(b []byte) (*wire.History, error) {
	if hd.strs == nil {
		hd.strs = map[string]string{}
	}
	err := decodeWith(b, &hd.h, hd.strs)
	return &hd.h, err
}

func decodeWith(b []byte, h *wire.History, strs map[string]string) error {
	*h = wire.History{
		Hours:     wire.Series{Healthy: h.Hours.Healthy[:0], Dark: h.Hours.Dark[:0], Degraded: h.Hours.Degraded[:0], Incidents: h.Hours.Incidents[:0]},
		Days:      wire.Series{Healthy: h.Days.Healthy[:0], Dark: h.Days.Dark[:0], Degraded: h.Days.Degraded[:0], Incidents: h.Days.Incidents[:0]},
		Targets:   h.Targets[:0],
		Incidents: h.Incidents[:0],
	}
	// A bytes.Buffer is read in place.
	d := &dec{jsontext.NewDecoder(bytes.NewBuffer(b), jsontext.AllowDuplicateNames(true), jsontext.AllowInvalidUTF8(true)), strs}
	err := object(d, "history", func(name []byte) error { return historyField(d, h, name) })
	if err == nil {
		if _, end := d.ReadToken(); end != io.EOF {
			err = errors.New("data after the value")
		}
	}
	if err != nil {
		return fmt.Errorf("history: %w", err)
	}
	return validHistory(*h)
}

// validHistory is wire.DecodeHistory's checks of a decoded history.
func validHistory(h wire.History) error {
	if h.V != wire.Version {
		return fmt.Errorf("history: v=%d: %w", h.V, wire.ErrVersion)
	}
	if h.Node == "" {
		return errors.New("history: no node")
	}
	for _, s := range []struct {
		name string
		s    wire.Series
	}{{"hours", h.Hours}, {"days", h.Days}} {
		n := len(s.s.Healthy)
		if len(s.s.Dark) != n || len(s.s.Degraded) != n || len(s.s.Incidents) != n {
			return fmt.Errorf("history: %s: series of different lengths", s.name)
		}
		if n > 0 && s.s.Step <= 0 {
			return fmt.Errorf("history: %s: no step", s.name)
		}
	}
	return nil
}

// historyField reads one field of wire.History; the fields of its parts
// are below.
func historyField(d *dec, h *wire.History, name []byte) error {
	switch {
	case is(name, "v"):
		return intValue(d, &h.V)
	case is(name, "node"):
		return stringValue(d, &h.Node)
	case is(name, "site"):
		return stringValue(d, &h.Site)
	case is(name, "ts"):
		return timeValue(d, &h.TS)
	case is(name, "since"):
		return timeValue(d, &h.Since)
	case is(name, "hours"):
		return series(d, &h.Hours)
	case is(name, "days"):
		return series(d, &h.Days)
	case is(name, "targets"):
		return array(d, &h.Targets, func(t *wire.TargetSummary) error {
			return object(d, "targets", func(name []byte) error { return target(d, t, name) })
		})
	case is(name, "incidents"):
		return array(d, &h.Incidents, func(in *wire.Incident) error {
			return object(d, "incidents", func(name []byte) error { return incident(d, in, name) })
		})
	}
	return d.SkipValue()
}

func series(d *dec, s *wire.Series) error {
	return object(d, "series", func(name []byte) error {
		switch {
		case is(name, "start"):
			return timeValue(d, &s.Start)
		case is(name, "step_seconds"):
			return intValue(d, &s.Step)
		case is(name, "healthy"):
			return ints(d, &s.Healthy)
		case is(name, "dark"):
			return ints(d, &s.Dark)
		case is(name, "degraded"):
			return ints(d, &s.Degraded)
		case is(name, "incidents"):
			return ints(d, &s.Incidents)
		}
		return d.SkipValue()
	})
}

func target(d *dec, t *wire.TargetSummary, name []byte) error {
	switch {
	case is(name, "kind"):
		return stringValue(d, &t.Kind)
	case is(name, "target"):
		return stringValue(d, &t.Target)
	case is(name, "healthy_seconds"):
		return int64Value(d, &t.HealthySeconds)
	case is(name, "dark_seconds"):
		return int64Value(d, &t.DarkSeconds)
	case is(name, "degraded_seconds"):
		return int64Value(d, &t.DegradedSeconds)
	case is(name, "incidents"):
		return intValue(d, &t.Incidents)
	case is(name, "gave_ups"):
		return intValue(d, &t.GaveUps)
	case is(name, "outage_p50_seconds"):
		return floatValue(d, &t.OutageP50Seconds)
	case is(name, "outage_p95_seconds"):
		return floatValue(d, &t.OutageP95Seconds)
	case is(name, "outage_max_seconds"):
		return floatValue(d, &t.OutageMaxSeconds)
	case is(name, "mttr_seconds"):
		return floatValue(d, &t.MTTRSeconds)
	case is(name, "repairs"):
		if null(d) {
			return d.SkipValue()
		}
		if t.Repairs == nil {
			t.Repairs = map[string]int{}
		}
		return object(d, "repairs", func(name []byte) error {
			key := string(name) // name is the decoder's until the next read
			v := t.Repairs[key]
			err := intValue(d, &v)
			t.Repairs[key] = v
			return err
		})
	}
	return d.SkipValue()
}

func incident(d *dec, in *wire.Incident, name []byte) error {
	switch {
	case is(name, "id"):
		return stringValue(d, &in.ID)
	case is(name, "kind"):
		return stringValue(d, &in.Kind)
	case is(name, "target"):
		return stringValue(d, &in.Target)
	case is(name, "start"):
		return timeValue(d, &in.Start)
	case is(name, "end"):
		return timeValue(d, &in.End)
	case is(name, "duration_seconds"):
		return floatValue(d, &in.DurationSeconds)
	case is(name, "diagnosis"):
		return stringValue(d, &in.Diagnosis)
	case is(name, "repairs"):
		return array(d, &in.Repairs, func(s *string) error { return stringValue(d, s) })
	case is(name, "healed_by"):
		return stringValue(d, &in.HealedBy)
	case is(name, "gave_up"):
		return boolValue(d, &in.GaveUp)
	}
	return d.SkipValue()
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
	tok, err := d.ReadToken()
	if err != nil {
		return err
	}
	switch tok.Kind() {
	case 'n':
		return nil
	case '{':
	default:
		return fmt.Errorf("%s: %w", what, errType)
	}
	for d.PeekKind() != '}' {
		raw, err := d.ReadValue()
		if err != nil {
			return err
		}
		name := []byte(raw[1 : len(raw)-1])
		if bytes.IndexByte(name, '\\') >= 0 {
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
	_, err = d.ReadToken()
	return err
}

// array reads an array into *list (replacing it, as encoding/json does);
// null sets it to nil.
func array[T any](d *dec, list *[]T, fn func(*T) error) error {
	tok, err := d.ReadToken()
	if err != nil {
		return err
	}
	switch tok.Kind() {
	case 'n':
		*list = nil
		return nil
	case '[':
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
	_, err = d.ReadToken()
	return err
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
	tok, err := d.ReadToken()
	if err != nil {
		return err
	}
	switch tok.Kind() {
	case 'n':
		return nil
	case 't', 'f':
		*to = tok.Bool()
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
