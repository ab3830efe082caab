package lab

import (
	"context"
	"encoding/binary"
	"fmt"
	"net"
	"net/url"
	"sync"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"
)

// telemetry is the pod's publisher and the cloud's subscriber. Both ends
// live in this process, so sent and received are matched exactly.
type telemetry struct {
	lateAfter time.Duration

	mu   sync.Mutex
	sent []time.Time // by sequence number
	recv []time.Time // arrival by sequence number; zero: not (yet) received

	pub, sub paho.Client
	stopc    chan struct{}
	wg       sync.WaitGroup
}

// startTelemetry connects the cloud's subscriber (waiting until it is
// subscribed) and starts the pod's publisher, which sends rate messages a
// second whether or not it is connected (a message sent while disconnected
// is lost, as a real workload's reading would be).
func startTelemetry(ctx context.Context, l *Lab, rate int, lateAfter time.Duration) (*telemetry, error) {
	t := &telemetry{lateAfter: lateAfter, stopc: make(chan struct{})}

	subscribed := make(chan error, 1)
	so := clientOptions("tcp://127.0.0.1:1883", "lab-cloud-"+l.prefix, func(u *url.URL, o paho.ClientOptions) (net.Conn, error) {
		return l.DialIn(Cloud, u.Host, o.ConnectTimeout)
	})
	so.SetOnConnectHandler(func(c paho.Client) {
		tok := c.Subscribe(TelemetryTopic, 0, t.onMessage)
		go func() {
			tok.WaitTimeout(5 * time.Second)
			select {
			case subscribed <- tok.Error():
			default:
			}
		}()
	})
	t.sub = paho.NewClient(so)
	t.sub.Connect()
	select {
	case err := <-subscribed:
		if err != nil {
			t.sub.Disconnect(0)
			return nil, fmt.Errorf("subscribing to telemetry: %w", err)
		}
	case <-time.After(10 * time.Second):
		t.sub.Disconnect(0)
		return nil, fmt.Errorf("subscribing to telemetry: timed out")
	case <-ctx.Done():
		t.sub.Disconnect(0)
		return nil, ctx.Err()
	}

	broker := "tcp://" + l.BrokerTunnelAddr().String()
	po := clientOptions(broker, "lab-pod-"+l.prefix, func(u *url.URL, o paho.ClientOptions) (net.Conn, error) {
		return l.DialIn(Pod, u.Host, o.ConnectTimeout)
	})
	t.pub = paho.NewClient(po)
	t.pub.Connect() // retries in the background until the tunnel carries it

	t.wg.Add(1)
	go t.publish(rate)
	return t, nil
}

// clientOptions are tuned to notice a dead path and reconnect within about
// a second, so that telemetry outages measure the network, not the client's
// backoff.
func clientOptions(broker, id string, dial paho.OpenConnectionFunc) *paho.ClientOptions {
	o := paho.NewClientOptions().
		AddBroker(broker).
		SetClientID(id).
		SetProtocolVersion(4).
		SetCleanSession(true).
		SetKeepAlive(2 * time.Second).
		SetPingTimeout(time.Second).
		// A connect attempt over a dark tunnel waits its whole timeout,
		// then the next one its retry interval: the cycle (0.35 s) is the
		// telemetry's own floor on a recovery, so it is kept well under
		// the tunnel's (docs/lab.md, "Telemetry"). In the lab a connect
		// that works takes milliseconds.
		SetConnectTimeout(250 * time.Millisecond).
		SetWriteTimeout(100 * time.Millisecond).
		SetAutoReconnect(true).
		SetConnectRetry(true).
		SetConnectRetryInterval(100 * time.Millisecond).
		SetMaxReconnectInterval(100 * time.Millisecond).
		SetOrderMatters(false)
	o.SetCustomOpenConnectionFn(dial)
	return o
}

// publish records one message per tick, at a steady rate whatever the
// network does, and hands it to send. A message the client cannot take at
// once (not connected, or still blocked on the previous one) is lost, as
// a sensor reading would be.
func (t *telemetry) publish(rate int) {
	defer t.wg.Done()
	out := make(chan []byte, 1)
	t.wg.Add(1)
	go t.send(out)
	defer close(out)
	tick := time.NewTicker(time.Second / time.Duration(rate))
	defer tick.Stop()
	for {
		select {
		case <-t.stopc:
			return
		case now := <-tick.C:
			t.mu.Lock()
			seq := uint64(len(t.sent))
			t.sent = append(t.sent, now)
			t.recv = append(t.recv, time.Time{})
			t.mu.Unlock()
			if !t.pub.IsConnectionOpen() {
				continue
			}
			buf := make([]byte, 16)
			binary.BigEndian.PutUint64(buf[:8], seq)
			binary.BigEndian.PutUint64(buf[8:], uint64(now.UnixNano()))
			select {
			case out <- buf:
			default:
			}
		}
	}
}

