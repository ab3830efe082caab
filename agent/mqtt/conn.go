package mqtt

// One broker connection: connect with a Will of its own session, then
// serve status and queued events on it until it breaks or the publisher
// stops.

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/url"
	"sync"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"

	"github.com/edgeheal/edgeheal/broker"
	"github.com/edgeheal/edgeheal/wire"
)

// link is one broker connection.
type link struct {
	c       paho.Client
	session uint64
	lost    chan error // connection lost (buffered, 1)
	raw     func() *broker.LimitedConn
	up      time.Time // when the CONNACK came
}

// reportMaxPacket is the largest PUBLISH or SUBACK the reporting session
// takes from its broker: it subscribes to nothing, so none should come.
// Every other packet a broker sends has a fixed size (broker.LimitPackets).
const reportMaxPacket = 4 << 10

// broke is the packet that broke MQTT and closed the connection, or err.
func (l *link) broke(err error) error {
	if c := l.raw(); c != nil {
		if perr := c.Err(); perr != nil {
			return perr
		}
	}
	return err
}

// abort closes the TCP connection without an MQTT DISCONNECT, so the broker
// publishes the Will: the cloud must not keep seeing a stale "online" while
// this node is reconnecting or gone.
func (l *link) abort() {
	if c := l.raw(); c != nil {
		c.Close()
	}
	l.c.Disconnect(0) // releases paho's goroutines; the DISCONNECT cannot reach the broker now
}

// will is the Last Will of the connection with session: "lost", with the
// node's identity, so that a lost node keeps its context where the status
// is read (its site, what it ran).
func (p *Publisher) will(session uint64) ([]byte, error) {
	p.mu.Lock()
	revision := p.revision
	p.mu.Unlock()
	return json.Marshal(wire.Status{V: wire.Version, State: wire.StateLost, Session: session,
		Node: p.opts.Node.Name, Site: p.opts.Node.Site, Version: p.opts.Version, ConfigRevision: revision})
}

// connect makes a new client whose Will carries a new session number and
// connects it. It waits at most about 2×DialTimeout, even if ctx is done,
// so that a Stop during a connect can still say goodbye.
func (p *Publisher) connect(ctx context.Context) (*link, error) {
	tc, password, err := p.credentials()
	if err != nil {
		return nil, err
	}
	// Bounded by DialTimeout, not by ctx: a Stop during a connect must be
	// able to say goodbye on the connection it makes.
	ctx = context.WithoutCancel(ctx)
	session := p.opts.Session.Next()
	p.session.Store(session)
	will, err := p.will(session)
	if err != nil {
		return nil, err
	}
	var (
		rawMu sync.Mutex
		raw   *broker.LimitedConn
	)
	o := paho.NewClientOptions().
		AddBroker(p.opts.Config.Broker).
		SetClientID(p.clientID).
		// Set explicitly: left at 0, paho falls back to 3.1 on a refused
		// CONNECT and doubles the time a dead broker costs.
		SetProtocolVersion(4).
		// The outbox is the durable queue; paho's store only holds what is
		// in flight on this one connection.
		SetCleanSession(true).
		SetStore(paho.NewMemoryStore()).
		SetAutoReconnect(false).
		SetConnectRetry(false).
		SetConnectTimeout(p.opts.DialTimeout).
		SetWriteTimeout(p.opts.DialTimeout).
		SetKeepAlive(30*time.Second).
		SetPingTimeout(10*time.Second).
		SetOrderMatters(false).
		SetBinaryWill(p.StatusTopic(), will, 1, true).
		// Our own dial: a dial timeout of our choosing, no proxy from the
		// environment (the report path is the host network, direct), and a
		// handle on the TCP connection for abort.
		SetCustomOpenConnectionFn(func(uri *url.URL, _ paho.ClientOptions) (net.Conn, error) {
			c, err := p.dial(ctx, tc)
			if err != nil {
				return nil, err
			}
			// Every packet's size is checked before paho allocates it.
			lc := broker.LimitPackets(c, broker.PacketLimits{Max: reportMaxPacket, CleanSession: true})
			rawMu.Lock()
			raw = lc
			rawMu.Unlock()
			return lc, nil
		})
	if p.opts.Config.Username != "" {
		o.SetUsername(p.opts.Config.Username)
	}
	if password != "" {
		o.SetPassword(password)
	}
	l := &link{session: session, lost: make(chan error, 1), raw: func() *broker.LimitedConn {
		rawMu.Lock()
		defer rawMu.Unlock()
		return raw
	}}
	o.SetConnectionLostHandler(func(_ paho.Client, err error) {
		select {
		case l.lost <- err:
		default:
		}
	})
	c := paho.NewClient(o)
	tok := c.Connect()
	if !tok.WaitTimeout(2*p.opts.DialTimeout + time.Second) {
		c.Disconnect(0)
		return nil, fmt.Errorf("connecting to %s: no CONNACK within %s", p.broker, 2*p.opts.DialTimeout)
	}
	if err := tok.Error(); err != nil {
		return nil, fmt.Errorf("connecting to %s: %w", p.broker, l.broke(err))
	}
	l.c, l.up = c, time.Now()
	return l, nil
}

