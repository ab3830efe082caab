package netfixtest

import (
	"fmt"
	"slices"
	"sync"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"

	"github.com/edgeheal/edgeheal/netfix"
)

// NFT is a fake netfix.NFT: nftables tables, chains and rules in memory.
// Commands are queued as on a real *nftables.Conn and applied at Flush,
// all or nothing. Every Flush is logged (see Calls) with the commands it
// carried. Safe for concurrent use.
type NFT struct {
	mu      sync.Mutex
	tables  []*nftTable
	queue   []nftOp
	calls   []string
	flushes int
	// FlushErr, when set, fails every Flush (nothing is applied); ListErr
	// fails every read.
	FlushErr error
	ListErr  error
	// Ignore makes Flush succeed and apply nothing.
	Ignore bool
	// Busy makes every read find each counter a packet further: links
	// that always carry traffic.
	Busy bool
}

var _ netfix.NFT = (*NFT)(nil)

type nftTable struct {
	t      nftables.Table
	chains []*nftChain
}

type nftChain struct {
	c     nftables.Chain
	rules []*nftables.Rule
}

type nftOp struct {
	what  string
	table *nftables.Table
	chain *nftables.Chain
	rule  *nftables.Rule
}

// NewNFT returns a namespace without tables.
func NewNFT() *NFT { return &NFT{} }

func (f *NFT) find(name string, fam nftables.TableFamily) *nftTable {
	for _, t := range f.tables {
		if t.t.Name == name && t.t.Family == fam {
			return t
		}
	}
	return nil
}

func (f *NFT) ListTablesOfFamily(family nftables.TableFamily) ([]*nftables.Table, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.ListErr != nil {
		return nil, f.ListErr
	}
	var out []*nftables.Table
	for _, t := range f.tables {
		if family == nftables.TableFamilyUnspecified || t.t.Family == family {
			c := t.t
			c.Use = uint32(len(t.chains))
			out = append(out, &c)
		}
	}
	return out, nil
}

func (f *NFT) ListChainsOfTableFamily(family nftables.TableFamily) ([]*nftables.Chain, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.ListErr != nil {
		return nil, f.ListErr
	}
	var out []*nftables.Chain
	for _, t := range f.tables {
		if family != nftables.TableFamilyUnspecified && t.t.Family != family {
			continue
		}
		for _, ch := range t.chains {
			c := ch.c
			tc := t.t
			c.Table = &tc
			out = append(out, &c)
		}
	}
	return out, nil
}

func (f *NFT) GetRules(t *nftables.Table, c *nftables.Chain) ([]*nftables.Rule, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.ListErr != nil {
		return nil, f.ListErr
	}
	tb := f.find(t.Name, t.Family)
	if tb == nil {
		return nil, fmt.Errorf("table %s: no such file or directory", t.Name)
	}
	for _, ch := range tb.chains {
		if ch.c.Name == c.Name {
			out := make([]*nftables.Rule, 0, len(ch.rules))
			for _, r := range ch.rules {
				for _, e := range r.Exprs {
					if n, ok := e.(*expr.Counter); ok && f.Busy {
						n.Packets++
					}
				}
				cp := *r
				cp.UserData = slices.Clone(r.UserData)
				out = append(out, &cp)
			}
			return out, nil
		}
	}
	return nil, fmt.Errorf("chain %s: no such file or directory", c.Name)
}

func (f *NFT) AddTable(t *nftables.Table) *nftables.Table {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.queue = append(f.queue, nftOp{what: "add table", table: t})
	return t
}

func (f *NFT) DelTable(t *nftables.Table) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.queue = append(f.queue, nftOp{what: "del table", table: t})
}

func (f *NFT) AddChain(c *nftables.Chain) *nftables.Chain {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.queue = append(f.queue, nftOp{what: "add chain", chain: c})
	return c
}

func (f *NFT) AddRule(r *nftables.Rule) *nftables.Rule {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.queue = append(f.queue, nftOp{what: "add rule", rule: r})
	return r
}

