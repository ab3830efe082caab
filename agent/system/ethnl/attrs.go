package ethnl

// The attributes of the three messages edgeheal sends, and of the two
// replies it reads (linux/ethtool_netlink.h; the attribute numbers are
// x/sys/unix's).

import (
	"encoding/binary"
	"errors"
	"fmt"
	"slices"

	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"
)

// ethSSFeatures is ETH_SS_FEATURES of enum ethtool_stringset
// (linux/ethtool.h), the string set of feature names. x/sys/unix v0.50.0
// does not define it.
const ethSSFeatures = 4

// header encodes a request header (ETHTOOL_A_HEADER_*) naming the device
// by name or, when name is "", by index.
func header(name string, index uint32, flags uint32) func(*netlink.AttributeEncoder) error {
	return func(ae *netlink.AttributeEncoder) error {
		if name != "" {
			ae.String(unix.ETHTOOL_A_HEADER_DEV_NAME, name)
		} else {
			ae.Uint32(unix.ETHTOOL_A_HEADER_DEV_INDEX, index)
		}
		if flags != 0 {
			ae.Uint32(unix.ETHTOOL_A_HEADER_FLAGS, flags)
		}
		return nil
	}
}

// encodeFeaturesGet is the body of ETHTOOL_MSG_FEATURES_GET for the device
// named ifname, with the request flags (ETHTOOL_FLAG_COMPACT_BITSETS or 0).
func encodeFeaturesGet(ifname string, flags uint32) ([]byte, error) {
	ae := netlink.NewAttributeEncoder()
	ae.Nested(unix.ETHTOOL_A_FEATURES_HEADER, header(ifname, 0, flags))
	return ae.Encode()
}

// encodeStrsetGet is the body of ETHTOOL_MSG_STRSET_GET asking the device
// with index ifindex for its ETH_SS_FEATURES names.
func encodeStrsetGet(ifindex uint32) ([]byte, error) {
	ae := netlink.NewAttributeEncoder()
	ae.Nested(unix.ETHTOOL_A_STRSET_HEADER, header("", ifindex, 0))
	ae.Nested(unix.ETHTOOL_A_STRSET_STRINGSETS, func(ae *netlink.AttributeEncoder) error {
		ae.Nested(unix.ETHTOOL_A_STRINGSETS_STRINGSET, func(ae *netlink.AttributeEncoder) error {
			ae.Uint32(unix.ETHTOOL_A_STRINGSET_ID, ethSSFeatures)
			return nil
		})
		return nil
	})
	return ae.Encode()
}

// encodeFeaturesSet is the body of ETHTOOL_MSG_FEATURES_SET: a verbose
// WANTED bitset without NOMASK, so that the features it names (sorted, for
// a stable message) are the mask and every other feature is left alone.
// It asks for no reply (ETHTOOL_FLAG_OMIT_REPLY): the kernel would send
// one only when it did not do all it was asked, and the caller reads back.
func encodeFeaturesSet(ifname string, change map[string]bool) ([]byte, error) {
	names := make([]string, 0, len(change))
	for n := range change {
		names = append(names, n)
	}
	slices.Sort(names)
	ae := netlink.NewAttributeEncoder()
	ae.Nested(unix.ETHTOOL_A_FEATURES_HEADER, header(ifname, 0, unix.ETHTOOL_FLAG_OMIT_REPLY))
	ae.Nested(unix.ETHTOOL_A_FEATURES_WANTED, func(ae *netlink.AttributeEncoder) error {
		ae.Nested(unix.ETHTOOL_A_BITSET_BITS, func(ae *netlink.AttributeEncoder) error {
			for _, n := range names {
				ae.Nested(unix.ETHTOOL_A_BITSET_BITS_BIT, func(ae *netlink.AttributeEncoder) error {
					ae.String(unix.ETHTOOL_A_BITSET_BIT_NAME, n)
					ae.Flag(unix.ETHTOOL_A_BITSET_BIT_VALUE, change[n])
					return nil
				})
			}
			return nil
		})
		return nil
	})
	return ae.Encode()
}

