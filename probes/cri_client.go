package probes

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"time"
)

// CRIClient is a client of the CRI runtime service (k8s.io/cri-api,
// runtime.v1) over its unix socket, for the two unary calls that pod
// resolution makes. It speaks gRPC itself, HTTP/2 without TLS through
// net/http and protobuf through protowire (cri_wire.go), instead of
// linking grpc-go and the generated CRI package: those were 2.9 MB of an
// 18.8 MB binary and 3 MiB of the daemon's RSS (docs/performance.md,
// "RSS").
type CRIClient struct {
	socket string
	hc     *http.Client
	tr     *http.Transport
}

var _ CRI = (*CRIClient)(nil)

// criDialTimeout bounds the connect to the socket; the call itself is
// bounded by the caller's context.
const criDialTimeout = 2 * time.Second

// criMaxMessage is the largest response accepted (containerd's own default
// limit for a message it sends is 16 MiB).
const criMaxMessage = 16 << 20

// DialCRI makes a client for the CRI socket (K3s:
// /run/k3s/containerd/containerd.sock). It does not connect yet: each call
// connects if no connection is open, so a restarting containerd is picked
// up at the next call.
func DialCRI(socket string) (*CRIClient, error) {
	if socket == "" {
		return nil, errors.New("CRI socket path is empty")
	}
	var protos http.Protocols
	protos.SetUnencryptedHTTP2(true) // gRPC's prior-knowledge HTTP/2, no TLS on a unix socket
	d := net.Dialer{Timeout: criDialTimeout}
	tr := &http.Transport{
		Protocols:       &protos,
		DialContext:     func(ctx context.Context, _, _ string) (net.Conn, error) { return d.DialContext(ctx, "unix", socket) },
		IdleConnTimeout: time.Minute,
	}
	return &CRIClient{socket: socket, tr: tr, hc: &http.Client{Transport: tr}}, nil
}

// Close closes the idle connections.
func (c *CRIClient) Close() error {
	c.tr.CloseIdleConnections()
	return nil
}

// ReadySandboxes implements CRI.
func (c *CRIClient) ReadySandboxes(ctx context.Context, labels map[string]string) ([]Sandbox, error) {
	resp, err := c.call(ctx, "ListPodSandbox", encodeListPodSandboxRequest(labels))
	if err != nil {
		return nil, err
	}
	return decodeListPodSandboxResponse(resp)
}

// SandboxInfo implements CRI.
func (c *CRIClient) SandboxInfo(ctx context.Context, id string) (SandboxInfo, error) {
	resp, err := c.call(ctx, "PodSandboxStatus", encodePodSandboxStatusRequest(id, true))
	if err != nil {
		return SandboxInfo{}, err
	}
	info, err := decodePodSandboxStatusInfo(resp)
	if err != nil {
		return SandboxInfo{}, err
	}
	return ParseSandboxInfo(info)
}

// CRIStatusError is a call that the runtime answered with a gRPC status
// other than OK.
type CRIStatusError struct {
	Method  string
	Code    int // gRPC status code (5 NotFound, 12 Unimplemented, 14 Unavailable, ...)
	Message string
}

func (e *CRIStatusError) Error() string {
	return fmt.Sprintf("CRI %s: status %d: %s", e.Method, e.Code, e.Message)
}

// call makes one unary gRPC call of runtime.v1.RuntimeService and returns
// the response message.
func (c *CRIClient) call(ctx context.Context, method string, msg []byte) ([]byte, error) {
	body := make([]byte, 5, 5+len(msg)) // uncompressed flag, then the length, big-endian
	binary.BigEndian.PutUint32(body[1:], uint32(len(msg)))
	body = append(body, msg...)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://localhost/runtime.v1.RuntimeService/"+method, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/grpc")
	req.Header.Set("Te", "trailers")
	if d, ok := ctx.Deadline(); ok {
		req.Header.Set("Grpc-Timeout", grpcTimeout(time.Until(d)))
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		// The request's URL is an artefact of speaking HTTP/2 over a
		// Unix socket: the operator knows the socket, not the URL.
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return nil, fmt.Errorf("CRI %s on %s: %w", method, c.socket, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("CRI %s on %s: HTTP status %s", method, c.socket, resp.Status)
	}
	// A status in the headers ("Trailers-Only") is an answer without a body.
	if st := resp.Header.Get("Grpc-Status"); st != "" && st != "0" {
		return nil, statusError(method, st, resp.Header.Get("Grpc-Message"))
	}
	data, err := readGRPCMessage(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("CRI %s on %s: %w", method, c.socket, err)
	}
	if _, err := io.Copy(io.Discard, io.LimitReader(resp.Body, criMaxMessage)); err != nil { // trailers follow the body
		return nil, fmt.Errorf("CRI %s on %s: %w", method, c.socket, err)
	}
	st := resp.Trailer.Get("Grpc-Status")
	if st == "" {
		st = resp.Header.Get("Grpc-Status")
	}
	if st != "0" {
		if st == "" {
			return nil, fmt.Errorf("CRI %s on %s: the answer has no gRPC status", method, c.socket)
		}
		return nil, statusError(method, st, resp.Trailer.Get("Grpc-Message"))
	}
	if data == nil {
		return nil, fmt.Errorf("CRI %s on %s: the answer has no message", method, c.socket)
	}
	return data, nil
}

// readGRPCMessage reads one length-prefixed message; nil at a clean end.
func readGRPCMessage(r io.Reader) ([]byte, error) {
	var hdr [5]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, nil
		}
		return nil, fmt.Errorf("reading the message header: %w", err)
	}
	if hdr[0] != 0 {
		return nil, errors.New("the message is compressed; no compression was offered")
	}
	n := binary.BigEndian.Uint32(hdr[1:])
	if n > criMaxMessage {
		return nil, fmt.Errorf("message of %d bytes, over the %d accepted", n, criMaxMessage)
	}
	data := make([]byte, n)
	if _, err := io.ReadFull(r, data); err != nil {
		return nil, fmt.Errorf("reading a message of %d bytes: %w", n, err)
	}
	return data, nil
}

// statusError makes a CRIStatusError from the grpc-status and the
// percent-encoded grpc-message.
func statusError(method, status, message string) error {
	code, err := strconv.Atoi(status)
	if err != nil {
		code = 2 // Unknown
	}
	if m, err := url.PathUnescape(message); err == nil {
		message = m
	}
	return &CRIStatusError{Method: method, Code: code, Message: message}
}

// grpcTimeout formats a remaining time as gRPC's timeout header: at most
// eight digits and a unit.
func grpcTimeout(d time.Duration) string {
	if d <= 0 {
		return "1n"
	}
	if ms := d.Milliseconds(); ms < 1e8 {
		return strconv.FormatInt(max(ms, 1), 10) + "m"
	}
	return strconv.FormatInt(min(int64(d.Seconds()), 1e8-1), 10) + "S"
}
