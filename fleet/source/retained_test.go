package source

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/eclipse/paho.mqtt.golang/packets"

	"github.com/edgeheal/edgeheal/broker"
	"github.com/edgeheal/edgeheal/fleet"
	"github.com/edgeheal/edgeheal/internal/testsupport/mosquitto"
)

// publishPacket is a PUBLISH as paho writes it.
func publishPacket(t *testing.T, topic string, qos byte, retain bool, payload []byte) []byte {
	t.Helper()
	p := packets.NewControlPacket(packets.Publish).(*packets.PublishPacket)
	p.TopicName, p.Qos, p.Retain, p.Payload, p.MessageID = topic, qos, retain, payload, 7
	var b bytes.Buffer
	if err := p.Write(&b); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// reader is a histories' connection that reads b.
func reader(b []byte) *retainedConn {
	return &retainedConn{conn: deadlines{}, r: bufio.NewReaderSize(bytes.NewReader(b), 64<<10), keepAlive: time.Second}
}

// deadlines is a connection of which read only sets deadlines.
type deadlines struct{ net.Conn }

func (deadlines) SetReadDeadline(time.Time) error { return nil }

func TestAPublishIsReadIntoOneBufferWithItsTopicAndRetainFlag(t *testing.T) {
	payload := bytes.Repeat([]byte("h"), 300) // a remaining length of two bytes
	h := reader(append(publishPacket(t, "edgeheal/v1/n1/history", 0, true, payload), publishPacket(t, "edgeheal/v1/n2/history", 0, false, nil)...))
	for _, want := range []fleet.Message{
		{Topic: "edgeheal/v1/n1/history", Payload: payload, Retained: true},
		{Topic: "edgeheal/v1/n2/history", Payload: []byte{}},
	} {
		first, body, unread, err := h.next()
		if err != nil || unread != 0 {
			t.Fatalf("%v, %d bytes unread", err, unread)
		}
		m, err := publish(first, *body)
		if err != nil {
			t.Fatal(err)
		}
		if m.Topic != want.Topic || !bytes.Equal(m.Payload, want.Payload) || m.Retained != want.Retained {
			t.Errorf("read %q (%d bytes, retained %v), want %q (%d bytes, retained %v)", m.Topic, len(m.Payload), m.Retained, want.Topic, len(want.Payload), want.Retained)
		}
	}
	if _, _, _, err := h.next(); err != io.EOF {
		t.Errorf("after the last packet: %v, want EOF", err)
	}
}

// A history larger than the view reads is skipped, but for its topic:
// the store names it as invalid, and the connection reads on. (Were the
// connection ended instead, the broker would hand the same retained
// history out again at the next subscribe, and for ever.)
func TestAPublishLargerThanTheViewReadsIsSkippedButForItsTopic(t *testing.T) {
	large := bytes.Repeat([]byte("h"), maxRetainedPacket+1)
	h := reader(append(publishPacket(t, "edgeheal/v1/big/history", 0, true, large), publishPacket(t, "edgeheal/v1/n2/history", 0, true, []byte("{}"))...))
	first, body, unread, err := h.next()
	if err != nil {
		t.Fatal(err)
	}
	m, err := publish(first, *body)
	if err != nil || m.Topic != "edgeheal/v1/big/history" || len(m.Payload) != 0 || unread != len(large) || cap(*body) > 16<<10 {
		t.Fatalf("the large one: %v, topic %q, %d bytes read, %d unread (want %d), a buffer of %d bytes", err, m.Topic, len(m.Payload), unread, len(large), cap(*body))
	}
	m.Unread = unread
	s := fleet.NewStore("edgeheal/v1")
	if r := s.Apply(m); r != fleet.Invalid || !strings.Contains(s.Health(time.Now()).LastError, fmt.Sprintf("big: a history of %d bytes", len(large))) {
		t.Errorf("the store: %v, %q; want invalid, naming the node and the size", r, s.Health(time.Now()).LastError)
	}
	first, body, unread, err = h.next()
	if err != nil || unread != 0 {
		t.Fatalf("the packet after: %v, %d unread", err, unread)
	}
	if m, err := publish(first, *body); err != nil || m.Topic != "edgeheal/v1/n2/history" || string(m.Payload) != "{}" {
		t.Errorf("the packet after: %v, %q %q", err, m.Topic, m.Payload)
	}
}

// What a broker says is never taken on trust: a packet that breaks MQTT,
// or one larger than the view reads but a PUBLISH, ends the connection
// with an error that says so (broker.PacketError), before anything is
// allocated for it.
func TestAPacketThatBreaksMQTTEndsTheConnection(t *testing.T) {
	for _, c := range []struct {
		name, want string
		packet     []byte
	}{
		{"a QoS above the subscription's", "QoS above", publishPacket(t, "a/b", 1, false, []byte("x"))},
		{"no topic", "without its topic", []byte{0x30, 1, 0}},
		{"a topic longer than the packet", "shorter than its topic", []byte{0x30, 4, 0, 9, 'a', 'b'}},
		{"a length of five bytes", "longer than 4 bytes", []byte{0x30, 0xff, 0xff, 0xff, 0xff, 0x01}},
		{"a SUBACK of 256 MiB", "more than the", []byte{0x90, 0xff, 0xff, 0xff, 0x7f}},
	} {
		t.Run(c.name, func(t *testing.T) {
			first, body, _, err := reader(c.packet).next()
			if err == nil {
				_, err = publish(first, *body)
			}
			var perr *broker.PacketError
			if !errors.As(err, &perr) || !strings.Contains(err.Error(), c.want) {
				t.Errorf("%x: %v, want a broker.PacketError saying %q", c.packet, err, c.want)
			}
		})
	}
	// Cut short: the connection's own error, not the broker's fault.
	if _, _, _, err := reader(publishPacket(t, "a/b", 0, false, []byte("xyz"))[:6]).next(); err != io.ErrUnexpectedEOF {
		t.Errorf("a packet cut short: %v, want io.ErrUnexpectedEOF", err)
	}
}

// histories starts a mosquitto and connects a histories' connection to
// it as id, with a keep-alive of one second.
func histories(t *testing.T, id string) (*mosquitto.Broker, *retainedConn) {
	t.Helper()
	b := mosquitto.Start(t, mosquitto.Options{})
	u, err := broker.ParseURL(b.PlainURL())
	if err != nil {
		t.Fatal(err)
	}
	r := &runner{broker: u, opts: Options{MQTT: fleet.MQTT{Broker: b.PlainURL(), TopicPrefix: "edgeheal/v1"}, DialTimeout: 3 * time.Second, KeepAlive: time.Second, Now: time.Now}}
	hc, err := r.connectRetained(id, "edgeheal/v1/+/history")
	if err != nil {
		t.Fatal(err)
	}
	return b, hc
}

// readFor runs read on hc and returns its channels: the SUBACK's verdict
// and the error it ended with. At the test's end it closes hc and waits
// up to limit for read to end.
func readFor(t *testing.T, hc *retainedConn, limit time.Duration) (subscribed chan error, ended chan error) {
	t.Helper()
	subscribed, ended = make(chan error, 1), make(chan error, 1)
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		ended <- hc.read(subscribed, func(_ fleet.Message, buf *[]byte) { buffers.Put(buf) }, time.Now)
	}()
	t.Cleanup(func() {
		hc.close()
		select {
		case <-finished:
		case <-time.After(limit):
			t.Errorf("read did not end within %s of close", limit)
		}
	})
	return subscribed, ended
}

