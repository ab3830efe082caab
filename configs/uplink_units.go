package configs

import (
	"fmt"
	"slices"
)

// UplinkOwners are the units that own a node's uplink whatever the config
// says: restarting one takes the uplink down with the tunnel (a modem
// re-registers, addresses and routes are set again), so restart-unit
// never restarts them. uplinks[].unit adds the node's own.
var UplinkOwners = []string{"ModemManager.service", "NetworkManager.service", "systemd-networkd.service"}

// restartUnits refuses a tunnel unit that owns an uplink: the restart-unit
// rung must never leave the node worse off than it found it.
func (v *validator) restartUnits(c *Config) {
	owners := map[string]string{}
	for _, u := range UplinkOwners {
		owners[u] = "a network manager"
	}
	for i, u := range c.Uplinks {
		if u.Unit != "" {
			owners[u.Unit] = fmt.Sprintf("uplinks[%d].unit", i)
		}
	}
	for i, t := range c.Tunnels {
		if by, ok := owners[t.Unit]; ok && t.Unit != "" && slices.Contains(t.Heal, HealRestartUnit) {
			v.add(fmt.Sprintf("tunnels[%d].unit", i), "%q owns the uplink (%s): restart-unit would take the node offline; name the tunnel's own unit (e.g. k3s-agent.service) or drop restart-unit from heal", t.Unit, by)
		}
	}
}
