package netfix

import (
	"context"
	"encoding/binary"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"github.com/google/nftables/userdata"
	"golang.org/x/sys/unix"
)

// The traffic watch of a path-MTU check: a table of edgeheal's own that
// only counts, never changes a packet, what a path that drops large
// packets would hurt on the links it watches (the tunnel and its uplink):
// TCP packets larger than MinClampMTU and TCP connections opened (a SYN),
// either way. A node whose links carry none of it loses
// nothing to a path-MTU blackhole, so its check need not spend the
// cellular bytes of a full-size echo each way (docs/operations/tunnels.md,
// "What a check costs"). Forwarded and local packets alike, read with one
// netlink dump of a few rules.

// TrafficWatch is the whole content of one watch table.
type TrafficWatch struct {
	Table string // WatchTable names it
	// Links are the links whose TCP is counted; none: the table is gone.
	Links []string
	// Skip are connections that are not counted: edgeheal's own probes,
	// which open a connection every round.
	Skip []netip.AddrPort
}

// TrafficCounts are a watch table's counters, in packets since it was
// written.
type TrafficCounts struct {
	Large uint64 // TCP packets larger than MinClampMTU, in or out
	Opens uint64 // SYNs (without ACK), in or out: connections opened
}

// WatchTable is the name of the watch table for a tunnel interface: "/"
// is never part of a link's name, so it names no tunnel's clamp table.
func WatchTable(tunnel string) string { return ClampTablePrefix + tunnel + "/watch" }

// TableTunnel is the tunnel a clamp or watch table is for.
func TableTunnel(table string) string {
	return strings.TrimSuffix(strings.TrimPrefix(table, ClampTablePrefix), "/watch")
}

// ListTrafficWatches names every watch table of the namespace.
func ListTrafficWatches(nft NFT) ([]string, error) {
	tables, err := nft.ListTablesOfFamily(nftables.TableFamilyINet)
	if err != nil {
		return nil, fmt.Errorf("listing nftables tables: %w", err)
	}
	var out []string
	for _, t := range tables {
		if strings.HasPrefix(t.Name, ClampTablePrefix) && isWatchTable(t.Name) {
			out = append(out, t.Name)
		}
	}
	return out, nil
}

// isWatchTable tells a watch table from a clamp table.
func isWatchTable(name string) bool { return strings.HasSuffix(name, "/watch") }

// The watch table's base chains, at the same priority as the clamp's (a
// counter changes nothing, the order does not matter).
const (
	watchChainIn  = "watch-in"
	watchChainOut = "watch-out"
)

// Validate reports whether w can be written.
func (w TrafficWatch) Validate() error {
	if !strings.HasPrefix(w.Table, ClampTablePrefix) || !isWatchTable(w.Table) || len(w.Table) > 64 {
		return fmt.Errorf("watch table %q: want %s<tunnel>/watch", w.Table, ClampTablePrefix)
	}
	for _, l := range w.Links {
		if l == "" || len(l) >= unix.IFNAMSIZ || strings.ContainsAny(l, " =/\x00") {
			return fmt.Errorf("watch of link %q: not a link name", l)
		}
	}
	for _, s := range w.Skip {
		if !s.IsValid() || s.Port() == 0 {
			return fmt.Errorf("watch: %v is not an address and port to skip", s)
		}
	}
	return nil
}

// rules are w's rules, in the order they are written (the skips first).
// Each says what it does in its comment, to `nft list ruleset` and to
// EnsureTrafficWatch, which compares them to tell an unchanged table.
func (w TrafficWatch) rules() []watchRule {
	var out []watchRule
	for _, s := range sortedAddrPorts(w.Skip) {
		out = append(out, watchRule{chain: watchChainOut, what: "skip", target: s})
	}
	for _, l := range sortedLinks(w.Links) {
		out = append(out,
			watchRule{chain: watchChainIn, what: "large", link: l},
			watchRule{chain: watchChainIn, what: "open", link: l},
			watchRule{chain: watchChainOut, what: "large", link: l},
			watchRule{chain: watchChainOut, what: "open", link: l})
	}
	return out
}

type watchRule struct {
	chain, what, link string
	target            netip.AddrPort
}

func (r watchRule) comment() string {
	if r.what == "skip" {
		return "edgeheal " + r.chain + " skip " + r.target.String()
	}
	return "edgeheal " + r.chain + " " + r.what + " " + r.link
}

// EnsureTrafficWatch makes the watch table exactly want: when its rules
// (read by their comments) differ, it replaces the table whole in one
// batch (the counters start again from zero), or deletes it when want
// watches no link. It changes nothing in a dry run.
func EnsureTrafficWatch(ctx context.Context, nft NFT, want TrafficWatch, dryRun bool) (Result, error) {
	r := Result{Action: "traffic-watch", Target: want.Table}
	if err := ctx.Err(); err != nil {
		return r, err
	}
	if err := want.Validate(); err != nil {
		return r, err
	}
	have, exists, err := readWatch(nft, want.Table)
	if err != nil {
		return r, err
	}
	var wantComments []string
	if len(want.Links) > 0 {
		for _, rl := range want.rules() {
			wantComments = append(wantComments, rl.comment())
		}
		slices.Sort(wantComments)
	}
	if exists == (len(want.Links) > 0) && slices.Equal(have.comments, wantComments) {
		return r, nil
	}
	if len(want.Links) == 0 {
		r.Changes = []string{"table " + want.Table + " removed"}
	} else {
		r.Changes = []string{fmt.Sprintf("table %s counts the TCP of %s", want.Table, strings.Join(sortedLinks(want.Links), ", "))}
	}
	if dryRun {
		r.DryRun = true
		return r, nil
	}
	t := &nftables.Table{Name: want.Table, Family: nftables.TableFamilyINet}
	if exists {
		nft.DelTable(t)
	}
	if len(want.Links) > 0 {
		writeWatch(nft, t, want)
	}
	if err := nft.Flush(); err != nil {
		return r, fmt.Errorf("writing nftables table %s: %w", want.Table, err)
	}
	r.Changed = true
	after, exists, err := readWatch(nft, want.Table)
	if err != nil {
		return r, fmt.Errorf("reading back %s: %w", want.Table, err)
	}
	if exists != (len(want.Links) > 0) || !slices.Equal(after.comments, wantComments) {
		return r, fmt.Errorf("nftables table %s reads back as %q, written as %q", want.Table, after.comments, wantComments)
	}
	return r, nil
}

