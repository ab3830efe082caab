package netfixtest

import (
	"fmt"
	"os"
	"slices"
	"sync"

	"github.com/vishvananda/netlink"

	"github.com/edgeheal/edgeheal/netfix"
)

// MTUs is a fake netfix.LinkMTU: links with an MTU, in memory. It logs
// every change (see Calls) and is safe for concurrent use. A missing link
// gives an error matching os.ErrNotExist.
type MTUs struct {
	mu    sync.Mutex
	mtu   map[string]int
	calls []string
	// SetErr fails every LinkSetMTU; Ignore makes it succeed and change
	// nothing.
	SetErr error
	Ignore bool
}

var _ netfix.LinkMTU = (*MTUs)(nil)

// NewMTUs returns links with these MTUs.
func NewMTUs(links map[string]int) *MTUs {
	m := &MTUs{mtu: map[string]int{}}
	for k, v := range links {
		m.mtu[k] = v
	}
	return m
}

func (m *MTUs) LinkByName(name string) (netlink.Link, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	mtu, ok := m.mtu[name]
	if !ok {
		return nil, fmt.Errorf("link %s: %w", name, os.ErrNotExist)
	}
	return &netlink.Dummy{LinkAttrs: netlink.LinkAttrs{Name: name, MTU: mtu}}, nil
}

func (m *MTUs) LinkSetMTU(link netlink.Link, mtu int) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	name := link.Attrs().Name
	m.calls = append(m.calls, fmt.Sprintf("set %s mtu %d", name, mtu))
	if m.SetErr != nil {
		return m.SetErr
	}
	if _, ok := m.mtu[name]; !ok {
		return fmt.Errorf("link %s: %w", name, os.ErrNotExist)
	}
	if !m.Ignore {
		m.mtu[name] = mtu
	}
	return nil
}

// Set changes a link's MTU behind edgeheal's back (Flannel resetting it),
// or adds the link.
func (m *MTUs) Set(name string, mtu int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.mtu[name] = mtu
}

// MTU is a link's MTU now (0: no such link).
func (m *MTUs) MTU(name string) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.mtu[name]
}

// Calls are the changes asked for, in order.
func (m *MTUs) Calls() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.calls)
}
