package lab_test

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"strings"
	"testing"
	"time"

	mqtt "github.com/eclipse/paho.mqtt.golang"

	"github.com/edgeheal/edgeheal/internal/testsupport/labtest"
	"github.com/edgeheal/edgeheal/lab"
)

// brokerClient connects to the lab's broker from inside the cloud
// namespace; messages, subscribed to or queued for its session, go to got.
func brokerClient(t *testing.T, l *lab.Lab, id string, clean bool, got chan<- string) mqtt.Client {
	t.Helper()
	addr := l.BrokerPublicAddr().String()
	opts := mqtt.NewClientOptions().AddBroker("tcp://" + addr).SetClientID(id).SetCleanSession(clean).
		SetProtocolVersion(4).SetConnectTimeout(3 * time.Second).SetAutoReconnect(false).
		SetDefaultPublishHandler(func(_ mqtt.Client, m mqtt.Message) { got <- string(m.Payload()) })
	opts.SetCustomOpenConnectionFn(func(_ *url.URL, _ mqtt.ClientOptions) (net.Conn, error) {
		return l.DialIn(lab.Cloud, addr, 3*time.Second)
	})
	c := mqtt.NewClient(opts)
	if tok := c.Connect(); !tok.WaitTimeout(5*time.Second) || tok.Error() != nil {
		t.Fatalf("%s: connect: %v", id, tok.Error())
	}
	return c
}

// Across a restart of the broker, a persistent session keeps its
// subscription with BrokerPersistence, and what is published before the
// subscriber is back waits for it; without, the restarted broker has
// forgotten it.
func TestLabBrokerPersistenceKeepsASessionAcrossARestart(t *testing.T) {
	for _, persist := range []bool{true, false} {
		t.Run(fmt.Sprintf("persistence=%v", persist), func(t *testing.T) {
			l := labtest.New(t, lab.Options{Broker: lab.BrokerMosquitto, BrokerPersistence: persist, NoTelemetry: true, OffloadOff: true})
			got := make(chan string, 10)
			sub := brokerClient(t, l, "sub-"+l.Prefix(), false, got)
			if tok := sub.Subscribe("lab/#", 1, nil); !tok.WaitTimeout(5*time.Second) || tok.Error() != nil {
				t.Fatalf("subscribe: %v", tok.Error())
			}
			sub.Disconnect(100)
			if err := l.StopBroker(); err != nil {
				t.Fatal(err)
			}
			if err := l.StartBroker(); err != nil {
				t.Fatal(err)
			}
			pub := brokerClient(t, l, "pub-"+l.Prefix(), true, make(chan string))
			if tok := pub.Publish("lab/x", 1, false, "while away"); !tok.WaitTimeout(5*time.Second) || tok.Error() != nil {
				t.Fatalf("publish: %v", tok.Error())
			}
			pub.Disconnect(100)
			sub = brokerClient(t, l, "sub-"+l.Prefix(), false, got)
			defer sub.Disconnect(100)
			select {
			case m := <-got:
				if !persist || m != "while away" {
					t.Errorf("the subscriber got %q (persistence %v); want %q only with persistence", m, persist, "while away")
				}
			case <-time.After(3 * time.Second):
				if persist {
					t.Error("the subscriber got nothing within 3 s of its return; want what was published while it was away")
				}
			}
		})
	}
}

func TestBrokerPersistenceIsForMosquittoOnly(t *testing.T) {
	l, err := lab.Start(context.Background(), lab.Options{BrokerPersistence: true})
	if err == nil {
		l.Close()
	}
	if err == nil || !strings.Contains(err.Error(), "only with") {
		t.Fatalf("Start with the embedded broker and persistence = %v; want a refusal", err)
	}
}
