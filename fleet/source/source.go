// Package source feeds a fleet.Store from the broker: the retained
// statuses and histories of every node, on a connection of their own at
// QoS 0 (retained, they come again at every subscribe; the statuses
// first), and their events, over a persistent QoS 1 session (or a shared
// subscription, when several instances share the events). It owns the
// broker connections and nothing else: what a message means is the
// store's business.
package source

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"hash/maphash"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/url"
	"os"
	"runtime"
	"strings"
	"sync"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"

	"github.com/edgeheal/edgeheal/broker"
	"github.com/edgeheal/edgeheal/fleet"
)

// Options configure Run. MQTT and Store are required.
type Options struct {
	MQTT   fleet.MQTT
	Store  *fleet.Store
	Logger *slog.Logger

	DialTimeout time.Duration // TCP+TLS dial and CONNACK wait; default 10s
	// KeepAlive is MQTT's keep-alive on both connections: a ping when
	// idle that long, and a connection lost when the broker does not
	// answer within a third of it more (paho's) or sends nothing for
	// half of it more (the histories'); default 30s.
	KeepAlive  time.Duration
	MaxBackoff time.Duration // reconnect delay cap; default 1m
	Now        func() time.Time
	// Dial opens the TCP connection to the broker (TLS goes over it);
	// nil: a net.Dialer in the process's own network namespace.
	Dial func(ctx context.Context, addr string) (net.Conn, error)
}

// Topics are the subscriptions of a view: every node's status and
// retained history, never shared (each instance needs every node's
// state and past), and the events, shared when the group is set.
func Topics(m fleet.MQTT) (status, history, events string) {
	status = m.TopicPrefix + "/+/status"
	history = m.TopicPrefix + "/+/history"
	events = m.TopicPrefix + "/+/event"
	if m.Share != "" {
		events = "$share/" + m.Share + "/" + events
	}
	return status, history, events
}

// ClientID is the configured client id, or edgeheal-fleet-<hostname>: it
// must stay the same across restarts, since the broker keeps the
// persistent session (and the events queued while the view was away)
// under it.
func ClientID(m fleet.MQTT) string {
	if m.ClientID != "" {
		return m.ClientID
	}
	h, _ := os.Hostname()
	return "edgeheal-fleet-" + h
}

