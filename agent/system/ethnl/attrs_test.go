package ethnl

import (
	"encoding/hex"
	"strings"
	"testing"

	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"
)

// Requests are compared with bytes written out by hand from
// linux/ethtool_netlink.h: each attribute is a little-endian length
// (header included, padding not) and type (0x8000: NLA_F_NESTED), then its
// data padded to 4 bytes. Little-endian, as on amd64 and arm64.

func unhex(tb testing.TB, s string) []byte {
	tb.Helper()
	b, err := hex.DecodeString(strings.Join(strings.Fields(s), ""))
	if err != nil {
		tb.Fatal(err)
	}
	return b
}

func TestRequestsAreEncodedAsTheKernelReadsThem(t *testing.T) {
	tests := []struct {
		name   string
		encode func() ([]byte, error)
		want   string
	}{
		{
			name:   "a features read names the device and asks for compact bitsets",
			encode: func() ([]byte, error) { return encodeFeaturesGet("up0", unix.ETHTOOL_FLAG_COMPACT_BITSETS) },
			want: `14000180                  HEADER, nested, 20 bytes
			         08000200 75703000   DEV_NAME "up0\0"
			         08000300 01000000   FLAGS COMPACT_BITSETS`,
		},
		{
			name:   "a name-table read names the device by index and asks for ETH_SS_FEATURES alone",
			encode: func() ([]byte, error) { return encodeStrsetGet(3) },
			want: `0c000180                  STRSET_HEADER, nested
			         08000100 03000000   DEV_INDEX 3
			       10000280              STRINGSETS, nested
			         0c000180            STRINGSET, nested
			           08000100 04000000 ID ETH_SS_FEATURES`,
		},
		{
			name: "a change names only the features to change, sorted, with no mask flag and no reply asked",
			encode: func() ([]byte, error) {
				return encodeFeaturesSet("up0", map[string]bool{"tx-checksum-ip-generic": false, "rx-gro": true})
			},
			want: `14000180                  HEADER, nested
			         08000200 75703000   DEV_NAME "up0\0"
			         08000300 02000000   FLAGS OMIT_REPLY
			       3c000380              WANTED, nested, 60 bytes: no NOMASK, no SIZE
			         38000380            BITS, nested
			           14000180          BIT, nested
			             0b000200 72782d67726f0000   NAME "rx-gro\0", padded
			             04000300                     VALUE (on)
			           20000180          BIT, nested: no VALUE (off)
			             1b000200 74782d636865636b73756d2d69702d67656e6572696300 00   NAME "tx-checksum-ip-generic\0", padded`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := tt.encode()
			if err != nil {
				t.Fatal(err)
			}
			var hexOnly []string
			for _, line := range strings.Split(tt.want, "\n") {
				for _, f := range strings.Fields(line) {
					if _, err := hex.DecodeString(f); err != nil || len(f)%2 != 0 {
						break // the comment
					}
					hexOnly = append(hexOnly, f)
				}
			}
			if want := unhex(t, strings.Join(hexOnly, "")); string(got) != string(want) {
				t.Errorf("encoded\n%s\nwant\n%s", hex.Dump(got), hex.Dump(want))
			}
		})
	}
}

// attrs builds a message body with an encoder.
func attrs(tb testing.TB, fn func(ae *netlink.AttributeEncoder)) []byte {
	tb.Helper()
	ae := netlink.NewAttributeEncoder()
	fn(ae)
	b, err := ae.Encode()
	if err != nil {
		tb.Fatal(err)
	}
	return b
}

func compactBitset(typ uint16, size uint32, value []byte, mask []byte) func(*netlink.AttributeEncoder) {
	return func(ae *netlink.AttributeEncoder) {
		ae.Nested(typ, func(ae *netlink.AttributeEncoder) error {
			if mask == nil {
				ae.Flag(unix.ETHTOOL_A_BITSET_NOMASK, true)
			}
			ae.Uint32(unix.ETHTOOL_A_BITSET_SIZE, size)
			ae.Bytes(unix.ETHTOOL_A_BITSET_VALUE, value)
			if mask != nil {
				ae.Bytes(unix.ETHTOOL_A_BITSET_MASK, mask)
			}
			return nil
		})
	}
}

