package probes

import (
	"context"
	"net/netip"
	"testing"
	"time"
)

func TestProbeSizesRefusesWhatItCannotSend(t *testing.T) {
	v4, v6 := netip.MustParseAddr("192.0.2.1"), netip.MustParseAddr("2001:db8::1")
	for _, tc := range []struct {
		name   string
		target netip.Addr
		p      SizeProbe
	}{
		{"no target", netip.Addr{}, SizeProbe{Sizes: []int{100}, Timeout: time.Second}},
		{"no sizes", v4, SizeProbe{Timeout: time.Second}},
		{"smaller than the headers and the nonce", v4, SizeProbe{Sizes: []int{43}, Timeout: time.Second}},
		{"IPv6's headers are larger", v6, SizeProbe{Sizes: []int{60}, Timeout: time.Second}},
		{"larger than an IP packet", v4, SizeProbe{Sizes: []int{70000}, Timeout: time.Second}},
		{"no timeout", v4, SizeProbe{Sizes: []int{100}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if r := ProbeSizes(context.Background(), tc.target, tc.p); r.Err == nil {
				t.Errorf("= %+v, want an error (no observation)", r)
			}
		})
	}
}

func TestSizesResult(t *testing.T) {
	r := SizesResult{Answers: []SizeAnswer{{Size: 44, Answered: true}, {Size: 1328, Answered: true}, {Size: 1300},
		{Size: 1400}, {Size: 1500, LocalTooBig: true}}}
	if r.Largest() != 1328 || r.SmallestMissed() != 1300 || !r.Answered() {
		t.Errorf("largest %d, smallest missed %d, answered %v", r.Largest(), r.SmallestMissed(), r.Answered())
	}
	if a, ok := r.Answer(1500); !ok || !a.LocalTooBig {
		t.Errorf("Answer(1500) = %+v, %v", a, ok)
	}
	if (SizesResult{}).Answered() {
		t.Error("an empty result answered")
	}
}
