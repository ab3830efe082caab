package web

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/edgeheal/edgeheal/fleet"
	"github.com/edgeheal/edgeheal/wire"
)

// writePair writes a self-signed certificate for 127.0.0.1 named cn.
func writePair(t *testing.T, dir, cn string) (certFile, keyFile string, cert *x509.Certificate) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: cn},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kb, _ := x509.MarshalECPrivateKey(key)
	certFile, keyFile = filepath.Join(dir, "web.pem"), filepath.Join(dir, "web-key.pem")
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}), 0o600); err != nil {
		t.Fatal(err)
	}
	c, _ := x509.ParseCertificate(der)
	return certFile, keyFile, c
}

// The console over HTTPS with the operator's certificate, read again
// when it is renewed; a pair that does not read is an error naming it.
func TestTheConsoleOverTLS(t *testing.T) {
	dir := t.TempDir()
	certFile, keyFile, first := writePair(t, dir, "fleet-1")
	certs, err := NewCertificate(certFile, keyFile)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(open(fixture(t)))
	srv.Listener = tls.NewListener(srv.Listener, &tls.Config{GetCertificate: certs.Get}) // as edgeheal-fleet serves it
	srv.Start()
	defer srv.Close()
	srv.URL = strings.Replace(srv.URL, "http://", "https://", 1)
	served := func(want *x509.Certificate) {
		t.Helper()
		pool := x509.NewCertPool()
		pool.AddCert(want)
		c := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
		resp, err := c.Get(srv.URL + "/api/v1/nodes")
		if err != nil {
			t.Fatalf("HTTPS with %s's certificate: %v", want.Subject.CommonName, err)
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("HTTPS: %d", resp.StatusCode)
		}
	}
	served(first)
	_, _, renewed := writePair(t, dir, "fleet-1-renewed")
	certs.checked = time.Time{} // as if 10 s had passed
	served(renewed)
	if _, err := NewCertificate(filepath.Join(dir, "none.pem"), keyFile); err == nil || !strings.Contains(err.Error(), "none.pem") {
		t.Errorf("a missing certificate: %v, want an error naming it", err)
	}
}

// A node that opens a thousand incidents has a node page of a bounded
// size (it keeps 32 and counts the rest).
func TestANodesPageIsBounded(t *testing.T) {
	s := fleet.NewStore("edgeheal/v1")
	for i := range 1000 {
		apply(t, s, "n1", "event", now, wire.EventMessage{V: 1, Event: wire.Event{ID: strings.Repeat("i", 10) + string(rune('a'+i%26)) + strings.Repeat("x", i%40) + string(rune(i)),
			Time: now, Kind: "incident", Target: "wg0/" + strings.Repeat("k", 100) + string(rune(i+100)), Summary: strings.Repeat("s", 2000)}})
	}
	_, page := get(t, open(s), "/node/n1")
	if len(page) > 100_000 || !strings.Contains(page, "968 more the view did not keep") {
		t.Errorf("the node page of 1,000 incidents: %d bytes (want at most 100 KB) saying how many were not kept", len(page))
	}
}