// send publishes what publish hands it; Publish blocks up to the client's
// write timeout while the connection is stuck.
func (t *telemetry) send(in <-chan []byte) {
	defer t.wg.Done()
	for p := range in {
		t.pub.Publish(TelemetryTopic, 0, false, p)
	}
}

func (t *telemetry) onMessage(_ paho.Client, m paho.Message) {
	now := time.Now()
	p := m.Payload()
	if len(p) != 16 {
		return
	}
	seq := binary.BigEndian.Uint64(p[:8])
	t.mu.Lock()
	defer t.mu.Unlock()
	if seq < uint64(len(t.recv)) && t.recv[seq].IsZero() {
		t.recv[seq] = now
	}
}

// stop ends the publisher and disconnects both clients.
func (t *telemetry) stop() {
	if t == nil {
		return
	}
	close(t.stopc)
	t.wg.Wait()
	t.pub.Disconnect(0)
	t.sub.Disconnect(0)
}

func (t *telemetry) stats(from time.Time) Stats {
	t.mu.Lock()
	defer t.mu.Unlock()
	return computeStats(t.sent, t.recv, time.Now(), t.lateAfter, from)
}

// Stats is what the cloud received of the pod's telemetry.
type Stats struct {
	Sent     int `json:"sent"`     // messages the pod published (or tried to)
	Received int `json:"received"` // delivered within LateAfter
	Late     int `json:"late"`     // delivered, but later than LateAfter: counted lost
	Pending  int `json:"pending"`  // sent less than LateAfter ago, not yet received
	// LossPct is lost / (sent - pending) in percent.
	LossPct float64  `json:"loss_pct"`
	Outages []Outage `json:"outages,omitempty"`
	// FirstLost is when the first lost message was sent; FirstRecovered is
	// when the first message after it arrived. Zero when none.
	FirstLost      time.Time `json:"first_lost,omitzero"`
	FirstRecovered time.Time `json:"first_recovered,omitzero"`
}

// Outage is a run of consecutive lost messages: from the send time of the
// first lost to the arrival of the next delivered one (zero End: ongoing).
type Outage struct {
	Start time.Time `json:"start"`
	End   time.Time `json:"end,omitzero"`
	Lost  int       `json:"lost"`
}

// Duration is End - Start, or 0 while the outage is ongoing.
func (o Outage) Duration() time.Duration {
	if o.End.IsZero() {
		return 0
	}
	return o.End.Sub(o.Start)
}

// computeStats judges every message sent at or after from. A message is
// delivered if it arrived within lateAfter of being sent; it is pending if
// it has not arrived and was sent less than lateAfter before now; otherwise
// it is lost. Pending messages neither open nor close an outage.
func computeStats(sent, recv []time.Time, now time.Time, lateAfter time.Duration, from time.Time) Stats {
	var (
		s   Stats
		cur *Outage
	)
	for i, st := range sent {
		if st.Before(from) {
			continue
		}
		s.Sent++
		rt := recv[i]
		switch {
		case !rt.IsZero() && rt.Sub(st) <= lateAfter:
			s.Received++
			if cur != nil {
				cur.End = rt
				s.Outages = append(s.Outages, *cur)
				cur = nil
			}
			continue
		case rt.IsZero() && now.Sub(st) < lateAfter:
			s.Pending++
			continue
		case !rt.IsZero():
			s.Late++
		}
		if cur == nil {
			cur = &Outage{Start: st}
		}
		cur.Lost++
	}
	if cur != nil {
		s.Outages = append(s.Outages, *cur)
	}
	if judged := s.Sent - s.Pending; judged > 0 {
		s.LossPct = float64(judged-s.Received) * 100 / float64(judged)
	}
	if len(s.Outages) > 0 {
		s.FirstLost = s.Outages[0].Start
		s.FirstRecovered = s.Outages[0].End
	}
	return s
}

// Stats is the telemetry since the lab started. Without telemetry it is
// the zero Stats.
func (l *Lab) Stats() Stats { return l.StatsSince(time.Time{}) }

// StatsSince is the telemetry of messages sent at or after from.
func (l *Lab) StatsSince(from time.Time) Stats {
	l.mu.Lock()
	t := l.tel
	l.mu.Unlock()
	if t == nil {
		return Stats{}
	}
	return t.stats(from)
}
