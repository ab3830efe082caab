package probes

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/proto"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// The hand-written wire format must be what the generated CRI types
// (k8s.io/cri-api, used here only in the test) read and write.
func TestCRIWireRequestsAreWhatTheGeneratedTypesRead(t *testing.T) {
	var list runtimeapi.ListPodSandboxRequest
	if err := proto.Unmarshal(encodeListPodSandboxRequest(map[string]string{"app": "telemetry", "tier": "edge"}), &list); err != nil {
		t.Fatal(err)
	}
	f := list.GetFilter()
	if f == nil || f.GetState() == nil || f.GetState().GetState() != runtimeapi.PodSandboxState_SANDBOX_READY {
		t.Errorf("filter %v: want state SANDBOX_READY present", f)
	}
	if diff := cmp.Diff(map[string]string{"app": "telemetry", "tier": "edge"}, f.GetLabelSelector()); diff != "" {
		t.Errorf("label selector (-want +got):\n%s", diff)
	}
	if f.GetId() != "" {
		t.Errorf("id %q, want none", f.GetId())
	}

	var st runtimeapi.PodSandboxStatusRequest
	if err := proto.Unmarshal(encodePodSandboxStatusRequest("abc123", true), &st); err != nil {
		t.Fatal(err)
	}
	if st.GetPodSandboxId() != "abc123" || !st.GetVerbose() {
		t.Errorf("status request %v, want abc123 verbose", &st)
	}
}

func TestCRIWireResponsesReadAsTheGeneratedTypesWrite(t *testing.T) {
	created := time.Date(2026, 12, 1, 10, 0, 0, 123, time.UTC)
	resp := &runtimeapi.ListPodSandboxResponse{Items: []*runtimeapi.PodSandbox{
		{Id: "ready1", Metadata: &runtimeapi.PodSandboxMetadata{Name: "telemetry-a", Uid: "u1", Namespace: "factory", Attempt: 2},
			State: runtimeapi.PodSandboxState_SANDBOX_READY, CreatedAt: created.UnixNano(),
			Labels: map[string]string{"app": "telemetry"}, Annotations: map[string]string{"a": "b"}, RuntimeHandler: "runc"},
		{Id: "gone", State: runtimeapi.PodSandboxState_SANDBOX_NOTREADY, Labels: map[string]string{"app": "telemetry"}},
		{Id: "ready2", State: runtimeapi.PodSandboxState_SANDBOX_READY},
	}}
	b, err := proto.Marshal(resp)
	if err != nil {
		t.Fatal(err)
	}
	got, err := decodeListPodSandboxResponse(b)
	if err != nil {
		t.Fatal(err)
	}
	want := []Sandbox{
		{ID: "ready1", Name: "telemetry-a", Namespace: "factory", Labels: map[string]string{"app": "telemetry"}, CreatedAt: time.Unix(0, created.UnixNano())},
		{ID: "ready2", CreatedAt: time.Unix(0, 0)},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("sandboxes (-want +got):\n%s", diff)
	}

	status := &runtimeapi.PodSandboxStatusResponse{
		Status: &runtimeapi.PodSandboxStatus{Id: "ready1", State: runtimeapi.PodSandboxState_SANDBOX_READY},
		Info:   map[string]string{"info": `{"pid": 42}`, "other": ""}, Timestamp: 7,
	}
	if b, err = proto.Marshal(status); err != nil {
		t.Fatal(err)
	}
	info, err := decodePodSandboxStatusInfo(b)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(map[string]string{"info": `{"pid": 42}`, "other": ""}, info); diff != "" {
		t.Errorf("info (-want +got):\n%s", diff)
	}
}

func TestCRIWireRefusesAMalformedMessage(t *testing.T) {
	for _, b := range [][]byte{
		{0x0a},             // field 1, bytes, no length
		{0x0a, 0x05, 0x01}, // a length past the end
		{0x80},             // a tag cut short
	} {
		if _, err := decodeListPodSandboxResponse(b); err == nil {
			t.Errorf("%x: decoded, want an error", b)
		}
		if _, err := decodePodSandboxStatusInfo(b); err == nil {
			t.Errorf("%x: status decoded, want an error", b)
		}
	}
}

func TestGRPCTimeoutHeader(t *testing.T) {
	for _, c := range []struct {
		d    time.Duration
		want string
	}{{-time.Second, "1n"}, {500 * time.Microsecond, "1m"}, {2 * time.Second, "2000m"}, {48 * time.Hour, "172800S"}} {
		if got := grpcTimeout(c.d); got != c.want {
			t.Errorf("grpcTimeout(%v) = %q, want %q", c.d, got, c.want)
		}
	}
}

func FuzzDecodeCRIResponses(f *testing.F) {
	b, _ := proto.Marshal(&runtimeapi.ListPodSandboxResponse{Items: []*runtimeapi.PodSandbox{{Id: "x", Labels: map[string]string{"a": "b"}}}})
	f.Add(b)
	f.Add([]byte{0x12, 0x03, 0x0a, 0x01, 0x61})
	f.Fuzz(func(t *testing.T, b []byte) {
		// Never a panic; an error or a result.
		_, _ = decodeListPodSandboxResponse(b)
		_, _ = decodePodSandboxStatusInfo(b)
	})
}

// A runtime that is not there is named by its socket, and the error says
// why; the HTTP URL the client speaks to it through is no help to anyone.
func TestCRIUnreachableSocketErrorNamesTheSocketNotAURL(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "containerd.sock")
	c, err := DialCRI(sock)
	if err != nil {
		t.Fatalf("DialCRI: %v", err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err = c.ReadySandboxes(ctx, map[string]string{"app": "telemetry"})
	if err == nil {
		t.Fatal("ReadySandboxes on a missing socket: no error")
	}
	msg := err.Error()
	if !strings.Contains(msg, sock) || !errors.Is(err, os.ErrNotExist) {
		t.Errorf("error %q: want the socket named and os.ErrNotExist", msg)
	}
	if strings.Contains(msg, "http://") {
		t.Errorf("error %q carries the client's HTTP URL", msg)
	}
}