// Flush applies the queued commands, all or nothing, as the kernel does a
// batch: deleting a table that is not there fails the whole batch.
func (f *NFT) Flush() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	q := f.queue
	f.queue = nil
	if len(q) == 0 {
		return nil
	}
	f.flushes++
	summary := map[string]int{}
	var order []string
	for _, op := range q {
		if summary[op.what] == 0 {
			order = append(order, op.what)
		}
		summary[op.what]++
	}
	line := "flush:"
	for _, w := range order {
		line += fmt.Sprintf(" %s×%d", w, summary[w])
	}
	f.calls = append(f.calls, line)
	if f.FlushErr != nil {
		return f.FlushErr
	}
	if f.Ignore {
		return nil
	}
	tables, err := apply(f.tables, q)
	if err != nil {
		return err
	}
	f.tables = tables
	return nil
}

// Calls are the flushes made, in order, each with the commands it carried.
func (f *NFT) Calls() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.calls)
}

// Tables are the names of the tables there are now.
func (f *NFT) Tables() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []string
	for _, t := range f.tables {
		out = append(out, t.t.Name)
	}
	return out
}

// Rules are the rules of a table's chain now (nil: none, or no such chain).
func (f *NFT) Rules(table, chain string) []*nftables.Rule {
	f.mu.Lock()
	defer f.mu.Unlock()
	t := f.find(table, nftables.TableFamilyINet)
	if t == nil {
		return nil
	}
	for _, c := range t.chains {
		if c.c.Name == chain {
			return slices.Clone(c.rules)
		}
	}
	return nil
}

// apply is tables after the queued commands, or the error that fails the
// whole batch; current itself is left as it is.
func apply(current []*nftTable, q []nftOp) ([]*nftTable, error) {
	tables := make([]*nftTable, 0, len(current))
	for _, t := range current {
		cp := &nftTable{t: t.t}
		for _, ch := range t.chains {
			cp.chains = append(cp.chains, &nftChain{c: ch.c, rules: slices.Clone(ch.rules)})
		}
		tables = append(tables, cp)
	}
	find := func(name string, fam nftables.TableFamily) (int, *nftTable) {
		for i, t := range tables {
			if t.t.Name == name && t.t.Family == fam {
				return i, t
			}
		}
		return -1, nil
	}
	for _, op := range q {
		switch op.what {
		case "add table":
			if _, t := find(op.table.Name, op.table.Family); t == nil {
				tables = append(tables, &nftTable{t: nftables.Table{Name: op.table.Name, Family: op.table.Family}})
			}
		case "del table":
			i, t := find(op.table.Name, op.table.Family)
			if t == nil {
				return nil, fmt.Errorf("deleting table %s: no such file or directory", op.table.Name)
			}
			tables = slices.Delete(tables, i, i+1)
		case "add chain":
			_, t := find(op.chain.Table.Name, op.chain.Table.Family)
			if t == nil {
				return nil, fmt.Errorf("adding chain %s: table %s: no such file or directory", op.chain.Name, op.chain.Table.Name)
			}
			c := *op.chain
			c.Table = nil
			t.chains = append(t.chains, &nftChain{c: c})
		case "add rule":
			_, t := find(op.rule.Table.Name, op.rule.Table.Family)
			if t == nil {
				return nil, fmt.Errorf("adding a rule: table %s: no such file or directory", op.rule.Table.Name)
			}
			var ch *nftChain
			for _, c := range t.chains {
				if c.c.Name == op.rule.Chain.Name {
					ch = c
				}
			}
			if ch == nil {
				return nil, fmt.Errorf("adding a rule: chain %s: no such file or directory", op.rule.Chain.Name)
			}
			r := *op.rule
			r.UserData = slices.Clone(op.rule.UserData)
			ch.rules = append(ch.rules, &r)
		}
	}
	return tables, nil
}
