package web

import (
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/bcrypt"

	"github.com/edgeheal/edgeheal/fleet"
)

// usersFile writes a users file with alice's password and prometheus's
// token.
func usersFile(t *testing.T) string {
	t.Helper()
	hash, err := bcrypt.GenerateFromPassword([]byte("s3cret"), bcrypt.MinCost)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "users")
	body := "# the console's users\nalice:" + string(hash) + "\n" + TokenLine("prometheus", "tok-123") + "\n"
	if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestTheDoorLocks(t *testing.T) {
	auth := fleet.Auth{UsersFile: usersFile(t), ProxyHeader: "X-Forwarded-Email", TrustedProxies: []string{"10.1.0.0/16"}}
	h := Handler(Options{Store: fixture(t), Now: time.Now, Auth: auth})
	for _, tt := range []struct {
		name, path string
		set        func(*http.Request)
		want       int
	}{
		{"no credentials", "/", nil, 401},
		{"no credentials for the API", "/api/v1/nodes", nil, 401},
		{"no credentials for the metrics", "/metrics", nil, 401},
		{"the health check is open", "/healthz", nil, 200},
		{"alice's password", "/", func(r *http.Request) { r.SetBasicAuth("alice", "s3cret") }, 200},
		{"a wrong password", "/", func(r *http.Request) { r.SetBasicAuth("alice", "guess") }, 401},
		{"an unknown user", "/", func(r *http.Request) { r.SetBasicAuth("mallory", "s3cret") }, 401},
		{"the token", "/metrics", func(r *http.Request) { r.Header.Set("Authorization", "Bearer tok-123") }, 200},
		{"a wrong token", "/metrics", func(r *http.Request) { r.Header.Set("Authorization", "Bearer tok-124") }, 401},
		{"the proxy's header from the proxy", "/", func(r *http.Request) {
			r.RemoteAddr = "10.1.2.3:5000"
			r.Header.Set("X-Forwarded-Email", "bob@example.net")
		}, 200},
		{"the proxy's header from elsewhere", "/", func(r *http.Request) {
			r.RemoteAddr = "192.0.2.9:5000"
			r.Header.Set("X-Forwarded-Email", "bob@example.net")
		}, 401},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r := httptest.NewRequest("GET", tt.path, nil)
			if tt.set != nil {
				tt.set(r)
			}
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, r)
			if rec.Code != tt.want {
				t.Fatalf("%s: %d, want %d", tt.path, rec.Code, tt.want)
			}
			if tt.want == 401 && (!strings.Contains(rec.Header().Get("WWW-Authenticate"), "Basic") || strings.Contains(rec.Body.String(), "p7-gw-01")) {
				t.Errorf("a refusal without a Basic challenge, or with the fleet in it: %q", rec.Body.String())
			}
		})
	}
}

func TestNoUsersFileRefusesEveryoneAndSaysWhy(t *testing.T) {
	h := Handler(Options{Store: fixture(t), Auth: fleet.Auth{UsersFile: filepath.Join(t.TempDir(), "users")}})
	code, body := get(t, h, "/")
	if code != 401 || !strings.Contains(body, "no users: add one to") {
		t.Errorf("%d %q: want 401 saying how to add a user", code, body)
	}
}

func TestAUsersFileWithMistakesNamesEachLine(t *testing.T) {
	_, err := ParseUsers("/etc/edgeheal-fleet/users", []byte("alice:plain\n\nbob\nprom:sha256:abc\nalice:sha256:"+strings.Repeat("0", 64)+"\n"))
	want := []string{"/etc/edgeheal-fleet/users: line 1: \"alice\": not a bcrypt hash", "line 3: want name:bcrypt-hash", "line 4: \"prom\": sha256: wants 64 hex digits"}
	for _, w := range want {
		if err == nil || !strings.Contains(err.Error(), w) {
			t.Errorf("error %v, want it to contain %q", err, w)
		}
	}
}

// A users file changed while the view runs is read again; one that
// became invalid keeps the users before.
func TestTheUsersFileIsReadAgain(t *testing.T) {
	path := usersFile(t)
	clock := time.Now()
	h := Handler(Options{Store: fixture(t), Now: func() time.Time { return clock }, Auth: fleet.Auth{UsersFile: path}})
	call := func(token string) int {
		r := httptest.NewRequest("GET", "/metrics", nil)
		r.Header.Set("Authorization", "Bearer "+token)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, r)
		return rec.Code
	}
	if call("tok-new") != 401 {
		t.Fatal("a token not in the file was let in")
	}
	if err := os.WriteFile(path, []byte(TokenLine("prometheus", "tok-new")+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	clock = clock.Add(3 * time.Second)
	if call("tok-new") != 200 || call("tok-123") != 401 {
		t.Error("the changed users file was not read again")
	}
	if err := os.WriteFile(path, []byte("broken line\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	clock = clock.Add(3 * time.Second)
	if call("tok-new") != 200 {
		t.Error("an invalid users file locked out the users read before")
	}
}
