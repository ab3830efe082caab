package metrics

import (
	"bytes"
	"math"
	"slices"
	"strconv"
	"strings"
)

// This file is the Prometheus text exposition format, version 0.0.4
// (https://prometheus.io/docs/instrumenting/exposition_formats/): the
// format every Prometheus server and agent scrapes, written by hand.
// prometheus/client_golang did this before, with client_model, protobuf
// and procfs under it: 2.2 MB of the 13 MB daemon, for a registry of
// fifteen families (docs/performance.md, "Binary size"). The tests parse
// this output with prometheus/common's own parser and lint it with
// promlint, so it stays what a scraper reads.

// Metric types, as the TYPE line names them.
const (
	typeCounter   = "counter"
	typeGauge     = "gauge"
	typeHistogram = "histogram"
	typeSummary   = "summary"
)

// family is one metric family: its name, help, type and label names.
type family struct {
	name, help, typ string
	labels          []string
}

// vec is a family with series, one per combination of label values. It
// is not safe for concurrent use: Metrics guards every vec with its lock.
// Labels are written in name order, as client_golang wrote them;
// with and delete take values in the order the vec was made with.
type vec struct {
	family            // labels in name order
	order   []int     // order[i]: the argument of with that is labels[i]
	buckets []float64 // histograms: upper bounds, ascending, without +Inf
	series  map[string]*series
}

// series is one labelled value of a vec.
type series struct {
	values []string // in the order of family.labels
	v      float64  // a counter's or gauge's value; a histogram's sum
	counts []uint64 // histograms: observations per bucket, +Inf last
	n      uint64   // histograms: observations
}

func newVec(typ, name, help string, labels ...string) *vec {
	v := &vec{family: family{name: name, help: help, typ: typ}, series: map[string]*series{}}
	v.order = make([]int, len(labels))
	for i := range v.order {
		v.order[i] = i
	}
	slices.SortFunc(v.order, func(a, b int) int { return strings.Compare(labels[a], labels[b]) })
	for _, i := range v.order {
		v.labels = append(v.labels, labels[i])
	}
	return v
}

func newHistogramVec(name, help string, buckets []float64, labels ...string) *vec {
	v := newVec(typeHistogram, name, help, labels...)
	v.buckets = buckets
	return v
}

func seriesKey(values []string) string { return strings.Join(values, "\xff") }

// with returns the series of values, made on first use.
func (v *vec) with(values ...string) *series {
	k := seriesKey(values)
	s, ok := v.series[k]
	if !ok {
		s = &series{values: make([]string, len(values))}
		for i, j := range v.order {
			s.values[i] = values[j]
		}
		if v.typ == typeHistogram {
			s.counts = make([]uint64, len(v.buckets)+1)
		}
		v.series[k] = s
	}
	return s
}

// delete removes the series of values, if there is one.
func (v *vec) delete(values ...string) { delete(v.series, seriesKey(values)) }

// observe adds one observation to a histogram series.
func (v *vec) observe(s *series, x float64) {
	i, _ := slices.BinarySearch(v.buckets, x) // the first bound >= x: "le"
	s.counts[i]++
	s.n++
	s.v += x
}

// write appends the family's HELP, TYPE and every series, sorted by label
// values so that two scrapes of the same state are the same bytes. A vec
// without series writes nothing, as client_golang did.
func (v *vec) write(b *bytes.Buffer) {
	if len(v.series) == 0 {
		return
	}
	writeHeader(b, v.family)
	all := make([]*series, 0, len(v.series))
	for _, s := range v.series {
		all = append(all, s)
	}
	slices.SortFunc(all, func(a, b *series) int { return slices.Compare(a.values, b.values) })
	for _, s := range all {
		if v.typ != typeHistogram {
			writeSample(b, v.name, v.labels, s.values, "", "", s.v)
			continue
		}
		var cum uint64
		for i, c := range s.counts {
			cum += c
			le := math.Inf(1)
			if i < len(v.buckets) {
				le = v.buckets[i]
			}
			writeSample(b, v.name+"_bucket", v.labels, s.values, "le", formatFloat(le), float64(cum))
		}
		writeSample(b, v.name+"_sum", v.labels, s.values, "", "", s.v)
		writeSample(b, v.name+"_count", v.labels, s.values, "", "", float64(s.n))
	}
}

func writeHeader(b *bytes.Buffer, f family) {
	b.WriteString("# HELP ")
	b.WriteString(f.name)
	b.WriteByte(' ')
	b.WriteString(escape(f.help, false))
	b.WriteString("\n# TYPE ")
	b.WriteString(f.name)
	b.WriteByte(' ')
	b.WriteString(f.typ)
	b.WriteByte('\n')
}

// writeSample writes one line: name{labels} value. extraName, if set, is
// one more label after the family's (a histogram's le, a summary's
// quantile).
func writeSample(b *bytes.Buffer, name string, labels, values []string, extraName, extraValue string, x float64) {
	b.WriteString(name)
	if len(labels) > 0 || extraName != "" {
		b.WriteByte('{')
		for i, l := range labels {
			if i > 0 {
				b.WriteByte(',')
			}
			writeLabel(b, l, values[i])
		}
		if extraName != "" {
			if len(labels) > 0 {
				b.WriteByte(',')
			}
			writeLabel(b, extraName, extraValue)
		}
		b.WriteByte('}')
	}
	b.WriteByte(' ')
	b.WriteString(formatFloat(x))
	b.WriteByte('\n')
}

func writeLabel(b *bytes.Buffer, name, value string) {
	b.WriteString(name)
	b.WriteString(`="`)
	b.WriteString(escape(value, true))
	b.WriteByte('"')
}

// escape escapes a HELP text (backslash, newline) or a label value (also
// the double quote), as the format says.
func escape(s string, quote bool) string {
	if !strings.ContainsAny(s, "\\\n\"") {
		return s
	}
	var b strings.Builder
	for _, r := range s {
		switch {
		case r == '\\':
			b.WriteString(`\\`)
		case r == '\n':
			b.WriteString(`\n`)
		case r == '"' && quote:
			b.WriteString(`\"`)
		default:
			b.WriteRune(r)
		}
	}
	return b.String()
}

// formatFloat writes a value as Go's shortest representation, with the
// format's spellings of infinities and NaN.
func formatFloat(f float64) string {
	switch {
	case math.IsInf(f, 1):
		return "+Inf"
	case math.IsInf(f, -1):
		return "-Inf"
	case math.IsNaN(f):
		return "NaN"
	}
	return strconv.FormatFloat(f, 'g', -1, 64)
}
