// Package fleetsim runs a fleet of edgeheal's MQTT publishers in one
// process against one real broker, takes the broker away for a while with
// events queued on every node, brings it back, and measures how the fleet
// returns: connection attempts per second, the time until every node's
// events arrived, duplicates and losses. Each node is the agent's own
// code: an outbox (agent/outbox) and a publisher (agent/mqtt) with its
// reconnect policy, as the daemon wires them; only the broker and the
// cloud-side subscriber are shared.
//
// The broker is given by the caller (the benchmark runs Debian's
// mosquitto); the package never touches the network beyond the broker's
// address and the state directory it is given.
package fleetsim

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/edgeheal/edgeheal/agent/core"
	"github.com/edgeheal/edgeheal/agent/mqtt"
	"github.com/edgeheal/edgeheal/agent/outbox"
	"github.com/edgeheal/edgeheal/configs"
	"github.com/edgeheal/edgeheal/wire"
)

// Broker is the broker the fleet reports to.
type Broker interface {
	URL() string // tcp://host:port
	Start() error
	Stop() error
	// Log is what the broker logged so far: mosquitto's lines, each
	// starting with a Unix time in seconds.
	Log() string
}

// Options say what fleet to simulate.
type Options struct {
	Nodes         int           // default 2000
	EventsPerNode int           // queued on every node during the outage; default 3
	Outage        time.Duration // default 30s
	// Reconnect are the publishers' limits (report.mqtt.reconnect); the
	// zero value is the shipped defaults.
	Reconnect configs.Reconnect
	// Name says which setting this is, in the results ("defaults").
	Name string
	// StateDir holds one state directory per node.
	StateDir string
	// Wait bounds how long after the broker's return to wait for every
	// event; default 2m.
	Wait time.Duration
	// Progress, if set, receives a line at each phase.
	Progress io.Writer
}

// Defaults are the shipped report.mqtt.reconnect limits (configs/defaults.yaml).
var Defaults = configs.Reconnect{
	ProbeInterval: configs.Duration(2 * time.Second), ConnectJitter: configs.Duration(500 * time.Millisecond),
	MinDelay: configs.Duration(time.Second), MaxDelay: configs.Duration(2 * time.Minute),
	StableAfter: configs.Duration(time.Minute), StartJitter: configs.Duration(2 * time.Second),
}

func (o *Options) defaults() {
	if o.Nodes <= 0 {
		o.Nodes = 2000
	}
	if o.EventsPerNode <= 0 {
		o.EventsPerNode = 3
	}
	if o.Outage <= 0 {
		o.Outage = 30 * time.Second
	}
	if o.Reconnect == (configs.Reconnect{}) {
		o.Reconnect = Defaults
	}
	if o.Name == "" {
		o.Name = "defaults"
	}
	if o.Wait <= 0 {
		o.Wait = 2 * time.Minute
	}
	if o.Progress == nil {
		o.Progress = io.Discard
	}
}

// node is one simulated edge node.
type node struct {
	name string
	ob   *outbox.Outbox
	pub  *mqtt.Publisher
	ids  []string
}

// fleet is the running simulation.
type fleet struct {
	opts   Options
	broker Broker
	nodes  []*node
	dials  *counter
	memory bool // outboxes in memory: the process's file limit is too low for one log each
	wg     sync.WaitGroup
	cancel context.CancelFunc
}

// Run simulates the fleet once: it starts the broker, connects every
// node, stops the broker for Outage while EventsPerNode events are queued
// on every node, starts it again and measures the return. It stops the
// broker when it is done.
func Run(ctx context.Context, b Broker, opts Options) (Result, error) {
	opts.defaults()
	f := &fleet{opts: opts, broker: b, dials: newCounter(), memory: !enoughFiles(opts.Nodes)}
	defer b.Stop()
	if err := b.Start(); err != nil {
		return Result{}, fmt.Errorf("starting the broker: %w", err)
	}
	cloud, err := subscribe(b.URL())
	if err != nil {
		return Result{}, err
	}
	defer cloud.close()
	if err := f.start(ctx); err != nil {
		return Result{}, err
	}
	defer f.stop()
	if err := f.waitAll(ctx, "connected", 3*time.Minute, func(n *node) bool { return n.pub.Connected() }); err != nil {
		return Result{}, err
	}
	fmt.Fprintf(opts.Progress, "%s: %d nodes connected; stopping the broker for %s\n", opts.Name, opts.Nodes, opts.Outage)
	stopped := time.Now()
	if err := b.Stop(); err != nil {
		return Result{}, fmt.Errorf("stopping the broker: %w", err)
	}
	if err := f.waitAll(ctx, "disconnected", time.Minute, func(n *node) bool { return !n.pub.Connected() }); err != nil {
		return Result{}, err
	}
	if err := f.queue(); err != nil {
		return Result{}, err
	}
	time.Sleep(time.Until(stopped.Add(opts.Outage)))
	outageDials := f.dials.peakSince(stopped.Add(5 * time.Second))
	if err := b.Start(); err != nil {
		return Result{}, fmt.Errorf("starting the broker again: %w", err)
	}
	back := time.Now()
	f.dials.reset()
	fmt.Fprintf(opts.Progress, "%s: broker back after %s; waiting for %d events\n", opts.Name, back.Sub(stopped).Round(time.Second), opts.Nodes*opts.EventsPerNode)
	arrivals := cloud.await(ctx, f.allIDs(), opts.Wait)
	r := f.result(back, arrivals, b.Log())
	r.PeakDialsPerSecondDuringOutage = outageDials
	return r, nil
}