// errLost marks a connection that the broker or the path closed, rather
// than one the publisher ended because an acknowledgement did not come.
var errLost = errors.New("connection lost")

// errSetup marks what keeps the publisher from connecting that is no
// observation of the network: a TLS file or the password file that cannot
// be read. The publisher returns it from Run, so the supervisor reports
// the component as failed and runs it again later.
var errSetup = errors.New("mqtt publisher set-up")

// credentials loads the TLS files and the password, at every connection
// attempt, so that a rotated certificate or password is picked up.
func (p *Publisher) credentials() (*tls.Config, string, error) {
	var tc *tls.Config
	if p.broker.TLS {
		var err error
		if tc, err = p.opts.Config.TLS.ClientConfig(p.broker.Host); err != nil {
			return nil, "", fmt.Errorf("%w: %w", errSetup, err)
		}
	}
	password := ""
	if f := p.opts.Config.PasswordFile; f != "" {
		var err error
		if password, err = broker.ReadPassword(f); err != nil {
			return nil, "", fmt.Errorf("%w: %w", errSetup, err)
		}
	}
	return tc, password, nil
}

// dial opens the TCP (and TLS) connection to the broker, over the host
// network and without a proxy from the environment, within DialTimeout.
func (p *Publisher) dial(ctx context.Context, tc *tls.Config) (net.Conn, error) {
	ctx, cancel := context.WithTimeout(ctx, p.opts.DialTimeout)
	defer cancel()
	c, err := p.opts.Dial(ctx, "tcp", p.broker.Addr())
	if err != nil || tc == nil {
		return c, err
	}
	tc = tc.Clone()
	tlc := tls.Client(c, tc)
	if err := tlc.HandshakeContext(ctx); err != nil {
		c.Close()
		return nil, err
	}
	return tlc, nil
}

// progressEvery is how often an idle connection still marks progress.
const progressEvery = 30 * time.Second

// serve runs one connection: status on connect, on change and on the
// heartbeat; queued events in order. It returns nil after a clean goodbye
// (ctx done) and an error when the connection was lost.
func (p *Publisher) serve(ctx context.Context, l *link) error {
	st := &statusPublisher{p: p, l: l}
	if err := st.publish(ctx, true); err != nil {
		return p.fail(ctx, l, err)
	}
	hist := &historyPublisher{p: p, l: l}
	if err := hist.ifDue(ctx, time.Now()); err != nil {
		return p.fail(ctx, l, err)
	}
	heartbeat := time.NewTicker(p.opts.Heartbeat)
	defer heartbeat.Stop()
	histCheck := time.NewTicker(historyCheckEvery)
	defer histCheck.Stop()
	alive := time.NewTicker(progressEvery)
	defer alive.Stop()
	drain := true
	for {
		p.tick()
		if drain {
			more, err := p.publishEvents(ctx, l)
			if err != nil {
				// No PUBACK in time (or the link broke): the connection
				// is not to be trusted. Reconnect; the events stay queued.
				return p.fail(ctx, l, err)
			}
			if drain = more; drain {
				// Between batches, let a status change through first.
				if err := st.ifChanged(ctx); err != nil {
					return p.fail(ctx, l, err)
				}
				continue
			}
		}
		var err error
		select {
		case <-ctx.Done():
			p.goodbye(l.c, l.session)
			return nil
		case lerr := <-l.lost:
			l.c.Disconnect(0)
			return fmt.Errorf("%w: %w", errLost, l.broke(lerr))
		case why := <-p.refresh:
			err = fmt.Errorf("%w: %s", errRefresh, why)
		case <-p.changed:
			err = st.publish(ctx, false)
		case <-heartbeat.C:
			err = st.publish(ctx, true)
		case now := <-histCheck.C:
			err = hist.ifDue(ctx, now)
		case <-p.opts.Outbox.Changed():
			drain = true
		case <-alive.C:
			if time.Since(l.up) >= p.reconnect.StableAfter.D() {
				p.brokerBroke(nil) // a connection that lasts: the broker speaks MQTT again
			}
		}
		if err != nil {
			return p.fail(ctx, l, err)
		}
	}
}