func replyHeader(ifindex uint32) func(*netlink.AttributeEncoder) {
	return func(ae *netlink.AttributeEncoder) {
		ae.Nested(unix.ETHTOOL_A_FEATURES_HEADER, func(ae *netlink.AttributeEncoder) error {
			ae.Uint32(unix.ETHTOOL_A_HEADER_DEV_INDEX, ifindex)
			ae.String(unix.ETHTOOL_A_HEADER_DEV_NAME, "up0")
			return nil
		})
	}
}

func TestFeaturesRepliesAreDecoded(t *testing.T) {
	all := []func(*netlink.AttributeEncoder){
		replyHeader(7),
		// 40 bits: two words. HW's value has bits outside its mask.
		compactBitset(unix.ETHTOOL_A_FEATURES_HW, 40, []byte{0xff, 0, 0, 0, 0x01, 0, 0, 0}, []byte{0x0f, 0, 0, 0, 0xff, 0, 0, 0}),
		compactBitset(unix.ETHTOOL_A_FEATURES_WANTED, 40, []byte{0x02, 0, 0, 0, 0, 0, 0, 0}, nil),
		compactBitset(unix.ETHTOOL_A_FEATURES_ACTIVE, 40, []byte{0x04, 0, 0, 0, 0, 0, 0, 0x80}, nil),
		compactBitset(unix.ETHTOOL_A_FEATURES_NOCHANGE, 40, []byte{0, 0, 0, 0, 0x01, 0, 0, 0}, nil),
	}
	r, err := decodeFeaturesReply(attrs(t, func(ae *netlink.AttributeEncoder) {
		for _, a := range all {
			a(ae)
		}
	}))
	if err != nil {
		t.Fatal(err)
	}
	if r.ifindex != 7 || r.size != 40 {
		t.Errorf("ifindex %d size %d, want 7 and 40", r.ifindex, r.size)
	}
	for _, c := range []struct {
		what string
		bs   bitset
		bit  int
		want bool
	}{
		{"hw bit 0, in value and mask", r.hw, 0, true},
		{"hw bit 4, in value, not in mask", r.hw, 4, false},
		{"hw bit 32, second word", r.hw, 32, true},
		{"wanted bit 1", r.wanted, 1, true},
		{"wanted bit 2", r.wanted, 2, false},
		{"active bit 63, past the size", r.active, 63, true},
		{"active bit 64, past the words", r.active, 64, false},
		{"nochange bit 32", r.nochange, 32, true},
	} {
		if got := c.bs.has(c.bit); got != c.want {
			t.Errorf("%s: %v, want %v", c.what, got, c.want)
		}
	}

	broken := map[string][]func(*netlink.AttributeEncoder){
		"no header index": all[1:],
		"no nochange":     all[:4],
		"sizes differ": {all[0], all[1], all[2], all[3],
			compactBitset(unix.ETHTOOL_A_FEATURES_NOCHANGE, 64, make([]byte, 8), nil)},
		"a value shorter than the size": {all[0], all[1], all[2], all[3],
			compactBitset(unix.ETHTOOL_A_FEATURES_NOCHANGE, 40, make([]byte, 4), nil)},
		"a mask shorter than the size": {all[0],
			compactBitset(unix.ETHTOOL_A_FEATURES_HW, 40, make([]byte, 8), make([]byte, 4)), all[2], all[3], all[4]},
		"a verbose bitset": {all[0], all[1], all[2], all[3], func(ae *netlink.AttributeEncoder) {
			ae.Nested(unix.ETHTOOL_A_FEATURES_NOCHANGE, func(ae *netlink.AttributeEncoder) error {
				ae.Uint32(unix.ETHTOOL_A_BITSET_SIZE, 40)
				ae.Nested(unix.ETHTOOL_A_BITSET_BITS, func(*netlink.AttributeEncoder) error { return nil })
				return nil
			})
		}},
	}
	for name, parts := range broken {
		t.Run(name, func(t *testing.T) {
			b := attrs(t, func(ae *netlink.AttributeEncoder) {
				for _, a := range parts {
					a(ae)
				}
			})
			if _, err := decodeFeaturesReply(b); err == nil {
				t.Errorf("decoded without an error")
			}
		})
	}
	if _, err := decodeFeaturesReply([]byte{1, 2, 3}); err == nil {
		t.Errorf("three bytes decoded without an error")
	}
}

