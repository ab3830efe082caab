package system

import (
	"errors"
	"os"

	"github.com/edgeheal/edgeheal/agent/system/ethnl"
	"github.com/edgeheal/edgeheal/netfix"
)

// The ethtool seam on ethtool netlink (ethnl): what the ioctl path does in
// ethtool.go, in ethnl's terms.

// netlinkFeatures is FeaturesWithState on an ethnl socket.
func netlinkFeatures(c *ethnl.Conn, link string) (map[string]netfix.FeatureState, error) {
	fs, err := c.Features(link)
	if err != nil {
		return nil, netlinkErr(link, err)
	}
	out := make(map[string]netfix.FeatureState, len(fs))
	for name, st := range fs {
		// As for the ioctl: hw_features are the ones a driver lets change;
		// NETIF_F_NEVER_CHANGE ones never do.
		out[name] = netfix.FeatureState{Active: st.Active, Requested: st.Requested, Changeable: st.Available && !st.NeverChange}
	}
	return out, nil
}

// netlinkErr says a missing link as the ioctl path does; ethnl's other
// errors already name the link and what was being done.
func netlinkErr(link string, err error) error {
	if errors.Is(err, os.ErrNotExist) {
		return &noLinkError{link: link, err: err}
	}
	return err
}
