package netfix

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"github.com/google/nftables/userdata"
	"golang.org/x/sys/unix"
)

// The TCP MSS clamp of a path-MTU repair: a table of edgeheal's own in the
// inet family, created and removed whole, that lowers the MSS option of
// every TCP SYN and SYN-ACK that leaves or arrives on a link to what its
// path carries. Lowering the MSS a SYN announces tells the far end what to
// send (the clamp on the way out); lowering the one that arrives tells
// this host and the pods behind it (the clamp on the way in). The
// prerouting and postrouting hooks see forwarded and local traffic alike.
// github.com/google/nftables speaks nftables' netlink directly: no nft
// binary on the node, one atomic batch per change.

// NFT is the part of *nftables.Conn that the clamp uses. A Conn made with
// nftables.WithNetNSFd works inside that namespace.
type NFT interface {
	ListTablesOfFamily(family nftables.TableFamily) ([]*nftables.Table, error)
	ListChainsOfTableFamily(family nftables.TableFamily) ([]*nftables.Chain, error)
	GetRules(t *nftables.Table, c *nftables.Chain) ([]*nftables.Rule, error)
	AddTable(t *nftables.Table) *nftables.Table
	DelTable(t *nftables.Table)
	AddChain(c *nftables.Chain) *nftables.Chain
	AddRule(r *nftables.Rule) *nftables.Rule
	Flush() error
}

var _ NFT = (*nftables.Conn)(nil)

// MSSClamp is the whole content of one clamp table.
type MSSClamp struct {
	Table string // "edgeheal-<tunnel>"; ClampTable names it
	// Links are the links whose TCP is clamped; none: the table is gone.
	Links []LinkClamp
}

// LinkClamp clamps the TCP of one link to its path's MTU.
type LinkClamp struct {
	Link string
	// PathMTU is the largest IP packet the path through the link carries:
	// SYNs in and out of it announce at most PathMTU-40 (IPv4) and
	// PathMTU-60 (IPv6).
	PathMTU int
	// MTUBefore is the link's own MTU before it was lowered to match the
	// path (0: it was not). It is kept in the table, with the change it
	// explains, so that the MTU can be put back (also by an uninstall)
	// and a reboot, which empties both, forgets it too.
	MTUBefore int
}

// ClampTable is the name of the clamp table for a tunnel interface.
func ClampTable(tunnel string) string { return ClampTablePrefix + tunnel }

// ClampTablePrefix starts the name of every clamp table: an uninstall
// removes every inet table whose name starts with it.
const ClampTablePrefix = "edgeheal-"

// MinClampMTU is the smallest path MTU a clamp is made for: a path that
// carries less than IPv6's minimum MTU is not one TCP clamping fixes.
const MinClampMTU = 1280

// MSS is the TCP MSS that fits a path MTU for IPv4 (20-byte IP and TCP
// headers) and IPv6 (40-byte IP header).
func MSS(pathMTU int) (v4, v6 int) { return pathMTU - 40, pathMTU - 60 }

// Validate reports whether c can be written.
func (c MSSClamp) Validate() error {
	if !strings.HasPrefix(c.Table, ClampTablePrefix) || len(c.Table) > 64 {
		return fmt.Errorf("clamp table %q: want %s<tunnel>", c.Table, ClampTablePrefix)
	}
	seen := map[string]bool{}
	for _, l := range c.Links {
		switch {
		case l.Link == "" || len(l.Link) >= unix.IFNAMSIZ || strings.ContainsAny(l.Link, " =\x00"):
			return fmt.Errorf("clamp of link %q: not a link name", l.Link)
		case seen[l.Link]:
			return fmt.Errorf("clamp of link %s: twice", l.Link)
		case l.PathMTU < MinClampMTU || l.PathMTU > 65535:
			return fmt.Errorf("clamp of link %s: path MTU %d is outside %d..65535", l.Link, l.PathMTU, MinClampMTU)
		case l.MTUBefore != 0 && (l.MTUBefore < 68 || l.MTUBefore > 65535):
			return fmt.Errorf("clamp of link %s: MTU before %d is not an MTU", l.Link, l.MTUBefore)
		}
		seen[l.Link] = true
	}
	return nil
}