// featuresReply is an ETHTOOL_MSG_FEATURES_GET_REPLY with compact bitsets.
type featuresReply struct {
	ifindex uint32
	size    int // bits in each bitset (NETDEV_FEATURE_COUNT)
	// hw: the features the driver lets change (hw_features); wanted: asked
	// for; active: on; nochange: never changeable (NETIF_F_NEVER_CHANGE).
	hw, wanted, active, nochange bitset
}

// decodeFeaturesReply reads a FEATURES_GET reply with compact bitsets. All
// four bitsets must be present and of one size.
func decodeFeaturesReply(b []byte) (featuresReply, error) {
	var r featuresReply
	ad, err := netlink.NewAttributeDecoder(b)
	if err != nil {
		return r, err
	}
	sizes := [4]int{-1, -1, -1, -1}
	for ad.Next() {
		var dst *bitset
		switch ad.Type() {
		case unix.ETHTOOL_A_FEATURES_HEADER:
			ad.Nested(func(ad *netlink.AttributeDecoder) error {
				r.ifindex, err = decodeReplyHeader(ad)
				return err
			})
			continue
		case unix.ETHTOOL_A_FEATURES_HW:
			dst = &r.hw
		case unix.ETHTOOL_A_FEATURES_WANTED:
			dst = &r.wanted
		case unix.ETHTOOL_A_FEATURES_ACTIVE:
			dst = &r.active
		case unix.ETHTOOL_A_FEATURES_NOCHANGE:
			dst = &r.nochange
		default:
			continue
		}
		i := ad.Type() - unix.ETHTOOL_A_FEATURES_HW
		ad.Nested(func(ad *netlink.AttributeDecoder) error {
			*dst, sizes[i], err = decodeCompactBitset(ad)
			return err
		})
	}
	if err := ad.Err(); err != nil {
		return r, err
	}
	if r.ifindex == 0 {
		return r, errors.New("the reply names no device index")
	}
	for _, s := range sizes {
		if s < 0 {
			return r, errors.New("the reply lacks one of the hw, wanted, active and nochange bitsets")
		}
		if s != sizes[0] {
			return r, fmt.Errorf("the reply's bitsets differ in size: %v", sizes)
		}
	}
	r.size = sizes[0]
	return r, nil
}

// decodeReplyHeader returns the device index of a reply header.
func decodeReplyHeader(ad *netlink.AttributeDecoder) (uint32, error) {
	var ifindex uint32
	for ad.Next() {
		if ad.Type() == unix.ETHTOOL_A_HEADER_DEV_INDEX {
			ifindex = ad.Uint32()
		}
	}
	return ifindex, ad.Err()
}

// A bitset is a compact ethtool bitset: bit i is word i/32, bit i%32.
type bitset []uint32

func (b bitset) has(i int) bool { return i/32 < len(b) && b[i/32]&(1<<(i%32)) != 0 }