// ReadTrafficWatch reads a watch table's counters: exists is false when
// there is none (never written, or removed by someone else: a flushed
// ruleset).
func ReadTrafficWatch(nft NFT, table string) (c TrafficCounts, exists bool, err error) {
	w, exists, err := readWatch(nft, table)
	return w.counts, exists, err
}

type watchReading struct {
	comments []string // sorted
	counts   TrafficCounts
}

func readWatch(nft NFT, table string) (w watchReading, exists bool, err error) {
	exists, err = readTable(nft, table, func(chain, comment string, rl *nftables.Rule) {
		w.comments = append(w.comments, comment)
		for _, e := range rl.Exprs {
			c, ok := e.(*expr.Counter)
			if !ok {
				continue
			}
			switch {
			case strings.HasPrefix(comment, "edgeheal "+chain+" large "):
				w.counts.Large += c.Packets
			case strings.HasPrefix(comment, "edgeheal "+chain+" open "):
				w.counts.Opens += c.Packets
			}
		}
	})
	slices.Sort(w.comments)
	return w, exists, err
}

// writeWatch queues the table, its two chains and its rules.
func writeWatch(nft NFT, t *nftables.Table, w TrafficWatch) {
	nft.AddTable(t)
	accept := nftables.ChainPolicyAccept
	chains := map[string]*nftables.Chain{
		watchChainIn: nft.AddChain(&nftables.Chain{Name: watchChainIn, Table: t, Type: nftables.ChainTypeFilter,
			Hooknum: nftables.ChainHookPrerouting, Priority: nftables.ChainPriorityMangle, Policy: &accept}),
		watchChainOut: nft.AddChain(&nftables.Chain{Name: watchChainOut, Table: t, Type: nftables.ChainTypeFilter,
			Hooknum: nftables.ChainHookPostrouting, Priority: nftables.ChainPriorityMangle, Policy: &accept}),
	}
	for _, rl := range w.rules() {
		nft.AddRule(&nftables.Rule{Table: t, Chain: chains[rl.chain], Exprs: watchExprs(rl),
			UserData: userdata.AppendString(nil, userdata.TypeComment, rl.comment())})
	}
}

// watchExprs is one rule:
//
//	skip:  meta l4proto tcp ip(6) daddr ADDR tcp dport PORT return
//	large: iifname/oifname LINK meta l4proto tcp meta length > 1280 counter
//	open:  iifname/oifname LINK meta l4proto tcp tcp flags & (syn|ack) == syn counter
func watchExprs(r watchRule) []expr.Any {
	tcp := []expr.Any{
		&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{unix.IPPROTO_TCP}},
	}
	if r.what == "skip" {
		a := r.target.Addr()
		proto, off := byte(unix.NFPROTO_IPV4), uint32(16)
		if a.Is6() {
			proto, off = unix.NFPROTO_IPV6, 24
		}
		return append(append([]expr.Any{
			&expr.Meta{Key: expr.MetaKeyNFPROTO, Register: 1},
			&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{proto}},
		}, tcp...),
			&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: off, Len: uint32(a.BitLen() / 8)},
			&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: a.AsSlice()},
			&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseTransportHeader, Offset: 2, Len: 2},
			&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: binary.BigEndian.AppendUint16(nil, r.target.Port())},
			&expr.Verdict{Kind: expr.VerdictReturn},
		)
	}
	key := expr.MetaKeyOIFNAME
	if r.chain == watchChainIn {
		key = expr.MetaKeyIIFNAME
	}
	name := make([]byte, unix.IFNAMSIZ)
	copy(name, r.link)
	out := append([]expr.Any{
		&expr.Meta{Key: key, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: name},
	}, tcp...)
	if r.what == "large" {
		// meta length is in the host's byte order; cmp compares bytes.
		out = append(out,
			&expr.Meta{Key: expr.MetaKeyLEN, Register: 1},
			&expr.Byteorder{SourceRegister: 1, DestRegister: 1, Op: expr.ByteorderHton, Len: 4, Size: 4},
			&expr.Cmp{Op: expr.CmpOpGt, Register: 1, Data: binary.BigEndian.AppendUint32(nil, MinClampMTU)})
	} else {
		out = append(out,
			&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseTransportHeader, Offset: 13, Len: 1},
			&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 1, Mask: []byte{0x12}, Xor: []byte{0x00}},
			&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{0x02}})
	}
	return append(out, &expr.Counter{})
}

func sortedLinks(ls []string) []string {
	out := slices.Clone(ls)
	slices.Sort(out)
	return slices.Compact(out)
}

func sortedAddrPorts(as []netip.AddrPort) []netip.AddrPort {
	out := slices.Clone(as)
	slices.SortFunc(out, func(a, b netip.AddrPort) int { return a.Compare(b) })
	return slices.Compact(out)
}
