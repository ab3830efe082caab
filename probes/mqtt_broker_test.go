package probes

import (
	"net"
	"os"
	"strings"
	"testing"

	"github.com/edgeheal/edgeheal/internal/testsupport/mosquitto"
	"golang.org/x/net/dns/dnsmessage"
)

// testBroker is the tests' mosquitto with one user, "probe".
type testBroker struct {
	*mosquitto.Broker
	user, passwd string // passwd: a file holding the right password
}

// startMosquitto runs mosquitto on a plain and a TLS loopback port with one
// user; it ends when the test does.
func startMosquitto(t *testing.T) *testBroker { return startMosquittoIn(t, Netns{}) }

// startMosquittoIn is startMosquitto inside ns.
func startMosquittoIn(t testing.TB, ns Netns) *testBroker {
	t.Helper()
	b := mosquitto.Start(t, mosquitto.Options{Users: map[string]string{"probe": "right-password"}, Plain: true, TLS: true, Netns: ns.Path})
	return &testBroker{Broker: b, user: "probe", passwd: b.PasswordFile(t, "probe", "right-password")}
}

// freePort returns a loopback TCP port that was free a moment ago.
func freePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

func writeFile(t testing.TB, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}

// startDNS answers A queries on a loopback UDP port from names (fully
// qualified, lower case) and NXDOMAIN for everything else, until the test
// ends. It returns its address.
func startDNS(t *testing.T, ns Netns, names map[string][4]byte) string {
	t.Helper()
	var pc net.PacketConn
	err := ns.Do(func() (err error) { pc, err = net.ListenPacket("udp", "127.0.0.1:0"); return err })
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	t.Cleanup(func() { pc.Close(); <-done })
	go func() {
		defer close(done)
		buf := make([]byte, 1500)
		for {
			n, from, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			var p dnsmessage.Parser
			h, err := p.Start(buf[:n])
			if err != nil {
				continue
			}
			q, err := p.Question()
			if err != nil {
				continue
			}
			resp := dnsmessage.Message{
				Header:    dnsmessage.Header{ID: h.ID, Response: true, Authoritative: true, RecursionDesired: h.RecursionDesired, RecursionAvailable: true},
				Questions: []dnsmessage.Question{q},
			}
			ip, ok := names[strings.ToLower(q.Name.String())]
			switch {
			case !ok:
				resp.RCode = dnsmessage.RCodeNameError
			case q.Type == dnsmessage.TypeA:
				resp.Answers = []dnsmessage.Resource{{
					Header: dnsmessage.ResourceHeader{Name: q.Name, Type: dnsmessage.TypeA, Class: dnsmessage.ClassINET, TTL: 5},
					Body:   &dnsmessage.AResource{A: ip},
				}}
			}
			out, err := resp.Pack()
			if err != nil {
				continue
			}
			_, _ = pc.WriteTo(out, from)
		}
	}()
	return pc.LocalAddr().String()
}

// silentListener accepts TCP connections and never answers, like a broker
// behind a path that drops everything after the handshake. It returns its
// address.
func silentListener(t *testing.T, ns Netns) string {
	t.Helper()
	var l net.Listener
	err := ns.Do(func() (err error) { l, err = net.Listen("tcp", "127.0.0.1:0"); return err })
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	var conns []net.Conn
	go func() {
		defer close(done)
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			conns = append(conns, c)
		}
	}()
	t.Cleanup(func() {
		l.Close()
		<-done
		for _, c := range conns {
			c.Close()
		}
	})
	return l.Addr().String()
}