// The table's two base chains: SYNs arriving (prerouting: forwarded and
// local) and leaving (postrouting: forwarded and local), at mangle
// priority as iptables' TCPMSS runs.
const (
	clampChainIn  = "mss-in"
	clampChainOut = "mss-out"
)

// EnsureMSSClamp makes the clamp table exactly want: it reads the table
// (its rules carry what they do in their comments), and when it differs
// it replaces the table whole in one atomic batch, or deletes it when want
// has no links, then reads it back. Safe to run twice: the second run
// changes nothing. Changes says what changed, e.g. "clamp flannel-wg:
// path MTU 1420 -> 1328 (TCP MSS 1288/1268)". dryRun computes the changes
// and makes none.
func EnsureMSSClamp(ctx context.Context, nft NFT, want MSSClamp, dryRun bool) (Result, error) {
	r := Result{Action: "mss-clamp", Target: want.Table}
	if err := ctx.Err(); err != nil {
		return r, err
	}
	if err := want.Validate(); err != nil {
		return r, err
	}
	want.Links = sortedClamps(want.Links)
	have, exists, err := ReadMSSClamp(nft, want.Table)
	if err != nil {
		return r, err
	}
	r.Changes = clampChanges(have.Links, want.Links)
	if exists && len(r.Changes) == 0 && len(want.Links) > 0 {
		return r, nil
	}
	if !exists && len(want.Links) == 0 {
		return r, nil
	}
	if len(r.Changes) == 0 {
		r.Changes = []string{"table " + want.Table + " rewritten"} // there, but not as edgeheal writes it
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
		writeClamp(nft, t, want.Links)
	}
	if err := nft.Flush(); err != nil {
		return r, fmt.Errorf("writing nftables table %s: %w", want.Table, err)
	}
	r.Changed = true
	after, exists, err := ReadMSSClamp(nft, want.Table)
	if err != nil {
		return r, fmt.Errorf("reading back %s: %w", want.Table, err)
	}
	if exists != (len(want.Links) > 0) || !slices.Equal(after.Links, want.Links) {
		return r, fmt.Errorf("nftables table %s reads back as %v, written as %v", want.Table, after.Links, want.Links)
	}
	return r, nil
}

// RemoveMSSClamps deletes every clamp table and every traffic watch
// (every inet table whose name starts with ClampTablePrefix), for an
// uninstall. It returns what it
// removed and changes nothing else.
func RemoveMSSClamps(ctx context.Context, nft NFT) (Result, error) {
	r := Result{Action: "mss-clamp-remove", Target: ClampTablePrefix + "*"}
	if err := ctx.Err(); err != nil {
		return r, err
	}
	tables, err := nft.ListTablesOfFamily(nftables.TableFamilyINet)
	if err != nil {
		return r, fmt.Errorf("listing nftables tables: %w", err)
	}
	for _, t := range tables {
		if strings.HasPrefix(t.Name, ClampTablePrefix) {
			nft.DelTable(&nftables.Table{Name: t.Name, Family: nftables.TableFamilyINet})
			r.Changes = append(r.Changes, "removed table inet "+t.Name)
		}
	}
	if len(r.Changes) == 0 {
		return r, nil
	}
	if err := nft.Flush(); err != nil {
		return r, fmt.Errorf("removing nftables tables: %w", err)
	}
	r.Changed = true
	return r, nil
}

// ListMSSClamps reads every clamp table of the namespace.
func ListMSSClamps(nft NFT) ([]MSSClamp, error) {
	tables, err := nft.ListTablesOfFamily(nftables.TableFamilyINet)
	if err != nil {
		return nil, fmt.Errorf("listing nftables tables: %w", err)
	}
	var out []MSSClamp
	for _, t := range tables {
		if !strings.HasPrefix(t.Name, ClampTablePrefix) || isWatchTable(t.Name) {
			continue
		}
		c, ok, err := ReadMSSClamp(nft, t.Name)
		if err != nil {
			return nil, err
		}
		if ok {
			out = append(out, c)
		}
	}
	return out, nil
}

