package broker

import (
	"errors"
	"io"
	"net"
	"strings"
	"testing"
)

// feed writes b to a LimitedConn over a pipe and reads it back in the
// reads paho makes (one byte for the type, one per length byte, the body
// at once), returning what was read and the error that ended it.
func feed(t *testing.T, lim PacketLimits, b []byte) (int, error) {
	t.Helper()
	client, server := net.Pipe()
	defer client.Close()
	go func() {
		server.Write(b)
		server.Close()
	}()
	lc := LimitPackets(client, lim)
	read := 0
	for {
		var h [1]byte
		if _, err := io.ReadFull(lc, h[:]); err != nil {
			return read, err
		}
		n, mult := 0, 1
		for i := 0; i < 4; i++ {
			if _, err := io.ReadFull(lc, h[:]); err != nil {
				return read, err
			}
			n += int(h[0]&0x7f) * mult
			mult *= 128
			if h[0]&0x80 == 0 {
				break
			}
		}
		body := make([]byte, n)
		if _, err := io.ReadFull(lc, body); err != nil {
			return read, err
		}
		read++
	}
}

func TestLimitPacketsRefusesWhatABrokerMustNotSend(t *testing.T) {
	lim := PacketLimits{Max: 64, CleanSession: true}
	connack := []byte{0x20, 2, 0, 0}
	for _, tc := range []struct {
		name  string
		bytes []byte
		says  string // "" : no violation
	}{
		{"a CONNACK, a PUBACK and a PINGRESP", append(append(connack, 0x40, 2, 0, 1), 0xd0, 0), ""},
		{"a refused CONNACK", []byte{0x20, 2, 0, 5}, ""},
		{"a PUBLISH within the limit", append(connack, append([]byte{0x30, 64}, make([]byte, 64)...)...), ""},
		{"a CONNACK that announces 256 MiB", []byte{0x20, 0xff, 0xff, 0xff, 0x7f}, "a CONNACK of 268435455 bytes"},
		{"a CONNACK of 3 bytes", []byte{0x20, 3, 0, 0, 0}, "a CONNACK of 3 bytes"},
		{"a CONNACK with flags in its type byte", []byte{0x21, 2, 0, 0}, "flags 0x1"},
		{"a CONNACK with reserved acknowledge flags", []byte{0x20, 2, 0x80, 0}, "reserved flags set"},
		{"a CONNACK with a session for a clean session", []byte{0x20, 2, 1, 0}, "a session present for a clean session"},
		{"a CONNACK with an undefined return code", []byte{0x20, 2, 0, 6}, "return code 6"},
		{"a first packet that is not a CONNACK", []byte{0xd0, 0}, "its first packet is a PINGRESP"},
		{"a PUBLISH over the limit", append(connack, 0x30, 65), "a PUBLISH of 65 bytes, more than the 64"},
		{"a 100 MB PUBLISH", append(connack, 0x30, 0x80, 0xc2, 0xd7, 0x2f), "a PUBLISH of 100000000 bytes"},
		{"a PUBLISH with QoS 3", append(connack, 0x36, 0), "QoS 3"},
		{"a remaining length of five bytes", append(connack, 0x30, 0xff, 0xff, 0xff, 0xff, 0x01), "more than four bytes"},
		{"a CONNECT from the broker", append(connack, 0x10, 0), "a CONNECT, which a server never sends"},
		{"a reserved type", append(connack, 0xf0, 0), "reserved type 15"},
		{"a PUBACK of 3 bytes", append(connack, 0x40, 3, 0, 1, 0), "a PUBACK of 3 bytes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := feed(t, lim, tc.bytes)
			var perr *PacketError
			switch {
			case tc.says == "" && err != io.EOF:
				t.Errorf("err = %v, want the stream read to its end", err)
			case tc.says != "" && (!errors.As(err, &perr) || !strings.Contains(err.Error(), tc.says)):
				t.Errorf("err = %v, want a PacketError saying %q", err, tc.says)
			}
		})
	}
}

// After a violation the connection is closed and every read fails.
func TestLimitPacketsClosesTheConnection(t *testing.T) {
	client, server := net.Pipe()
	defer server.Close()
	go server.Write([]byte{0x20, 0xff, 0xff, 0xff, 0x7f})
	lc := LimitPackets(client, PacketLimits{Max: 1})
	buf := make([]byte, 1)
	var err error
	for err == nil {
		_, err = lc.Read(buf)
	}
	if lc.Err() == nil || !errors.Is(err, lc.Err()) {
		t.Fatalf("Read = %v, Err = %v", err, lc.Err())
	}
	if _, err := client.Write([]byte{0}); err == nil {
		t.Error("the connection is still open")
	}
}