// A quiet connection stays up: the PINGREQs keep the broker from dropping
// it after one and a half keep-alive periods, and its PINGRESPs keep the
// read's own deadline from passing.
func TestAQuietHistoriesConnectionStaysUp(t *testing.T) {
	_, hc := histories(t, "quiet-history")
	subscribed, ended := readFor(t, hc, 5*time.Second)
	if err := hc.subscribe(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-subscribed:
		if err != nil {
			t.Fatalf("subscribing: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no SUBACK within 5s")
	}
	select {
	case err := <-ended:
		t.Fatalf("the connection ended while quiet: %v", err)
	case <-time.After(4 * time.Second): // four keep-alive periods
	}
}

// A broker that stops answering (SIGSTOP: its socket stays open) ends
// the connection after one and a half keep-alive periods, with an error
// that says the connection timed out.
func TestAHistoriesConnectionToABrokerThatStopsAnsweringEnds(t *testing.T) {
	b, hc := histories(t, "wedged-history")
	_, ended := readFor(t, hc, 5*time.Second)
	b.Pause()
	defer b.Resume()
	select {
	case err := <-ended:
		var nerr net.Error
		if !errors.As(err, &nerr) || !nerr.Timeout() {
			t.Errorf("ended with %v, want a timeout", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the connection to a paused broker did not end within 10s (keep-alive 1s)")
	}
}

// read's verdicts on what else a broker sends: a refused subscription
// is the subscriber's to report; a second SUBACK, or a packet a broker
// never sends a QoS 0 subscriber, ends the connection.
func TestReadNamesARefusedSubscriptionAndEndsOnPacketsItNeverExpects(t *testing.T) {
	for _, c := range []struct {
		name       string
		packets    []byte
		subscribed string // the SUBACK's verdict: "" none, "ok", or a part of the error
		ended      string // a part of read's error
	}{
		{"one filter refused", []byte{0x90, 4, 0, subscribeID, 0, 0x80}, "the broker refused p/+/history (", "EOF"},
		{"both refused", []byte{0x90, 4, 0, subscribeID, 0x80, 0x80}, "the broker refused p/+/status and p/+/history", "EOF"},
		{"granted, then a second SUBACK", []byte{0x90, 4, 0, subscribeID, 0, 0, 0x90, 4, 0, subscribeID, 0, 0}, "ok", "answers no SUBSCRIBE"},
		{"a SUBACK for another packet id", []byte{0x90, 4, 0, 9, 0, 0}, "", "answers no SUBSCRIBE"},
		{"a SUBACK for one filter of two", []byte{0x90, 3, 0, subscribeID, 0}, "", "answers no SUBSCRIBE"},
		{"a PINGREQ", []byte{0xc0, 0}, "", "PINGREQ where a client subscribed at QoS 0 expects none"},
		{"a PUBREL", []byte{0x62, 2, 0, 1}, "", "PUBREL where"},
	} {
		t.Run(c.name, func(t *testing.T) {
			client, server := net.Pipe()
			defer server.Close()
			hc := &retainedConn{conn: client, r: bufio.NewReader(client), keepAlive: 5 * time.Second, closed: make(chan struct{}),
				topics: []string{"p/+/status", "p/+/history"}}
			subscribed, ended := readFor(t, hc, 5*time.Second)
			go func() {
				server.Write(c.packets)
				if c.ended == "EOF" {
					server.Close()
				}
			}()
			var err error
			select {
			case err = <-ended:
			case <-time.After(5 * time.Second):
				t.Fatal("read did not end within 5s")
			}
			if !strings.Contains(fmt.Sprint(err), c.ended) {
				t.Errorf("read ended with %v, want %q", err, c.ended)
			}
			verdict := ""
			select {
			case err := <-subscribed:
				verdict = "ok"
				if err != nil {
					verdict = err.Error()
				}
			default:
			}
			if !strings.Contains(verdict, c.subscribed) || (c.subscribed == "") != (verdict == "") {
				t.Errorf("the SUBACK's verdict: %q, want %q", verdict, c.subscribed)
			}
		})
	}
}

// Whatever bytes a broker sends, the reader neither panics nor takes
// more than maxRetainedPacket for a packet, and what it skips is a
// PUBLISH's payload.
func FuzzTheHistoriesReader(f *testing.F) {
	p := packets.NewControlPacket(packets.Publish).(*packets.PublishPacket)
	p.TopicName, p.Retain, p.Payload = "edgeheal/v1/n1/history", true, []byte(`{"v":1}`)
	var seed bytes.Buffer
	if err := p.Write(&seed); err != nil {
		f.Fatal(err)
	}
	f.Add(seed.Bytes())
	f.Add([]byte{0x30, 0xff, 0xff, 0xff, 0x7f, 0, 3, 'a', '/', 'b'})
	f.Add([]byte{0x90, 3, 0, 1, 0, 0xd0, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		h := reader(b)
		for range 1000 {
			first, body, unread, err := h.next()
			if err != nil {
				return
			}
			if cap(*body) > max(maxRetainedPacket, 16<<10) || unread < 0 || (unread > 0 && first>>4 != packets.Publish) {
				t.Fatalf("a packet of type %d: a buffer of %d bytes, %d unread", first>>4, cap(*body), unread)
			}
			if first>>4 == packets.Publish {
				if m, err := publish(first, *body); err == nil && len(m.Topic)+len(m.Payload)+2 != len(*body) {
					t.Fatalf("a PUBLISH of %d bytes read as a topic of %d and a payload of %d", len(*body), len(m.Topic), len(m.Payload))
				}
			}
			buffers.Put(body)
		}
	})
}