func stringset(id uint32, count uint32, strs map[uint32]string) func(*netlink.AttributeEncoder) {
	return func(ae *netlink.AttributeEncoder) {
		ae.Nested(unix.ETHTOOL_A_STRINGSETS_STRINGSET, func(ae *netlink.AttributeEncoder) error {
			ae.Uint32(unix.ETHTOOL_A_STRINGSET_ID, id)
			ae.Uint32(unix.ETHTOOL_A_STRINGSET_COUNT, count)
			ae.Nested(unix.ETHTOOL_A_STRINGSET_STRINGS, func(ae *netlink.AttributeEncoder) error {
				for i, s := range strs {
					ae.Nested(unix.ETHTOOL_A_STRINGS_STRING, func(ae *netlink.AttributeEncoder) error {
						ae.Uint32(unix.ETHTOOL_A_STRING_INDEX, i)
						ae.String(unix.ETHTOOL_A_STRING_VALUE, s)
						return nil
					})
				}
				return nil
			})
			return nil
		})
	}
}

func strsetReply(tb testing.TB, sets ...func(*netlink.AttributeEncoder)) []byte {
	return attrs(tb, func(ae *netlink.AttributeEncoder) {
		ae.Nested(unix.ETHTOOL_A_STRSET_STRINGSETS, func(ae *netlink.AttributeEncoder) error {
			for _, s := range sets {
				s(ae)
			}
			return nil
		})
	})
}

func TestNameTablesAreDecoded(t *testing.T) {
	names, err := decodeStrset(strsetReply(t,
		stringset(1, 1, map[uint32]string{0: "rx_packets"}), // ETH_SS_STATS: not ours
		stringset(ethSSFeatures, 4, map[uint32]string{0: "tx-a", 1: "", 3: "rx-d"}),
	))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := strings.Join(names, ","), "tx-a,,,rx-d"; got != want {
		t.Errorf("names %q, want %q (by index, gaps empty)", got, want)
	}
	for name, b := range map[string][]byte{
		"no feature set":          strsetReply(t, stringset(1, 1, map[uint32]string{0: "x"})),
		"an index past the count": strsetReply(t, stringset(ethSSFeatures, 2, map[uint32]string{2: "x"})),
		"a huge count":            strsetReply(t, stringset(ethSSFeatures, 1<<20, nil)),
		"not attributes":          {1, 2, 3},
	} {
		if _, err := decodeStrset(b); err == nil {
			t.Errorf("%s: decoded without an error", name)
		}
	}
}

// Fuzz targets of the two reply decoders: whatever the bytes, an error or
// a consistent result, never a panic.
func FuzzDecodeFeaturesReply(f *testing.F) {
	f.Add(readHex(f, "features-compact.hex"))
	f.Add(readHex(f, "features-verbose.hex"))
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := decodeFeaturesReply(b)
		if err != nil {
			return
		}
		words := (r.size + 31) / 32
		for _, bs := range []bitset{r.hw, r.wanted, r.active, r.nochange} {
			if len(bs) != words {
				t.Fatalf("a bitset of %d words for %d bits", len(bs), r.size)
			}
		}
	})
}

func FuzzDecodeStrset(f *testing.F) {
	f.Add(readHex(f, "strset-features.hex"))
	f.Fuzz(func(t *testing.T, b []byte) {
		_, _ = decodeStrset(b)
	})
}
