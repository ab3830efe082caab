package mqtt

import (
	"context"
	"io"
	"net"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/edgeheal/edgeheal/agent/core"
	"github.com/edgeheal/edgeheal/agent/outbox"
	"github.com/edgeheal/edgeheal/configs"
	"github.com/edgeheal/edgeheal/internal/testsupport"
)

// hostileBroker is a TCP server on loopback speaking MQTT bytes: it reads
// the CONNECT, accepts it with a CONNACK, then sends then (and, with
// stream, zeros until the client goes: the body then announced).
func hostileBroker(t *testing.T, then []byte, stream bool) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				c.SetDeadline(time.Now().Add(30 * time.Second))
				if skipPacket(c) != nil {
					return
				}
				if _, err := c.Write(append([]byte{0x20, 2, 0, 0}, then...)); err != nil {
					return
				}
				if !stream {
					io.Copy(io.Discard, c)
					return
				}
				zeros := make([]byte, 64<<10)
				for sent := 0; sent < 256<<20; sent += len(zeros) {
					if _, err := c.Write(zeros); err != nil {
						return
					}
				}
			}()
		}
	}()
	return ln.Addr().String()
}

func skipPacket(r io.Reader) error {
	var b [1]byte
	if _, err := io.ReadFull(r, b[:]); err != nil {
		return err
	}
	n, mult := 0, 1
	for {
		if _, err := io.ReadFull(r, b[:]); err != nil {
			return err
		}
		n += int(b[0]&0x7f) * mult
		mult *= 128
		if b[0]&0x80 == 0 {
			break
		}
	}
	_, err := io.CopyN(io.Discard, r, int64(n))
	return err
}

// A reporting broker that sends a 100 MB PUBLISH (to a session that
// subscribed to nothing) had the agent allocate it. Now the connection is
// closed at the packet's fixed header, nothing is allocated for its body,
// and one incident says it is the broker's fault.
func TestPublisherRefusesAPacketOverItsLimit(t *testing.T) {
	addr := hostileBroker(t, []byte{0x30, 0x80, 0xc2, 0xd7, 0x2f}, true) // PUBLISH, 100,000,000 bytes
	stateDir := t.TempDir()
	ob, err := outbox.Open(stateDir, outbox.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer ob.Close()
	var mu sync.Mutex
	var events []core.Event
	p, err := NewPublisher(Options{
		Config: configs.ReportMQTT{Broker: "tcp://" + addr, Reconnect: configs.Reconnect{
			ProbeInterval: configs.Duration(100 * time.Millisecond), MinDelay: configs.Duration(200 * time.Millisecond),
			MaxDelay: configs.Duration(time.Second)}},
		Node: configs.Node{Name: "node-h"}, Outbox: ob, Session: OpenSession(stateDir, nil),
		DialTimeout: 2 * time.Second, AckTimeout: 2 * time.Second,
		Emit: func(e core.Event) { mu.Lock(); events = append(events, e); mu.Unlock() },
	})
	if err != nil {
		t.Fatal(err)
	}
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	stop := runPublisher(t, context.Background(), p)
	incidents := func() (n int, summary string) {
		mu.Lock()
		defer mu.Unlock()
		for _, e := range events {
			if e.Kind == "incident" && e.Target == "mqtt" && e.Result == "protocol" {
				n, summary = n+1, e.Summary
			}
		}
		return n, summary
	}
	testsupport.WaitFor(t, 10*time.Second, "an incident about the broker", func() bool { n, _ := incidents(); return n > 0 })
	// Let it reconnect (and be refused) a few more times. Between a
	// connect and its refusal the last error is cleared, so it is read
	// while the publisher waits to connect again.
	time.Sleep(2 * time.Second)
	testsupport.WaitFor(t, 10*time.Second, "a last error saying the broker broke MQTT", func() bool {
		return strings.Contains(p.Info().LastError, "the broker broke MQTT")
	})
	stop()
	runtime.ReadMemStats(&after)
	if got := after.TotalAlloc - before.TotalAlloc; got > 32<<20 {
		t.Errorf("the publisher allocated %d MiB", got>>20)
	}
	n, summary := incidents()
	if n != 1 || !strings.Contains(summary, "a PUBLISH of 100000000 bytes, more than the 4096") || !strings.Contains(summary, "the broker's fault") {
		t.Errorf("%d incidents, the last %q; want one saying the broker sent too large a PUBLISH", n, summary)
	}
}