// fail ends the connection after an error: a goodbye if the publisher is
// stopping anyway, otherwise an abort that lets the Will speak.
func (p *Publisher) fail(ctx context.Context, l *link, err error) error {
	if ctx.Err() != nil {
		p.goodbye(l.c, l.session)
		return nil
	}
	l.abort()
	return l.broke(err)
}

// statusPublisher publishes the retained status on one connection.
type statusPublisher struct {
	p        *Publisher
	l        *link
	lastBody []byte // the last status published, without its timestamp
}

// ifChanged publishes the status if a change is pending.
func (s *statusPublisher) ifChanged(ctx context.Context) error {
	select {
	case <-s.p.changed:
		return s.publish(ctx, false)
	default:
		return nil
	}
}

// publish publishes the status when force is set or when it changed. A
// change is a change of what the cloud acts on: states, health, last
// actions, revision. Details (ages, counters) ride along but do not
// trigger a publish of their own; the heartbeat refreshes them.
func (s *statusPublisher) publish(ctx context.Context, force bool) error {
	msg := s.p.status("", s.l.session, time.Now())
	key := msg
	key.TS = time.Time{}
	key.Checks = &wire.ChecksSummary{Total: msg.Checks.Total, Healthy: msg.Checks.Healthy}
	for _, it := range msg.Checks.Items {
		it.Detail = ""
		key.Checks.Items = append(key.Checks.Items, it)
	}
	kb, _ := json.Marshal(key)
	if !force && bytes.Equal(kb, s.lastBody) {
		return nil
	}
	b, err := json.Marshal(msg)
	if err != nil {
		return err
	}
	if err := s.p.wait(ctx, s.l.c.Publish(s.p.StatusTopic(), 1, true, b), s.l.lost); err != nil {
		return fmt.Errorf("publishing status: %w", err)
	}
	s.lastBody = kb
	return nil
}

// How the retained history is kept fresh: its incidents are looked at
// every historyCheckEvery; a close is published at once, other changes of
// incidents at most every historyMinGap, and the seconds that passed every
// historyRefresh (a few KiB an hour is what a cellular uplink can spare).
const (
	historyCheckEvery = 2 * time.Second
	historyMinGap     = time.Minute
	historyRefresh    = time.Hour
)

// historyPublisher publishes the retained history on one connection.
type historyPublisher struct {
	p                 *Publisher
	l                 *link
	incidents, closed uint64
	at                time.Time // the last publish on this connection
}

// due says whether a history whose incidents are at the given revision
// is to be published at now.
func (h *historyPublisher) due(now time.Time, incidents, closed uint64) bool {
	since := now.Sub(h.at)
	return h.at.IsZero() || closed != h.closed || since >= historyRefresh ||
		(incidents != h.incidents && since >= historyMinGap)
}

// ifDue publishes the history when it is due: first on every connection,
// then as the constants above say.
func (h *historyPublisher) ifDue(ctx context.Context, now time.Time) error {
	src := h.p.opts.History
	if src == nil {
		return nil
	}
	incidents, closed := src.Revision()
	if !h.due(now, incidents, closed) {
		return nil
	}
	b, err := json.Marshal(src.Published(now))
	if err != nil {
		return err
	}
	if err := h.p.wait(ctx, h.l.c.Publish(h.p.HistoryTopic(), 1, true, b), h.l.lost); err != nil {
		return fmt.Errorf("publishing history: %w", err)
	}
	h.incidents, h.closed, h.at = incidents, closed, now
	return nil
}

