package probes

import (
	"errors"
	"fmt"
	"sort"
	"time"

	"google.golang.org/protobuf/encoding/protowire"
)

// The few CRI messages pod resolution uses, in protobuf's wire format, by
// the field numbers of k8s.io/cri-api's api.proto (runtime.v1, v0.37):
//
//	ListPodSandboxRequest    { PodSandboxFilter filter = 1; }
//	PodSandboxFilter         { string id = 1; PodSandboxStateValue state = 2; map<string,string> label_selector = 3; }
//	PodSandboxStateValue     { PodSandboxState state = 1; }          SANDBOX_READY = 0, SANDBOX_NOTREADY = 1
//	ListPodSandboxResponse   { repeated PodSandbox items = 1; }
//	PodSandbox               { string id = 1; PodSandboxMetadata metadata = 2; PodSandboxState state = 3;
//	                           int64 created_at = 4; map<string,string> labels = 5; ... }
//	PodSandboxMetadata       { string name = 1; string uid = 2; string namespace = 3; uint32 attempt = 4; }
//	PodSandboxStatusRequest  { string pod_sandbox_id = 1; bool verbose = 2; }
//	PodSandboxStatusResponse { PodSandboxStatus status = 1; map<string,string> info = 2; ... }
//
// A map entry is a message { key = 1; value = 2; }. Fields not listed are
// skipped, as protobuf requires of a reader.

const sandboxReady = 0 // PodSandboxState SANDBOX_READY

// encodeListPodSandboxRequest asks for the ready sandboxes with every label
// in labels. Map entries are written in key order, so that the same
// request is the same bytes.
func encodeListPodSandboxRequest(labels map[string]string) []byte {
	var filter []byte
	// state: an empty PodSandboxStateValue is SANDBOX_READY (a zero enum
	// is not written), and its presence is what filters.
	filter = protowire.AppendTag(filter, 2, protowire.BytesType)
	filter = protowire.AppendBytes(filter, nil)
	keys := make([]string, 0, len(labels))
	for k := range labels {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		var entry []byte
		entry = appendString(entry, 1, k)
		entry = appendString(entry, 2, labels[k])
		filter = protowire.AppendTag(filter, 3, protowire.BytesType)
		filter = protowire.AppendBytes(filter, entry)
	}
	var req []byte
	req = protowire.AppendTag(req, 1, protowire.BytesType)
	return protowire.AppendBytes(req, filter)
}

// encodePodSandboxStatusRequest asks for one sandbox's status.
func encodePodSandboxStatusRequest(id string, verbose bool) []byte {
	req := appendString(nil, 1, id)
	if verbose {
		req = protowire.AppendTag(req, 2, protowire.VarintType)
		req = protowire.AppendVarint(req, 1)
	}
	return req
}

func appendString(b []byte, num protowire.Number, s string) []byte {
	b = protowire.AppendTag(b, num, protowire.BytesType)
	return protowire.AppendString(b, s)
}

// decodeListPodSandboxResponse returns the ready sandboxes of a response.
func decodeListPodSandboxResponse(b []byte) ([]Sandbox, error) {
	var out []Sandbox
	err := eachField(b, func(num protowire.Number, typ protowire.Type, v []byte, _ uint64) error {
		if num != 1 || typ != protowire.BytesType {
			return nil
		}
		s, state, err := decodePodSandbox(v)
		if err != nil {
			return fmt.Errorf("a pod sandbox: %w", err)
		}
		if state == sandboxReady {
			out = append(out, s)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("ListPodSandbox response: %w", err)
	}
	return out, nil
}

// decodePodSandbox reads one PodSandbox and its state.
func decodePodSandbox(b []byte) (Sandbox, uint64, error) {
	s := Sandbox{CreatedAt: time.Unix(0, 0)} // a created_at of 0 is not written
	var state uint64
	err := eachField(b, func(num protowire.Number, typ protowire.Type, v []byte, n uint64) error {
		switch {
		case num == 1 && typ == protowire.BytesType:
			s.ID = string(v)
		case num == 2 && typ == protowire.BytesType:
			return eachField(v, func(num protowire.Number, typ protowire.Type, v []byte, _ uint64) error {
				if typ == protowire.BytesType && num == 1 {
					s.Name = string(v)
				} else if typ == protowire.BytesType && num == 3 {
					s.Namespace = string(v)
				}
				return nil
			})
		case num == 3 && typ == protowire.VarintType:
			state = n
		case num == 4 && typ == protowire.VarintType:
			s.CreatedAt = time.Unix(0, int64(n))
		case num == 5 && typ == protowire.BytesType:
			if s.Labels == nil {
				s.Labels = map[string]string{}
			}
			return decodeMapEntry(v, s.Labels)
		}
		return nil
	})
	return s, state, err
}

// decodePodSandboxStatusInfo returns the info map of a status response.
func decodePodSandboxStatusInfo(b []byte) (map[string]string, error) {
	info := map[string]string{}
	err := eachField(b, func(num protowire.Number, typ protowire.Type, v []byte, _ uint64) error {
		if num == 2 && typ == protowire.BytesType {
			return decodeMapEntry(v, info)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("PodSandboxStatus response: %w", err)
	}
	return info, nil
}

// decodeMapEntry reads one map<string,string> entry into m.
func decodeMapEntry(b []byte, m map[string]string) error {
	var k, val string
	err := eachField(b, func(num protowire.Number, typ protowire.Type, v []byte, _ uint64) error {
		if typ != protowire.BytesType {
			return nil
		}
		switch num {
		case 1:
			k = string(v)
		case 2:
			val = string(v)
		}
		return nil
	})
	if err == nil {
		m[k] = val
	}
	return err
}

// eachField calls fn for every field of a message: the bytes of a
// length-delimited field, or the value of a varint. Other wire types are
// skipped; a malformed message is an error.
func eachField(b []byte, fn func(num protowire.Number, typ protowire.Type, v []byte, n uint64) error) error {
	for len(b) > 0 {
		num, typ, tn := protowire.ConsumeTag(b)
		if tn < 0 {
			return errors.New("malformed field tag")
		}
		b = b[tn:]
		var (
			v []byte
			n uint64
			l int
		)
		switch typ {
		case protowire.BytesType:
			v, l = protowire.ConsumeBytes(b)
		case protowire.VarintType:
			n, l = protowire.ConsumeVarint(b)
		default:
			l = protowire.ConsumeFieldValue(num, typ, b)
		}
		if l < 0 {
			return fmt.Errorf("malformed field %d", num)
		}
		b = b[l:]
		if typ == protowire.BytesType || typ == protowire.VarintType {
			if err := fn(num, typ, v, n); err != nil {
				return err
			}
		}
	}
	return nil
}
