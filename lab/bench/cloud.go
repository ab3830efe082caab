package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/url"
	"sort"
	"strings"
	"sync"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"

	"github.com/edgeheal/edgeheal/lab"
	"github.com/edgeheal/edgeheal/wire"
)

// Event is an edgeheal event as the cloud received it: the payload of
// edgeheal/v1/<node>/event (package wire) and when it arrived.
type Event struct {
	wire.EventMessage
	// Received is when the cloud's subscriber got it.
	Received time.Time `json:"received"`
}

// TunnelAction reports whether the event is an action on the tunnel
// interface wg or one of its peers (targets "wg" and "wg/<key prefix>"):
// the actions a broker outage must never cause. Workload markings
// (suspect-tunnel, on the workload) and offload fixes (on the uplink) are
// not.
func (e Event) TunnelAction(wg string) bool {
	return e.Kind == "action" && (e.Target == wg || strings.HasPrefix(e.Target, wg+"/"))
}

// Status is an edgeheal status message as the cloud received it: the
// retained payload of edgeheal/v1/<node>/status (package wire), when it
// arrived and whether the broker delivered it from its retained store.
type Status struct {
	wire.Status
	Received time.Time `json:"received"`
	Retained bool      `json:"retained"`
}

// Cloud is an MQTT subscriber in the lab's cloud namespace that records
// every status and event edgeheal publishes under edgeheal/v1/#. It
// reconnects within about half a second of the broker coming back, so
// events an agent delivers from its outbox after an outage are seen.
// Events are deduplicated by id.
type Cloud struct {
	c paho.Client

	// OnEvent and OnStatus, when set before Start, are called for each new
	// event and status (from paho's goroutine: keep them short).
	OnEvent  func(Event)
	OnStatus func(Status)

	mu       sync.Mutex
	events   []Event
	seen     map[string]bool
	statuses []Status
}

// TopicFilter is what the cloud subscribes to.
const TopicFilter = "edgeheal/v1/#"

// Start connects the subscriber and waits until it is subscribed.
func (cl *Cloud) Start(ctx context.Context, l *lab.Lab) error {
	cl.seen = map[string]bool{}
	subscribed := make(chan error, 1)
	o := paho.NewClientOptions().
		AddBroker(fmt.Sprintf("tcp://127.0.0.1:%d", lab.BrokerPort)).
		SetClientID("bench-cloud-" + l.Prefix()).
		SetProtocolVersion(4).
		SetCleanSession(true).
		SetKeepAlive(2 * time.Second).
		SetPingTimeout(time.Second).
		SetConnectTimeout(time.Second).
		SetAutoReconnect(true).
		SetConnectRetry(true).
		SetConnectRetryInterval(200 * time.Millisecond).
		SetMaxReconnectInterval(300 * time.Millisecond).
		SetOrderMatters(false)
	o.SetCustomOpenConnectionFn(func(u *url.URL, opts paho.ClientOptions) (net.Conn, error) {
		return l.DialIn(lab.Cloud, u.Host, opts.ConnectTimeout)
	})
	o.SetOnConnectHandler(func(c paho.Client) {
		tok := c.Subscribe(TopicFilter, 1, cl.onMessage)
		go func() {
			tok.WaitTimeout(5 * time.Second)
			select {
			case subscribed <- tok.Error():
			default:
			}
		}()
	})
	cl.c = paho.NewClient(o)
	cl.c.Connect()
	select {
	case err := <-subscribed:
		if err != nil {
			cl.c.Disconnect(0)
			return fmt.Errorf("subscribing to %s: %w", TopicFilter, err)
		}
		return nil
	case <-time.After(10 * time.Second):
		cl.c.Disconnect(0)
		return fmt.Errorf("subscribing to %s: timed out", TopicFilter)
	case <-ctx.Done():
		cl.c.Disconnect(0)
		return ctx.Err()
	}
}

// Stop disconnects.
func (cl *Cloud) Stop() {
	if cl.c != nil {
		cl.c.Disconnect(0)
	}
}

func (cl *Cloud) onMessage(_ paho.Client, m paho.Message) {
	now := time.Now()
	switch {
	case strings.HasSuffix(m.Topic(), "/event"):
		var e Event
		if json.Unmarshal(m.Payload(), &e) != nil {
			return
		}
		e.Received = now
		cl.mu.Lock()
		dup := e.ID != "" && cl.seen[e.ID]
		if !dup {
			cl.seen[e.ID] = true
			cl.events = append(cl.events, e)
		}
		cl.mu.Unlock()
		if !dup && cl.OnEvent != nil {
			cl.OnEvent(e)
		}
	case strings.HasSuffix(m.Topic(), "/status"):
		var s Status
		if json.Unmarshal(m.Payload(), &s) != nil {
			return
		}
		s.Received, s.Retained = now, m.Retained()
		cl.mu.Lock()
		cl.statuses = append(cl.statuses, s)
		cl.mu.Unlock()
		if cl.OnStatus != nil {
			cl.OnStatus(s)
		}
	}
}

// Events returns the events received so far, ordered by their own time.
func (cl *Cloud) Events() []Event {
	cl.mu.Lock()
	out := append([]Event(nil), cl.events...)
	cl.mu.Unlock()
	sort.SliceStable(out, func(i, j int) bool { return out[i].Time.Before(out[j].Time) })
	return out
}

// Statuses returns the status messages received so far, in arrival order.
func (cl *Cloud) Statuses() []Status {
	cl.mu.Lock()
	defer cl.mu.Unlock()
	return append([]Status(nil), cl.statuses...)
}

// EventsBetween returns the events whose own time is in [from, to).
func EventsBetween(evs []Event, from, to time.Time) []Event {
	var out []Event
	for _, e := range evs {
		if !e.Time.Before(from) && (to.IsZero() || e.Time.Before(to)) {
			out = append(out, e)
		}
	}
	return out
}