// ReadMSSClamp reads a clamp table: exists is false when there is none.
// A table whose rules it does not recognise (edited by hand) reads as the
// links it does recognise; EnsureMSSClamp then rewrites it whole.
func ReadMSSClamp(nft NFT, table string) (c MSSClamp, exists bool, err error) {
	c.Table = table
	byLink := map[string]*LinkClamp{}
	complete := map[string]int{}
	exists, err = readTable(nft, table, func(chain, comment string, _ *nftables.Rule) {
		k, ok := parseClampComment(comment)
		if !ok || k.chain != chain {
			return
		}
		lc := byLink[k.link]
		if lc == nil {
			lc = &LinkClamp{Link: k.link, PathMTU: k.pathMTU, MTUBefore: k.mtuBefore}
			byLink[k.link] = lc
		}
		if lc.PathMTU == k.pathMTU && lc.MTUBefore == k.mtuBefore {
			complete[k.link]++
		}
	})
	if err != nil || !exists {
		return c, exists, err
	}
	for name, lc := range byLink {
		if complete[name] == 4 { // in and out, IPv4 and IPv6
			c.Links = append(c.Links, *lc)
		}
	}
	c.Links = sortedClamps(c.Links)
	return c, true, nil
}

func sortedClamps(ls []LinkClamp) []LinkClamp {
	out := slices.Clone(ls)
	slices.SortFunc(out, func(a, b LinkClamp) int { return strings.Compare(a.Link, b.Link) })
	return out
}

// clampChanges says how want differs from have, link by link.
func clampChanges(have, want []LinkClamp) []string {
	var out []string
	old := map[string]LinkClamp{}
	for _, l := range have {
		old[l.Link] = l
	}
	for _, l := range want {
		v4, v6 := MSS(l.PathMTU)
		o, ok := old[l.Link]
		delete(old, l.Link)
		switch {
		case !ok:
			out = append(out, fmt.Sprintf("clamp %s: TCP MSS %d/%d (path MTU %d)", l.Link, v4, v6, l.PathMTU))
		case o != l:
			out = append(out, fmt.Sprintf("clamp %s: path MTU %d -> %d (TCP MSS %d/%d)", l.Link, o.PathMTU, l.PathMTU, v4, v6))
		}
	}
	for _, l := range sortedClamps(mapValues(old)) {
		out = append(out, fmt.Sprintf("clamp %s removed (path MTU was %d)", l.Link, l.PathMTU))
	}
	return out
}

func mapValues(m map[string]LinkClamp) []LinkClamp {
	out := make([]LinkClamp, 0, len(m))
	for _, v := range m {
		out = append(out, v)
	}
	return out
}

// writeClamp queues the table, its two chains and four rules per link.
func writeClamp(nft NFT, t *nftables.Table, links []LinkClamp) {
	nft.AddTable(t)
	accept := nftables.ChainPolicyAccept
	in := nft.AddChain(&nftables.Chain{Name: clampChainIn, Table: t, Type: nftables.ChainTypeFilter,
		Hooknum: nftables.ChainHookPrerouting, Priority: nftables.ChainPriorityMangle, Policy: &accept})
	out := nft.AddChain(&nftables.Chain{Name: clampChainOut, Table: t, Type: nftables.ChainTypeFilter,
		Hooknum: nftables.ChainHookPostrouting, Priority: nftables.ChainPriorityMangle, Policy: &accept})
	for _, l := range links {
		v4, v6 := MSS(l.PathMTU)
		for _, ch := range []*nftables.Chain{in, out} {
			for _, af := range []struct {
				proto byte
				mss   int
				name  string
			}{{unix.NFPROTO_IPV4, v4, "ipv4"}, {unix.NFPROTO_IPV6, v6, "ipv6"}} {
				k := clampKey{chain: ch.Name, link: l.Link, af: af.name, mss: af.mss, pathMTU: l.PathMTU, mtuBefore: l.MTUBefore}
				nft.AddRule(&nftables.Rule{Table: t, Chain: ch, Exprs: clampExprs(ch.Name == clampChainIn, l.Link, af.proto, af.mss),
					UserData: userdata.AppendString(nil, userdata.TypeComment, k.comment())})
			}
		}
	}
}

