package fleet

import (
	"encoding/json"
	"math/rand/v2"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/edgeheal/edgeheal/wire"
	"github.com/edgeheal/edgeheal/wire/wiretest"
)

// The view's history decoder and the wire package's agree on every
// payload: the same value, the same acceptance.
func FuzzDecodeHistory(f *testing.F) {
	full, _ := json.Marshal(fullHistory("n1", "s", t0, 300))
	f.Add(full)
	f.Add(wiretest.Golden(f, wiretest.HistoryFile))
	for _, s := range []string{`null`, `{"v":1,"node":"n"}`, `{"v":1,"NODE":"n","Node":"m","sItE":"\u017fite"}`, `{"v":1,"node":"n","hours":{"healthy":[1],"dark":[1],"degraded":[1],"incidents":[1]}}`,
		`{"v":1,"node":"n","days":{"step_seconds":86400,"healthy":[1.5],"dark":[],"degraded":[],"incidents":[]}}`, `{"v":1,"node":"n","targets":[null,{"repairs":{"a":1,"a":2}}]}`,
		`{"v":1,"node":"n\xff","incidents":[{"start":"2026-12-03T09:42:07Z","end":null,"repairs":["a",null]}]}`, `{"v":1,"node":"n"} x`, `{"v":"1","node":"n"}`,
		`{"v":1,"node":"n","ts":"2026-13-03T09:42:07Z"}`, `{"v":1,"node":"n","days":{"healthy":[99999999999999999999]}}`, `{"v":1,"node":"\ud800"}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		want, werr := wire.DecodeHistory(b)
		got, gerr := decodeHistory(b)
		if (werr == nil) != (gerr == nil) {
			t.Fatalf("%q: wire says %v, the view %v", b, werr, gerr)
		}
		if diff := cmp.Diff(want, got); werr == nil && diff != "" {
			t.Fatalf("%q (-wire +view):\n%s", b, diff)
		}
		// Into a history that held another: the same, but for empty lists.
		reused := fullHistory("other", "elsewhere", t0, 100)
		rerr := decodeHistoryInto(b, &reused)
		if (rerr == nil) != (werr == nil) {
			t.Fatalf("%q: wire says %v, the view into a used history %v", b, werr, rerr)
		}
		if diff := cmp.Diff(want, reused, cmpopts.EquateEmpty()); werr == nil && diff != "" {
			t.Fatalf("%q into a used history (-wire +view):\n%s", b, diff)
		}
		// By a worker's decoder, which has read another history before.
		var hd historyDecoder
		_, _ = hd.decode(full)
		h, herr := hd.decode(b)
		if (herr == nil) != (werr == nil) {
			t.Fatalf("%q: wire says %v, a worker's decoder %v", b, werr, herr)
		}
		if diff := cmp.Diff(want, *h, cmpopts.EquateEmpty()); werr == nil && diff != "" {
			t.Fatalf("%q by a worker's decoder (-wire +view):\n%s", b, diff)
		}
	})
}

func BenchmarkDecodeHistory(b *testing.B) {
	p, _ := json.Marshal(fullHistory("node-00001", "site-01", t0, 300))
	var hd historyDecoder
	for _, dec := range []struct {
		name string
		fn   func([]byte) (wire.History, error)
	}{{"wire", wire.DecodeHistory}, {"view", decodeHistory}, {"view, a worker's decoder", func(b []byte) (wire.History, error) {
		h, err := hd.decode(b)
		return *h, err
	}}} {
		b.Run(dec.name, func(b *testing.B) {
			b.SetBytes(int64(len(p)))
			for b.Loop() {
				if _, err := dec.fn(p); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// Beyond the fuzz target's seeds (make fuzz runs it for longer): 20,000
// payloads made by breaking good ones at random agree with the wire
// package's reading too.
func TestTheHistoryDecoderAgreesOnBrokenPayloads(t *testing.T) {
	full, _ := json.Marshal(fullHistory("n1", "s", t0, 300))
	seeds := [][]byte{full, wiretest.Golden(t, wiretest.HistoryFile), []byte(`{"v":1,"node":"n","targets":[null,{"repairs":{"a":1,"a":2}}]}`),
		[]byte(`{"v":1,"node":"n","incidents":[{"id":"a\"b","repairs":["x","y"],"gave_up":true,"extra":{"a":[1,{"b":"]"}]}}]}`)}
	r := rand.New(rand.NewPCG(1, 4))
	for range 20000 {
		b := append([]byte(nil), seeds[r.IntN(len(seeds))]...)
		for range 1 + r.IntN(4) {
			switch j := r.IntN(len(b)); r.IntN(3) {
			case 0:
				b[j] = byte(r.IntN(256))
			case 1:
				b = append(b[:j], b[j+1:]...)
			default:
				b = append(b[:j], append([]byte{"[]{},:\"n01 \\"[r.IntN(12)]}, b[j:]...)...)
			}
			if len(b) == 0 {
				b = []byte("{")
			}
		}
		want, werr := wire.DecodeHistory(b)
		got, gerr := decodeHistory(b)
		if (werr == nil) != (gerr == nil) {
			t.Fatalf("%q: wire says %v, the view %v", b, werr, gerr)
		}
		if diff := cmp.Diff(want, got); werr == nil && diff != "" {
			t.Fatalf("%q (-wire +view):\n%s", b, diff)
		}
	}
}
