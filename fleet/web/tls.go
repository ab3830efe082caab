package web

import (
	"crypto/tls"
	"fmt"
	"os"
	"sync"
	"time"
)

// Certificate is the console's TLS certificate, read again when its
// files change (a renewal needs no restart).
type Certificate struct {
	cert, key string

	mu      sync.Mutex
	current *tls.Certificate
	stamp   string
	checked time.Time
}

// NewCertificate reads the certificate and key; an error names them.
func NewCertificate(cert, key string) (*Certificate, error) {
	c := &Certificate{cert: cert, key: key}
	if _, err := c.Get(nil); err != nil {
		return nil, err
	}
	return c, nil
}

// Get is tls.Config.GetCertificate: the pair, read again when one of the
// files changed (looked at most every 10 s); a pair that no longer reads
// keeps the last good one.
func (c *Certificate) Get(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.current != nil && time.Since(c.checked) < 10*time.Second {
		return c.current, nil
	}
	c.checked = time.Now()
	stamp := ""
	for _, f := range []string{c.cert, c.key} {
		if st, err := os.Stat(f); err == nil {
			stamp += fmt.Sprint(st.Size(), st.ModTime().UnixNano(), ";")
		}
	}
	if c.current != nil && stamp == c.stamp {
		return c.current, nil
	}
	pair, err := tls.LoadX509KeyPair(c.cert, c.key)
	if err != nil {
		if c.current != nil {
			return c.current, nil
		}
		return nil, fmt.Errorf("web.tls: reading %s and %s: %w", c.cert, c.key, err)
	}
	c.current, c.stamp = &pair, stamp
	return c.current, nil
}
