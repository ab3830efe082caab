package probes

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

// fakeCRI is a hand-written CRI that holds sandboxes and logs calls.
type fakeCRI struct {
	boxes   []Sandbox
	infos   map[string]SandboxInfo
	listErr error
	calls   []string
}

func (f *fakeCRI) ReadySandboxes(_ context.Context, labels map[string]string) ([]Sandbox, error) {
	f.calls = append(f.calls, fmt.Sprintf("list %v", labels))
	if f.listErr != nil {
		return nil, f.listErr
	}
	// Like containerd, the label filter is applied by the runtime.
	var out []Sandbox
	for _, b := range f.boxes {
		if hasLabels(b.Labels, labels) {
			out = append(out, b)
		}
	}
	return out, nil
}

func (f *fakeCRI) SandboxInfo(_ context.Context, id string) (SandboxInfo, error) {
	f.calls = append(f.calls, "status "+id)
	info, ok := f.infos[id]
	if !ok {
		return SandboxInfo{}, errors.New("not found")
	}
	return info, nil
}

func TestResolvePod(t *testing.T) {
	// Namespace files: any existing file will do for the policy.
	dir := t.TempDir()
	nsOld, nsNew, nsOther := filepath.Join(dir, "cni-old"), filepath.Join(dir, "cni-new"), filepath.Join(dir, "cni-other")
	for _, p := range []string{nsOld, nsNew, nsOther} {
		if err := os.WriteFile(p, nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	t0 := time.Unix(1_780_000_000, 0)
	app := map[string]string{"app": "telemetry"}
	boxes := []Sandbox{
		{ID: "old", Name: "telemetry-abc", Namespace: "factory", Labels: app, CreatedAt: t0},
		{ID: "new", Name: "telemetry-def", Namespace: "factory", Labels: app, CreatedAt: t0.Add(time.Minute)},
		{ID: "other", Name: "telemetry-xyz", Namespace: "staging", Labels: app, CreatedAt: t0.Add(2 * time.Minute)},
	}
	infos := map[string]SandboxInfo{
		"old":   {NetnsPath: nsOld, PID: 11},
		"new":   {NetnsPath: nsNew, PID: 12, DNSServers: []string{"10.43.0.10"}},
		"other": {NetnsPath: nsOther, PID: 13},
	}
	tests := []struct {
		name    string
		cri     *fakeCRI
		sel     PodSelector
		want    Target
		wantErr error // matched with errors.Is; nil with wantAny false means success
		wantAny bool  // any error
	}{
		{
			name: "labels in a namespace pick the newest ready sandbox",
			cri:  &fakeCRI{boxes: boxes, infos: infos},
			sel:  PodSelector{Namespace: "factory", Labels: app},
			want: Target{Netns: Netns{Path: nsNew, DNSServers: []string{"10.43.0.10"}}, Path: nsNew, Source: SourceCRI, Pod: "factory/telemetry-def", SandboxID: "new", PID: 12},
		},
		{
			name: "a name picks that pod",
			cri:  &fakeCRI{boxes: boxes, infos: infos},
			sel:  PodSelector{Namespace: "factory", Name: "telemetry-abc"},
			want: Target{Netns: Netns{Path: nsOld}, Path: nsOld, Source: SourceCRI, Pod: "factory/telemetry-abc", SandboxID: "old", PID: 11},
		},
		{
			name: "without a network path the sandbox pid's namespace is used",
			cri:  &fakeCRI{boxes: boxes[:1], infos: map[string]SandboxInfo{"old": {PID: os.Getpid()}}},
			sel:  PodSelector{Namespace: "factory", Labels: app},
			want: Target{Netns: Netns{Path: fmt.Sprintf("/proc/%d/ns/net", os.Getpid())}, Path: fmt.Sprintf("/proc/%d/ns/net", os.Getpid()), Source: SourceCRI, Pod: "factory/telemetry-abc", SandboxID: "old", PID: os.Getpid()},
		},
		{
			name:    "no sandbox in the namespace is no-pod",
			cri:     &fakeCRI{boxes: boxes, infos: infos},
			sel:     PodSelector{Namespace: "lab", Labels: app},
			wantErr: ErrNoPod,
		},
		{
			name:    "labels that match nothing are no-pod",
			cri:     &fakeCRI{boxes: boxes, infos: infos},
			sel:     PodSelector{Namespace: "factory", Labels: map[string]string{"app": "other"}},
			wantErr: ErrNoPod,
		},
		{
			name:    "a sandbox whose namespace is closed is no-pod",
			cri:     &fakeCRI{boxes: boxes[:1], infos: map[string]SandboxInfo{"old": {NetnsPath: nsOld, NetnsClosed: true}}},
			sel:     PodSelector{Namespace: "factory", Labels: app},
			wantErr: ErrNoPod,
		},
		{
			name:    "a namespace file that is gone is no-pod",
			cri:     &fakeCRI{boxes: boxes[:1], infos: map[string]SandboxInfo{"old": {NetnsPath: filepath.Join(dir, "gone")}}},
			sel:     PodSelector{Namespace: "factory", Labels: app},
			wantErr: ErrNoPod,
		},
		{
			name:    "a cri that cannot be reached is an error, not no-pod",
			cri:     &fakeCRI{listErr: errors.New("connection refused")},
			sel:     PodSelector{Namespace: "factory", Labels: app},
			wantAny: true,
		},
		{
			name:    "a selector without name or labels is an error",
			cri:     &fakeCRI{boxes: boxes, infos: infos},
			sel:     PodSelector{Namespace: "factory"},
			wantAny: true,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ResolvePod(context.Background(), tt.cri, tt.sel)
			switch {
			case tt.wantErr != nil:
				if !errors.Is(err, tt.wantErr) {
					t.Fatalf("error %v, want %v", err, tt.wantErr)
				}
				return
			case tt.wantAny:
				if err == nil || errors.Is(err, ErrNoPod) {
					t.Fatalf("error %v, want an error that is not no-pod", err)
				}
				return
			case err != nil:
				t.Fatalf("ResolvePod: %v (calls %v)", err, tt.cri.calls)
			}
			if got.ID == "" {
				t.Errorf("no namespace ID")
			}
			if diff := cmp.Diff(tt.want, got, cmpopts.IgnoreFields(Target{}, "ID")); diff != "" {
				t.Errorf("ResolvePod (-want +got):\n%s", diff)
			}
		})
	}
}

func TestLocatorPicksTheWay(t *testing.T) {
	dir := t.TempDir()
	nsFile := filepath.Join(dir, "ns")
	if err := os.WriteFile(nsFile, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	cri := &fakeCRI{
		boxes: []Sandbox{{ID: "a", Name: "p", Namespace: "n"}},
		infos: map[string]SandboxInfo{"a": {NetnsPath: nsFile}},
	}
	var dialed []string
	l := &Locator{Dial: func(s string) (CRI, error) { dialed = append(dialed, s); return cri, nil }}
	tests := []struct {
		name       string
		where      Where
		wantSource string
		wantErr    bool
	}{
		{"a pod selector goes through cri", Where{Pod: PodSelector{Namespace: "n", Name: "p"}, CRISocket: "/run/k3s.sock"}, SourceCRI, false},
		{"the same socket is dialed once", Where{Pod: PodSelector{Namespace: "n", Name: "p"}, CRISocket: "/run/k3s.sock"}, SourceCRI, false},
		{"an explicit path is used as is", Where{Netns: nsFile}, SourceNetns, false},
		{"a pid uses its namespace", Where{PID: os.Getpid()}, SourcePID, false},
		{"a pod selector without a socket is an error", Where{Pod: PodSelector{Namespace: "n", Name: "p"}}, "", true},
		{"a missing netns file is an error", Where{Netns: filepath.Join(dir, "missing")}, "", true},
		{"nothing is an error", Where{}, "", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := l.Locate(context.Background(), tt.where)
			if (err != nil) != tt.wantErr {
				t.Fatalf("Locate: %v, want error %v", err, tt.wantErr)
			}
			if got.Source != tt.wantSource {
				t.Errorf("source %q, want %q", got.Source, tt.wantSource)
			}
		})
	}
	if diff := cmp.Diff([]string{"/run/k3s.sock"}, dialed); diff != "" {
		t.Errorf("dialed (-want +got):\n%s", diff)
	}
}

func TestParseSandboxInfo(t *testing.T) {
	// Shape of containerd 1.6.20's verbose PodSandboxStatus info (Debian
	// 12), trimmed to the fields edgeheal reads plus neighbours.
	info := map[string]string{"info": `{
  "pid": 4242,
  "processStatus": "running",
  "netNamespaceClosed": false,
  "image": "edgeheal.local/pause:test",
  "config": {"metadata": {"name": "p", "namespace": "n"}, "dns_config": {"servers": ["10.43.0.10"], "searches": ["n.svc.cluster.local"]}},
  "runtimeSpec": {"linux": {"namespaces": [
    {"type": "pid"}, {"type": "ipc"}, {"type": "uts"}, {"type": "mount"},
    {"type": "network", "path": "/var/run/netns/cni-0b0e2c1a-5d7e-4b0c-9a57-7c3e6e0f7f11"}
  ]}}
}`}
	got, err := ParseSandboxInfo(info)
	if err != nil {
		t.Fatal(err)
	}
	want := SandboxInfo{NetnsPath: "/var/run/netns/cni-0b0e2c1a-5d7e-4b0c-9a57-7c3e6e0f7f11", PID: 4242, DNSServers: []string{"10.43.0.10"}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("ParseSandboxInfo (-want +got):\n%s", diff)
	}
	for _, bad := range []map[string]string{{}, {"info": "{"}} {
		if _, err := ParseSandboxInfo(bad); err == nil {
			t.Errorf("ParseSandboxInfo(%v): no error", bad)
		}
	}
}

func FuzzParseSandboxInfo(f *testing.F) {
	f.Add(`{"pid": 1, "runtimeSpec": {"linux": {"namespaces": [{"type": "network", "path": "/x"}]}}}`)
	f.Add(`{"config": {"dns_config": {"servers": null}}}`)
	f.Fuzz(func(t *testing.T, s string) {
		_, _ = ParseSandboxInfo(map[string]string{"info": s})
	})
}

func TestPodSelectorString(t *testing.T) {
	got := PodSelector{Namespace: "factory", Labels: map[string]string{"tier": "edge", "app": "telemetry"}}.String()
	if want := "factory/{app=telemetry,tier=edge}"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
	if !strings.HasPrefix(PodSelector{Namespace: "n", Name: "p"}.String(), "n/p") {
		t.Errorf("name selector not shown")
	}
}
