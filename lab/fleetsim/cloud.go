package fleetsim

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"

	"github.com/edgeheal/edgeheal/wire"
)

// cloud is the cloud side: one subscriber to every node's events, with a
// session the broker keeps across its restart, reconnecting every 50 ms,
// so that what is measured is the fleet's return, not its own.
type cloud struct {
	c        paho.Client
	mu       sync.Mutex
	arrivals []arrival
	notify   chan struct{}
}

// arrival is one event message as the cloud received it.
type arrival struct {
	id  string
	seq uint64
	at  time.Time
}

func subscribe(url string) (*cloud, error) {
	c := &cloud{notify: make(chan struct{}, 1)}
	o := paho.NewClientOptions().AddBroker(url).SetClientID(fmt.Sprintf("fleetsim-cloud-%d", time.Now().UnixNano())).
		SetProtocolVersion(4).SetCleanSession(false).SetAutoReconnect(true).
		SetMaxReconnectInterval(50 * time.Millisecond).SetConnectRetryInterval(50 * time.Millisecond).
		SetConnectTimeout(5 * time.Second).SetOrderMatters(true) // arrival order is measured
	handle := func(_ paho.Client, m paho.Message) {
		var e wire.EventMessage
		if json.Unmarshal(m.Payload(), &e) != nil {
			return
		}
		c.mu.Lock()
		c.arrivals = append(c.arrivals, arrival{id: e.ID, seq: e.Seq, at: time.Now()})
		c.mu.Unlock()
		select {
		case c.notify <- struct{}{}:
		default:
		}
	}
	o.SetDefaultPublishHandler(handle)
	c.c = paho.NewClient(o)
	if tok := c.c.Connect(); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		return nil, fmt.Errorf("the cloud's subscriber: %v", tok.Error())
	}
	if tok := c.c.Subscribe(wire.DefaultTopicPrefix+"/+/event", 1, handle); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		return nil, fmt.Errorf("the cloud's subscription: %v", tok.Error())
	}
	return c, nil
}

// await waits until every id in want arrived (or wait passed), then two
// quiet seconds for duplicates, and returns every arrival.
func (c *cloud) await(ctx context.Context, want map[string]string, wait time.Duration) []arrival {
	deadline := time.After(wait)
	for {
		c.mu.Lock()
		seen := map[string]bool{}
		for _, a := range c.arrivals {
			if _, ok := want[a.id]; ok {
				seen[a.id] = true
			}
		}
		c.mu.Unlock()
		if len(seen) == len(want) {
			break
		}
		select {
		case <-c.notify:
		case <-time.After(500 * time.Millisecond):
		case <-deadline:
			return c.snapshot()
		case <-ctx.Done():
			return c.snapshot()
		}
	}
	time.Sleep(2 * time.Second)
	return c.snapshot()
}

func (c *cloud) snapshot() []arrival {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]arrival(nil), c.arrivals...)
}

func (c *cloud) close() { c.c.Disconnect(100) }