// decodeCompactBitset reads a compact bitset (ETHTOOL_A_BITSET_SIZE, VALUE
// and, without NOMASK, MASK): a bit is set when it is in both value and mask.
// It returns the bitset and its size in bits.
func decodeCompactBitset(ad *netlink.AttributeDecoder) (bitset, int, error) {
	var value, mask []byte
	size, nomask, hasSize := 0, false, false
	for ad.Next() {
		switch ad.Type() {
		case unix.ETHTOOL_A_BITSET_NOMASK:
			nomask = ad.Flag()
		case unix.ETHTOOL_A_BITSET_SIZE:
			size, hasSize = int(ad.Uint32()), true
		case unix.ETHTOOL_A_BITSET_VALUE:
			ad.Do(func(b []byte) error { value = b; return nil })
		case unix.ETHTOOL_A_BITSET_MASK:
			ad.Do(func(b []byte) error { mask = b; return nil })
		case unix.ETHTOOL_A_BITSET_BITS:
			return nil, 0, errors.New("a verbose bitset where a compact one was asked for")
		}
	}
	if err := ad.Err(); err != nil {
		return nil, 0, err
	}
	words := (size + 31) / 32
	switch {
	case !hasSize || size > 1<<16:
		return nil, 0, fmt.Errorf("a bitset without a sensible size (%d)", size)
	case len(value) != 4*words:
		return nil, 0, fmt.Errorf("a bitset of %d bits with a %d-byte value", size, len(value))
	case !nomask && len(mask) != 4*words:
		return nil, 0, fmt.Errorf("a bitset of %d bits with a %d-byte mask", size, len(mask))
	}
	bs := make(bitset, words)
	for i := range bs {
		bs[i] = binary.NativeEndian.Uint32(value[4*i:])
		if !nomask {
			bs[i] &= binary.NativeEndian.Uint32(mask[4*i:])
		}
	}
	return bs, size, nil
}

// decodeStrset returns the ETH_SS_FEATURES names of a STRSET_GET reply,
// indexed by bit: a bit the kernel leaves unnamed is "".
func decodeStrset(b []byte) ([]string, error) {
	ad, err := netlink.NewAttributeDecoder(b)
	if err != nil {
		return nil, err
	}
	var names []string
	found := false
	for ad.Next() {
		if ad.Type() != unix.ETHTOOL_A_STRSET_STRINGSETS {
			continue
		}
		ad.Nested(func(ad *netlink.AttributeDecoder) error {
			for ad.Next() {
				if ad.Type() != unix.ETHTOOL_A_STRINGSETS_STRINGSET {
					continue
				}
				ad.Nested(func(ad *netlink.AttributeDecoder) error {
					id, set, err := decodeStringset(ad)
					if err == nil && id == ethSSFeatures {
						names, found = set, true
					}
					return err
				})
			}
			return nil
		})
	}
	if err := ad.Err(); err != nil {
		return nil, err
	}
	if !found {
		return nil, errors.New("the reply has no feature string set")
	}
	return names, nil
}

// decodeStringset reads one ETHTOOL_A_STRINGSETS_STRINGSET: its id and its
// strings by index.
func decodeStringset(ad *netlink.AttributeDecoder) (uint32, []string, error) {
	var id uint32
	count := -1
	var strs []string
	for ad.Next() {
		switch ad.Type() {
		case unix.ETHTOOL_A_STRINGSET_ID:
			id = ad.Uint32()
		case unix.ETHTOOL_A_STRINGSET_COUNT:
			count = int(ad.Uint32())
			if count > 1<<16 {
				return 0, nil, fmt.Errorf("a string set of %d strings", count)
			}
		case unix.ETHTOOL_A_STRINGSET_STRINGS:
			if count < 0 {
				return 0, nil, errors.New("a string set's strings before its count")
			}
			strs = make([]string, count)
			ad.Nested(func(ad *netlink.AttributeDecoder) error { return decodeStrings(ad, strs) })
		}
	}
	return id, strs, ad.Err()
}

// decodeStrings fills strs from ETHTOOL_A_STRINGS_STRING entries.
func decodeStrings(ad *netlink.AttributeDecoder, strs []string) error {
	for ad.Next() {
		if ad.Type() != unix.ETHTOOL_A_STRINGS_STRING {
			continue
		}
		ad.Nested(func(ad *netlink.AttributeDecoder) error {
			index, value := -1, ""
			for ad.Next() {
				switch ad.Type() {
				case unix.ETHTOOL_A_STRING_INDEX:
					index = int(ad.Uint32())
				case unix.ETHTOOL_A_STRING_VALUE:
					value = ad.String()
				}
			}
			if index < 0 || index >= len(strs) {
				return fmt.Errorf("string index %d outside a set of %d", index, len(strs))
			}
			strs[index] = value
			return nil
		})
	}
	return nil
}
