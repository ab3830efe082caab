package probes

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"os"
	"syscall"
	"testing"
)

func TestClassify(t *testing.T) {
	opErr := func(err error) error {
		return &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", err)}
	}
	tests := []struct {
		name string
		err  error
		want Class
	}{
		{"no error is ok", nil, ClassOK},
		{"no pod is no-pod", fmt.Errorf("resolving: %w", ErrNoPod), ClassNoPod},
		{"a name error is dns", &net.DNSError{Err: "no such host", Name: "x", IsNotFound: true}, ClassDNS},
		{"a dns timeout is still dns", &net.DNSError{Err: "i/o timeout", Name: "x", IsTimeout: true}, ClassDNS},
		{"connack code 5 is auth", &authError{code: 5}, ClassAuth},
		{"a reset to syn is refused", opErr(syscall.ECONNREFUSED), ClassRefused},
		{"host unreachable is no-route", opErr(syscall.EHOSTUNREACH), ClassNoRoute},
		{"network unreachable is no-route", opErr(syscall.ENETUNREACH), ClassNoRoute},
		{"a dial deadline is timeout", opErr(os.ErrDeadlineExceeded), ClassTimeout},
		{"a context deadline is timeout", fmt.Errorf("dial: %w", context.DeadlineExceeded), ClassTimeout},
		{"a kernel timeout is timeout", opErr(syscall.ETIMEDOUT), ClassTimeout},
		{"a timeout during the tls handshake is timeout", &tlsError{err: opErr(os.ErrDeadlineExceeded)}, ClassTimeout},
		{"an unknown authority is tls", &tlsError{err: x509.UnknownAuthorityError{}}, ClassTLS},
		{"a bare certificate error is tls", fmt.Errorf("x: %w", x509.HostnameError{Host: "h", Certificate: &x509.Certificate{}}), ClassTLS},
		{"a reset is failed", opErr(syscall.ECONNRESET), ClassFailed},
		{"anything else is failed", errors.New("eof"), ClassFailed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Classify(tt.err); got != tt.want {
				t.Errorf("Classify(%v) = %q, want %q", tt.err, got, tt.want)
			}
		})
	}
}
