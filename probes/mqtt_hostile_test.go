package probes

import (
	"context"
	"io"
	"net"
	"runtime"
	"strings"
	"testing"
	"time"
)

// rawBroker is a TCP server on loopback that speaks MQTT bytes as a test
// tells it: it reads the CONNECT and answers with answer, then, if stream
// is set, writes zeros until the client goes (as much as the answer's
// remaining length announced, or more).
func rawBroker(t *testing.T, answer []byte, stream bool) string {
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
				c.SetDeadline(time.Now().Add(20 * time.Second))
				if readPacket(c) != nil {
					return
				}
				if _, err := c.Write(answer); err != nil || !stream {
					io.Copy(io.Discard, c)
					return
				}
				zeros := make([]byte, 64<<10)
				for sent := 0; sent < 512<<20; sent += len(zeros) {
					if _, err := c.Write(zeros); err != nil {
						return
					}
				}
			}()
		}
	}()
	return ln.Addr().String()
}

// readPacket reads one MQTT packet (the CONNECT) and discards it.
func readPacket(r io.Reader) error {
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

// A workload broker that answers CONNECT with a CONNACK announcing 256 MiB
// (and sends the zeros) got every probe a quarter of a gigabyte and an
// "ok"; one that answers with a malformed CONNACK got "ok" too. Now the
// probe closes the connection at the fixed header, allocates nothing for
// the body, and classes it "protocol": the broker's fault.
func TestMQTTProbeRefusesAHostileBroker(t *testing.T) {
	for _, tc := range []struct {
		name   string
		answer []byte
		stream bool
		want   Class
		says   string
	}{
		{"a CONNACK of 256 MiB", []byte{0x20, 0xff, 0xff, 0xff, 0x7f}, true, ClassProtocol, "a CONNACK of 268435455 bytes"},
		{"a CONNACK of 3 bytes", []byte{0x20, 3, 0, 0, 0}, false, ClassProtocol, "a CONNACK of 3 bytes"},
		{"a CONNACK with a session for a clean session", []byte{0x20, 2, 1, 0}, false, ClassProtocol, "session present"},
		{"a CONNACK with return code 9", []byte{0x20, 2, 0, 9}, false, ClassProtocol, "return code 9"},
		{"a PUBLISH before the CONNACK", []byte{0x30, 0x80, 0x80, 0x80, 0x40}, true, ClassProtocol, "its first packet is a PUBLISH"},
		{"a good CONNACK", []byte{0x20, 2, 0, 0}, false, ClassOK, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			addr := rawBroker(t, tc.answer, tc.stream)
			var before, after runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)
			r, err := MQTT(context.Background(), Netns{}, MQTTConfig{Broker: "tcp://" + addr, Timeout: 3 * time.Second})
			runtime.ReadMemStats(&after)
			if err != nil {
				t.Fatalf("MQTT: %v", err)
			}
			if r.Class != tc.want || !strings.Contains(r.Detail, tc.says) {
				t.Errorf("class %s, detail %q; want %s saying %q", r.Class, r.Detail, tc.want, tc.says)
			}
			if tc.want != ClassOK && r.OK() {
				t.Error("a hostile answer was taken as ok")
			}
			if got := after.TotalAlloc - before.TotalAlloc; got > 8<<20 {
				t.Errorf("the probe allocated %d MiB", got>>20)
			}
		})
	}
}