// enoughFiles reports whether the process may hold one open log per node
// besides a socket per node (Go raises the soft limit to the hard one).
func enoughFiles(nodes int) bool {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return false
	}
	return uint64(2*nodes+500) <= lim.Cur
}

// start makes every node and runs its publisher (and its outbox, for an
// outbox in memory) until stop.
func (f *fleet) start(ctx context.Context) error {
	ctx, f.cancel = context.WithCancel(ctx)
	for i := range f.opts.Nodes {
		n, err := f.newNode(fmt.Sprintf("fleet-%05d", i))
		if err != nil {
			f.stop()
			return err
		}
		f.nodes = append(f.nodes, n)
		f.wg.Go(func() { _ = n.pub.Run(ctx) })
		if f.memory {
			f.wg.Go(func() { _ = n.ob.Run(ctx) })
		}
	}
	return nil
}

func (f *fleet) newNode(name string) (*node, error) {
	dir := filepath.Join(f.opts.StateDir, name)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	var ob *outbox.Outbox
	var err error
	if f.memory {
		// A file where the outbox directory would be keeps it in memory:
		// the same queue, with no file descriptor of its own.
		if err := os.WriteFile(filepath.Join(dir, "outbox"), nil, 0o600); err != nil {
			return nil, err
		}
		ob, err = outbox.OpenOrMemory(dir, outbox.Options{})
	} else {
		ob, err = outbox.Open(dir, outbox.Options{})
	}
	if err != nil {
		return nil, err
	}
	pub, err := mqtt.NewPublisher(mqtt.Options{
		Config:  configs.ReportMQTT{Broker: f.broker.URL(), TopicPrefix: wire.DefaultTopicPrefix, Reconnect: f.opts.Reconnect},
		Node:    configs.Node{Name: name, Site: "fleetsim"},
		Version: "fleetsim", Outbox: ob, Session: mqtt.OpenSession(dir, nil),
		Dial: f.dials.dial,
	})
	if err != nil {
		ob.Close()
		return nil, err
	}
	return &node{name: name, ob: ob, pub: pub}, nil
}

// stop ends every publisher and closes the outboxes.
func (f *fleet) stop() {
	if f.cancel != nil {
		f.cancel()
	}
	f.wg.Wait()
	for _, n := range f.nodes {
		n.ob.Close()
	}
	f.nodes = nil
}

// waitAll waits until ok holds for every node, or fails after limit.
func (f *fleet) waitAll(ctx context.Context, what string, limit time.Duration, ok func(*node) bool) error {
	deadline := time.Now().Add(limit)
	for {
		missing := 0
		for _, n := range f.nodes {
			if !ok(n) {
				missing++
			}
		}
		if missing == 0 {
			return nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("%d of %d nodes not %s within %s", missing, len(f.nodes), what, limit)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// queue appends EventsPerNode events to every node's outbox.
func (f *fleet) queue() error {
	for _, n := range f.nodes {
		for j := range f.opts.EventsPerNode {
			id := fmt.Sprintf("%s-%d", n.name, j)
			if err := n.ob.Append(core.Event{ID: id, Kind: "incident", Target: "wg0/fleet", Summary: "queued during the broker outage"}); err != nil {
				return fmt.Errorf("queueing on %s: %w", n.name, err)
			}
			n.ids = append(n.ids, id)
		}
	}
	return nil
}

func (f *fleet) allIDs() map[string]string {
	out := map[string]string{}
	for _, n := range f.nodes {
		for _, id := range n.ids {
			out[id] = n.name
		}
	}
	return out
}

// counter counts TCP connection attempts per second.
type counter struct {
	mu     sync.Mutex
	perSec map[int64]int
	total  int
}

func newCounter() *counter { return &counter{perSec: map[int64]int{}} }

func (c *counter) dial(ctx context.Context, network, address string) (net.Conn, error) {
	c.mu.Lock()
	c.perSec[time.Now().Unix()]++
	c.total++
	c.mu.Unlock()
	var d net.Dialer
	return d.DialContext(ctx, network, address)
}

func (c *counter) reset() {
	c.mu.Lock()
	c.perSec, c.total = map[int64]int{}, 0
	c.mu.Unlock()
}

// peakSince is the most attempts in one second from since on.
func (c *counter) peakSince(since time.Time) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	peak := 0
	for s, n := range c.perSec {
		if s >= since.Unix() {
			peak = max(peak, n)
		}
	}
	return peak
}
