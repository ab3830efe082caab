package ethnl

import (
	"errors"

	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"
)

// The design not taken (see the package doc): verbose bitsets, the names
// in every reply. Kept here so that the benchmark that decided it can be
// run again, and so that a test checks that both say the same.

// verboseFeatures reads ifname's features with verbose bitsets.
func (c *Conn) verboseFeatures(ifname string) (map[string]State, error) {
	body, err := encodeFeaturesGet(ifname, 0)
	if err != nil {
		return nil, err
	}
	reply, err := c.execute(unix.ETHTOOL_MSG_FEATURES_GET, body, false)
	if err != nil {
		return nil, &Error{Op: "reading features", Device: ifname, err: err}
	}
	return decodeVerboseFeatures(reply)
}

// decodeVerboseFeatures reads a FEATURES_GET reply with verbose bitsets.
// The kernel sends HW with a mask of every feature, so every named bit is
// listed there with its value; WANTED, ACTIVE and NOCHANGE come as lists
// (NOMASK) of the bits that are set.
func decodeVerboseFeatures(b []byte) (map[string]State, error) {
	ad, err := netlink.NewAttributeDecoder(b)
	if err != nil {
		return nil, err
	}
	out := make(map[string]State, 64)
	set := map[uint16]func(*State){
		unix.ETHTOOL_A_FEATURES_HW:       func(s *State) { s.Available = true },
		unix.ETHTOOL_A_FEATURES_WANTED:   func(s *State) { s.Requested = true },
		unix.ETHTOOL_A_FEATURES_ACTIVE:   func(s *State) { s.Active = true },
		unix.ETHTOOL_A_FEATURES_NOCHANGE: func(s *State) { s.NeverChange = true },
	}
	for ad.Next() {
		fn, ok := set[ad.Type()]
		if !ok {
			continue
		}
		ad.Nested(func(ad *netlink.AttributeDecoder) error {
			list := false
			var bits []verboseBit
			for ad.Next() {
				switch ad.Type() {
				case unix.ETHTOOL_A_BITSET_NOMASK:
					list = ad.Flag()
				case unix.ETHTOOL_A_BITSET_BITS:
					ad.Nested(func(ad *netlink.AttributeDecoder) error {
						var err error
						bits, err = decodeVerboseBits(ad)
						return err
					})
				}
			}
			for _, b := range bits {
				if b.name == "" {
					continue // an unused bit
				}
				st := out[b.name]
				// In a list (NOMASK) a listed bit is set; in a masked
				// bitset, one with the VALUE flag.
				if list || b.value {
					fn(&st)
				}
				out[b.name] = st
			}
			return nil
		})
	}
	if err := ad.Err(); err != nil {
		return nil, err
	}
	if len(out) == 0 {
		return nil, errors.New("no features in the reply")
	}
	return out, nil
}

type verboseBit struct {
	name  string
	value bool
}

func decodeVerboseBits(ad *netlink.AttributeDecoder) ([]verboseBit, error) {
	bits := make([]verboseBit, 0, 64)
	for ad.Next() {
		if ad.Type() != unix.ETHTOOL_A_BITSET_BITS_BIT {
			continue
		}
		ad.Nested(func(ad *netlink.AttributeDecoder) error {
			var b verboseBit
			for ad.Next() {
				switch ad.Type() {
				case unix.ETHTOOL_A_BITSET_BIT_NAME:
					b.name = ad.String()
				case unix.ETHTOOL_A_BITSET_BIT_VALUE:
					b.value = ad.Flag()
				}
			}
			bits = append(bits, b)
			return nil
		})
	}
	return bits, ad.Err()
}
