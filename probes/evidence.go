package probes

import (
	"fmt"
	"net"
	"sort"

	"github.com/vishvananda/netlink"
)

// RouteInfo is one IPv4 or IPv6 route of the main table, as evidence.
type RouteInfo struct {
	Dst     string `json:"dst"` // "default" for the default route
	Gateway string `json:"gateway,omitempty"`
	Link    string `json:"link,omitempty"`
	Proto   int    `json:"proto,omitempty"`
	Metric  int    `json:"metric,omitempty"`
}

// LinkStat is one link's state and counters, as evidence.
type LinkStat struct {
	Name      string `json:"name"`
	Up        bool   `json:"up"`
	Carrier   string `json:"oper_state"`
	MTU       int    `json:"mtu"`
	RxBytes   uint64 `json:"rx_bytes"`
	TxBytes   uint64 `json:"tx_bytes"`
	RxPackets uint64 `json:"rx_packets"`
	TxPackets uint64 `json:"tx_packets"`
	RxErrors  uint64 `json:"rx_errors"`
	TxErrors  uint64 `json:"tx_errors"`
	RxDropped uint64 `json:"rx_dropped"`
	TxDropped uint64 `json:"tx_dropped"`
}

// Routes lists the main table's routes in the namespace n is bound to.
func (n *Netlink) Routes() ([]RouteInfo, error) {
	links := map[int]string{}
	if ls, err := n.h.LinkList(); err == nil {
		for _, l := range ls {
			links[l.Attrs().Index] = l.Attrs().Name
		}
	}
	rs, err := n.h.RouteList(nil, netlink.FAMILY_ALL)
	if err != nil {
		return nil, fmt.Errorf("listing routes: %w", err)
	}
	out := make([]RouteInfo, 0, len(rs))
	for _, r := range rs {
		ri := RouteInfo{Dst: "default", Link: links[r.LinkIndex], Proto: int(r.Protocol), Metric: r.Priority}
		if !isDefault(r) {
			ri.Dst = r.Dst.String()
		}
		if r.Gw != nil {
			ri.Gateway = r.Gw.String()
		}
		out = append(out, ri)
	}
	return out, nil
}

// LinkStats lists every link with its state and counters, sorted by name.
func (n *Netlink) LinkStats() ([]LinkStat, error) {
	ls, err := n.h.LinkList()
	if err != nil {
		return nil, fmt.Errorf("listing links: %w", err)
	}
	out := make([]LinkStat, 0, len(ls))
	for _, l := range ls {
		a := l.Attrs()
		s := LinkStat{Name: a.Name, Up: a.Flags&net.FlagUp != 0, Carrier: a.OperState.String(), MTU: a.MTU}
		if st := a.Statistics; st != nil {
			s.RxBytes, s.TxBytes = st.RxBytes, st.TxBytes
			s.RxPackets, s.TxPackets = st.RxPackets, st.TxPackets
			s.RxErrors, s.TxErrors = st.RxErrors, st.TxErrors
			s.RxDropped, s.TxDropped = st.RxDropped, st.TxDropped
		}
		out = append(out, s)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}
