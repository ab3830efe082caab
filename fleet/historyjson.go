package fleet

import (
	"bytes"
	"errors"
	"fmt"
	"io"

	"github.com/go-json-experiment/json/jsontext"

	"github.com/edgeheal/edgeheal/wire"
)

// decodeHistory reads a history payload as wire.DecodeHistory does, to
// the same value and the same acceptance (FuzzDecodeHistory holds the
// two together), 2.4 times faster with a tenth of the garbage for a
// worker's decoder (BenchmarkDecodeHistory): a view reads every node's
// history at its start, 100,000 of them at once in a large fleet. It
// checks the syntax whole with jsontext (the tokenizer of
// encoding/json/v2), then walks the checked bytes into the fields it
// knows and skips the others, with encoding/json's rules: names matched
// without regard to case, the last of a duplicated name wins, null
// leaves a field as it is, a value of the wrong type is an error.
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
	// The syntax, checked whole with encoding/json's leniencies (a name
	// twice, bytes that are not UTF-8); a bytes.Buffer is read in place.
	jd := jsontext.NewDecoder(bytes.NewBuffer(b), jsontext.AllowDuplicateNames(true), jsontext.AllowInvalidUTF8(true))
	v, err := jd.ReadValue()
	if err == nil {
		if _, end := jd.ReadToken(); end != io.EOF {
			err = errors.New("data after the value")
		}
	}
	if err == nil {
		d := &dec{b: v, strs: strs}
		err = object(d, "history", func(name []byte) error { return historyField(d, h, name) })
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
