package system

import (
	"golang.zx2c4.com/wireguard/wgctrl"
	"golang.zx2c4.com/wireguard/wgctrl/wgtypes"

	"github.com/edgeheal/edgeheal/netfix"
)

// wgClient is the part of *wgctrl.Client the backend uses.
type wgClient interface {
	netfix.WireGuard
	Close() error
}

func openWireGuard() (wgClient, error) { return wgctrl.New() }

// wireGuard is netfix.WireGuard on the namespace's wgctrl client.
type wireGuard struct{ s *System }

var _ netfix.WireGuard = wireGuard{}

func (w wireGuard) Device(name string) (*wgtypes.Device, error) {
	c, err := w.s.wg.use()
	if err != nil {
		return nil, err
	}
	return c.Device(name)
}

func (w wireGuard) ConfigureDevice(name string, cfg wgtypes.Config) error {
	c, err := w.s.wg.use()
	if err != nil {
		return err
	}
	return c.ConfigureDevice(name, cfg)
}