// clampExprs is one rule: iifname/oifname LINK meta nfproto AF meta
// l4proto tcp tcp flags & (syn|rst) == syn tcp option maxseg size > MSS
// tcp option maxseg size set MSS. SYN-ACKs carry SYN too.
func clampExprs(in bool, link string, nfproto byte, mss int) []expr.Any {
	key := expr.MetaKeyOIFNAME
	if in {
		key = expr.MetaKeyIIFNAME
	}
	name := make([]byte, unix.IFNAMSIZ)
	copy(name, link)
	size := binary.BigEndian.AppendUint16(nil, uint16(mss))
	return []expr.Any{
		&expr.Meta{Key: key, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: name},
		&expr.Meta{Key: expr.MetaKeyNFPROTO, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{nfproto}},
		&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{unix.IPPROTO_TCP}},
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseTransportHeader, Offset: 13, Len: 1},
		&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 1, Mask: []byte{0x06}, Xor: []byte{0x00}},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{0x02}},
		&expr.Exthdr{DestRegister: 1, Type: 2, Offset: 2, Len: 2, Op: expr.ExthdrOpTcpopt},
		&expr.Cmp{Op: expr.CmpOpGt, Register: 1, Data: size},
		&expr.Immediate{Register: 1, Data: size},
		&expr.Exthdr{SourceRegister: 1, Type: 2, Offset: 2, Len: 2, Op: expr.ExthdrOpTcpopt},
	}
}

// clampKey is what one rule does, written as its comment so that the
// table says it to `nft list ruleset` and to ReadMSSClamp alike:
// "edgeheal mss-out flannel-wg ipv4 mss=1288 path_mtu=1328 mtu_before=1420".
type clampKey struct {
	chain, link, af string
	mss, pathMTU    int
	mtuBefore       int
}

func (k clampKey) comment() string {
	s := fmt.Sprintf("edgeheal %s %s %s mss=%d path_mtu=%d", k.chain, k.link, k.af, k.mss, k.pathMTU)
	if k.mtuBefore > 0 {
		s += fmt.Sprintf(" mtu_before=%d", k.mtuBefore)
	}
	return s
}

var errClampComment = errors.New("not an edgeheal clamp rule")

func parseClampComment(s string) (clampKey, bool) {
	k, err := parseClampKey(s)
	return k, err == nil
}

func parseClampKey(s string) (clampKey, error) {
	f := strings.Fields(s)
	if len(f) < 6 || f[0] != "edgeheal" || (f[1] != clampChainIn && f[1] != clampChainOut) || (f[3] != "ipv4" && f[3] != "ipv6") {
		return clampKey{}, errClampComment
	}
	k := clampKey{chain: f[1], link: f[2], af: f[3]}
	for _, kv := range f[4:] {
		name, v, ok := strings.Cut(kv, "=")
		n, err := strconv.Atoi(v)
		if !ok || err != nil {
			return clampKey{}, errClampComment
		}
		switch name {
		case "mss":
			k.mss = n
		case "path_mtu":
			k.pathMTU = n
		case "mtu_before":
			k.mtuBefore = n
		default:
			return clampKey{}, errClampComment
		}
	}
	v4, v6 := MSS(k.pathMTU)
	if (k.af == "ipv4" && k.mss != v4) || (k.af == "ipv6" && k.mss != v6) {
		return clampKey{}, errClampComment
	}
	return k, nil
}

// readTable calls each for every rule of the inet table, chain by chain,
// with the rule's comment (where edgeheal's rules say what they do).
// exists is false when there is no such table.
func readTable(nft NFT, table string, each func(chain, comment string, r *nftables.Rule)) (exists bool, err error) {
	tables, err := nft.ListTablesOfFamily(nftables.TableFamilyINet)
	if err != nil {
		return false, fmt.Errorf("listing nftables tables: %w", err)
	}
	var t *nftables.Table
	for _, x := range tables {
		if x.Name == table {
			t = x
		}
	}
	if t == nil {
		return false, nil
	}
	chains, err := nft.ListChainsOfTableFamily(nftables.TableFamilyINet)
	if err != nil {
		return true, fmt.Errorf("listing the chains of %s: %w", table, err)
	}
	for _, ch := range chains {
		if ch.Table == nil || ch.Table.Name != table {
			continue
		}
		rules, err := nft.GetRules(t, ch)
		if err != nil {
			return true, fmt.Errorf("reading the rules of %s %s: %w", table, ch.Name, err)
		}
		for _, rl := range rules {
			comment, _ := userdata.GetString(rl.UserData, userdata.TypeComment)
			each(ch.Name, comment, rl)
		}
	}
	return true, nil
}