// publishEvents publishes up to Window queued events, waits for their
// PUBACKs in order and acks in the outbox the acknowledged ones up to the
// first that was not: the rest stay queued and go again, in order, on the
// next connection (a consumer that deduplicates by id then sees every
// event in order). Each carries the session of the connection that
// publishes it, as the status of that connection does. more is true when
// the whole window went through (there may be more queued).
func (p *Publisher) publishEvents(ctx context.Context, l *link) (more bool, err error) {
	c, lost := l.c, l.lost
	items := p.opts.Outbox.Pending(p.opts.Window)
	if len(items) == 0 || ctx.Err() != nil {
		return false, nil
	}
	toks := make([]paho.Token, len(items))
	for i, it := range items {
		b, err := json.Marshal(wire.EventMessage{V: wire.Version, Node: p.opts.Node.Name, Site: p.opts.Node.Site, Session: l.session, Seq: it.Seq, Event: it.Event})
		if err != nil {
			// Cannot happen for JSON-decoded events; never let one event
			// block the queue forever.
			p.log.Error("dropping unencodable event", "event_id", it.Event.ID, "err", err)
			toks[i] = doneToken{}
			continue
		}
		toks[i] = c.Publish(p.EventTopic(), 1, false, b)
	}
	acked := 0
	for i, tok := range toks {
		if werr := p.wait(ctx, tok, lost); werr != nil {
			err = fmt.Errorf("publishing event %s: %w", items[i].Event.ID, werr)
			break
		}
		acked = i + 1
	}
	for _, it := range items[:acked] {
		if aerr := p.opts.Outbox.Ack(it.Seq); aerr != nil && err == nil {
			err = aerr
		}
	}
	return err == nil && len(items) == p.opts.Window, err
}

// doneToken is a paho.Token that is complete, without error: an event
// that is acked without being sent.
type doneToken struct{}

func (doneToken) Wait() bool                     { return true }
func (doneToken) WaitTimeout(time.Duration) bool { return true }
func (doneToken) Done() <-chan struct{}          { return closedChan }
func (doneToken) Error() error                   { return nil }

var closedChan = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

// wait waits for a token up to AckTimeout, or until ctx is done (a Stop
// must not wait for a hung broker). A lost connection fails it at
// once (paho completes in-flight tokens with an error too; this is the
// belt to that brace), and the loss is put back for the caller's select.
func (p *Publisher) wait(ctx context.Context, tok paho.Token, lost chan error) error {
	t := time.NewTimer(p.opts.AckTimeout)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return fmt.Errorf("stopping: %w", ctx.Err())
	case <-tok.Done():
		if err := tok.Error(); err != nil {
			// paho 1.5.1 (2026-12) fails a publish token only when the
			// connection is gone ("connection lost before Publish completed").
			return fmt.Errorf("%w: %w", errLost, err)
		}
		return nil
	case err := <-lost:
		select {
		case lost <- err:
		default:
		}
		return fmt.Errorf("%w: %w", errLost, err)
	case why := <-p.refresh:
		return fmt.Errorf("%w: %s", errRefresh, why)
	case <-t.C:
		return fmt.Errorf("no acknowledgement within %s", p.opts.AckTimeout)
	}
}

// goodbye publishes `offline` (retained) and disconnects cleanly, so the
// broker discards the Will.
func (p *Publisher) goodbye(c paho.Client, session uint64) {
	b, err := json.Marshal(p.status(wire.StateOffline, session, time.Now()))
	if err == nil {
		tok := c.Publish(p.StatusTopic(), 1, true, b)
		if !tok.WaitTimeout(2*time.Second) || tok.Error() != nil {
			p.log.Warn("mqtt offline status not acknowledged", "session", session, "err", tok.Error())
		}
	}
	c.Disconnect(250)
	p.log.Info("mqtt disconnected", "session", session)
}