// Run connects, subscribes and feeds the store until ctx ends; it
// reconnects with jittered backoff and returns nil when ctx ends. Files
// (TLS, password) are read at every attempt; one that cannot be read is
// reported in the store's health and retried like an unreachable broker.
func Run(ctx context.Context, opts Options) error {
	if opts.MQTT.Broker == "" {
		return errors.New("no broker configured (mqtt.broker)")
	}
	addr, err := broker.ParseURL(opts.MQTT.Broker)
	if err != nil {
		return fmt.Errorf("mqtt.broker: %w", err)
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.DialTimeout <= 0 {
		opts.DialTimeout = 10 * time.Second
	}
	if opts.KeepAlive <= 0 {
		opts.KeepAlive = 30 * time.Second
	}
	if opts.MaxBackoff <= 0 {
		opts.MaxBackoff = time.Minute
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	r := &runner{opts: opts, broker: addr, seed: maphash.MakeSeed(), log: opts.Logger.With("broker", opts.MQTT.Broker, "client_id", ClientID(opts.MQTT))}
	r.queues, r.done = make([]chan retained, runtime.GOMAXPROCS(0)), make(chan struct{})
	var workers sync.WaitGroup
	for i := range r.queues {
		q := make(chan retained, 256)
		r.queues[i] = q
		workers.Go(func() {
			for {
				select {
				case h := <-q:
					r.apply(opts.Store.Prepare(h.m))
					buffers.Put(h.buf)
				case <-r.done:
					return
				}
			}
		})
	}
	defer workers.Wait()
	defer close(r.done)
	limit := time.Second
	for {
		err := r.session(ctx)
		if ctx.Err() != nil {
			opts.Store.SetConnected(false, "stopped")
			return nil
		}
		opts.Store.SetConnected(false, err.Error())
		r.log.Warn("mqtt connection ended; reconnecting", "err", err)
		wait := time.Second + rand.N(limit)
		limit = min(2*limit, opts.MaxBackoff)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(wait):
		}
	}
}

type runner struct {
	opts   Options
	broker broker.URL
	log    *slog.Logger
	// The retained statuses and histories go to workers that decode them
	// on every core: a view reads every node's at its start. Each node's
	// go to one worker (by its topic), so that its statuses are applied
	// in the broker's order; events keep it on paho's goroutine.
	queues []chan retained
	seed   maphash.Seed
	done   chan struct{} // closed when Run returns
}

// session is two connections, until either is lost: the view's own, a
// persistent session (clean session off, a fixed client id) for the
// events, on which the broker keeps the view's subscription and queues
// its QoS 1 events while it is away; and one for the retained statuses
// and histories, <client id>-history with a clean session, since they
// come again at every subscribe (retainedConn: the view reads its packets
// itself). The broker hands out a subscription's retained messages after
// those of the filter before it: the statuses come first, and a view
// knows every node's state before it has read their histories, the
// bulk of a start (docs/performance.md, "Where the 100,000-node start
// goes"). An event carries its session, so it needs no status first.
func (r *runner) session(ctx context.Context) error {
	status, history, events := Topics(r.opts.MQTT)
	lost := make(chan error, 2)
	id := ClientID(r.opts.MQTT)
	c, err := r.connect(id, lost, r.apply)
	if err != nil {
		return err
	}
	defer c.Disconnect(250)
	hc, err := r.connectRetained(id+"-history", status, history)
	if err != nil {
		return err
	}
	defer hc.close()
	// A session the view kept from before holds the statuses' or the
	// histories' subscription too: the view would read them twice, a
	// node's statuses out of order.
	if err := r.wait(c.Unsubscribe(status, history), "unsubscribing from "+status+" and "+history); err != nil {
		return err
	}
	// Events are not retained: QoS 1, queued while the view is away.
	if err := r.wait(c.Subscribe(events, 1, nil), "subscribing to "+events); err != nil {
		return err
	}
	// At QoS 0: each node's status and history is retained and the
	// connection's session clean, so one lost with the connection comes
	// again at the next subscribe; the broker need not queue them while
	// the view is away, and no acknowledgement is worth its cost (a PUBACK
	// written by the view and awaited by the broker, 20 in flight, for
	// every one).
	subscribed := make(chan error, 1)
	go func() {
		err := hc.read(subscribed, r.queue, r.opts.Now)
		select {
		case lost <- fmt.Errorf("%s-history: %w", id, err):
		default:
		}
	}()
	what := "subscribing to " + status + " and " + history
	if err := hc.subscribe(); err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	select {
	case err := <-subscribed:
		if err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
	case err := <-lost:
		return fmt.Errorf("%s: %w", what, err)
	case <-time.After(r.opts.DialTimeout):
		return fmt.Errorf("%s: no acknowledgement within %s", what, r.opts.DialTimeout)
	}
	r.opts.Store.SetConnected(true, fmt.Sprintf("connected to %s, subscribed to %s, %s and %s", r.opts.MQTT.Broker, status, history, events))
	r.log.Info("mqtt connected", "status_topic", status, "history_topic", history, "event_topic", events)
	select {
	case <-ctx.Done():
		return nil
	case err := <-lost:
		return fmt.Errorf("connection lost: %w", err)
	}
}

// apply applies m; one the store could not apply (a bug it met and
// recovered from) is logged with the panic and its stack.
func (r *runner) apply(m fleet.Message) {
	if r.opts.Store.Apply(m) == fleet.Failed {
		r.log.Error("a message the view could not apply; it goes on without it", "topic", m.Topic, "failure", r.opts.Store.Health(r.opts.Now()).LastFailure)
	}
}

// wait waits for a SUBSCRIBE's or UNSUBSCRIBE's acknowledgement.
func (r *runner) wait(tok paho.Token, what string) error {
	if !tok.WaitTimeout(r.opts.DialTimeout) {
		return fmt.Errorf("%s: no acknowledgement within %s", what, r.opts.DialTimeout)
	}
	if err := tok.Error(); err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	return nil
}

// retained is a message of the retained connection and the buffer its
// payload is in.
type retained struct {
	m   fleet.Message
	buf *[]byte
}

// queue hands a retained message to the worker of its node.
func (r *runner) queue(m fleet.Message, buf *[]byte) {
	node := m.Topic[:max(strings.LastIndexByte(m.Topic, '/'), 0)]
	q := r.queues[maphash.String(r.seed, node)%uint64(len(r.queues))]
	select {
	case q <- retained{m, buf}:
	case <-r.done:
	}
}

// connect makes the view's own client: the given client id, a
// persistent session, every message to handle in the broker's order.
// paho acknowledges a QoS 1 message after the handler returned, so an
// event is acked only once the store has it.
func (r *runner) connect(id string, lost chan<- error, handle func(fleet.Message)) (paho.Client, error) {
	tc, password, err := r.credentials()
	if err != nil {
		return nil, err
	}
	now := r.opts.Now
	o := paho.NewClientOptions().
		AddBroker(r.opts.MQTT.Broker).
		SetClientID(id).
		SetProtocolVersion(4). // explicit: paho would retry 3.1 and double a dead broker's cost
		SetCleanSession(false).
		SetStore(paho.NewMemoryStore()).
		SetAutoReconnect(false).
		SetConnectRetry(false).
		SetConnectTimeout(r.opts.DialTimeout).
		SetKeepAlive(r.opts.KeepAlive).
		SetPingTimeout(r.opts.KeepAlive / 3).
		SetOrderMatters(true). // one handler at a time, in the broker's order
		SetDefaultPublishHandler(func(_ paho.Client, m paho.Message) {
			handle(fleet.Message{Topic: m.Topic(), Payload: m.Payload(), Retained: m.Retained(), Received: now()})
		}).
		SetConnectionLostHandler(func(_ paho.Client, err error) {
			select {
			case lost <- fmt.Errorf("%s: %w", id, err):
			default:
			}
		}).
		SetCustomOpenConnectionFn(func(*url.URL, paho.ClientOptions) (net.Conn, error) {
			c, err := r.dial(tc)
			if err != nil || tc != nil {
				return c, err // a TLS connection reads whole records: buffered already
			}
			return buffered(c), nil
		})
	if u := r.opts.MQTT.Username; u != "" {
		o.SetUsername(u)
	}
	if password != "" {
		o.SetPassword(password)
	}
	c := paho.NewClient(o)
	tok := c.Connect()
	if !tok.WaitTimeout(2*r.opts.DialTimeout + time.Second) {
		c.Disconnect(0)
		return nil, fmt.Errorf("connecting to %s as %s: no CONNACK within %s", r.opts.MQTT.Broker, id, 2*r.opts.DialTimeout)
	}
	if err := tok.Error(); err != nil {
		return nil, fmt.Errorf("connecting to %s as %s: %w", r.opts.MQTT.Broker, id, err)
	}
	return c, nil
}

// credentials reads the TLS files and the password, at every attempt.
func (r *runner) credentials() (*tls.Config, string, error) {
	var tc *tls.Config
	if r.broker.TLS {
		var err error
		if tc, err = r.opts.MQTT.TLS.ClientConfig(r.broker.Host); err != nil {
			return nil, "", err
		}
	}
	if f := r.opts.MQTT.PasswordFile; f != "" {
		pw, err := broker.ReadPassword(f)
		return tc, pw, err
	}
	return tc, "", nil
}

func (r *runner) dial(tc *tls.Config) (net.Conn, error) {
	ctx, cancel := context.WithTimeout(context.Background(), r.opts.DialTimeout)
	defer cancel()
	var c net.Conn
	var err error
	if r.opts.Dial != nil {
		c, err = r.opts.Dial(ctx, r.broker.Addr())
	} else {
		c, err = (&net.Dialer{KeepAlive: 30 * time.Second}).DialContext(ctx, "tcp", r.broker.Addr())
	}
	if err != nil {
		return nil, err
	}
	if tc == nil {
		return c, nil
	}
	tconn := tls.Client(c, tc)
	if err := tconn.HandshakeContext(ctx); err != nil {
		c.Close()
		return nil, err
	}
	return tconn, nil
}

// bufferedConn reads through a buffer. paho reads a packet's header a
// byte at a time (the type, each byte of the length) straight from the
// connection: on plain TCP four system calls for every message, 400,000
// at a 100,000-node view's start (docs/performance.md, "Where the
// 100,000-node start goes").
type bufferedConn struct {
	net.Conn
	r *bufio.Reader
}

func buffered(c net.Conn) net.Conn {
	return &bufferedConn{Conn: c, r: bufio.NewReaderSize(c, 64<<10)}
}

func (c *bufferedConn) Read(p []byte) (int, error) { return c.r.Read(p) }
