package web

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"strings"
	"sync"
	"time"

	"golang.org/x/crypto/bcrypt"

	"github.com/edgeheal/edgeheal/fleet"
)

// Users are the console's users, from the users file: each line is
// name:secret, where the secret is a bcrypt hash of a password (as
// `htpasswd -nB name` or `edgeheal-fleet user password name` makes it;
// HTTP basic authentication) or sha256:<hex> of a bearer token (as
// `edgeheal-fleet user token name` makes it; Authorization: Bearer).
type Users struct {
	passwords map[string][]byte // name → bcrypt hash
	tokens    map[string]string // hex SHA-256 of the token → name
}

// maxUsersFile bounds the users file.
const maxUsersFile = 1 << 20

// LoadUsers reads a users file. A file that does not exist is no users
// (every request is refused); one that cannot be read or has a bad line
// is an error naming the file, the line and why.
func LoadUsers(path string) (*Users, error) {
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return &Users{passwords: map[string][]byte{}, tokens: map[string]string{}}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading the users file: %w", err)
	}
	defer f.Close()
	if st, err := f.Stat(); err != nil || !st.Mode().IsRegular() {
		return nil, fmt.Errorf("%s: not a regular file", path)
	}
	data, err := io.ReadAll(io.LimitReader(f, maxUsersFile+1))
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", path, err)
	}
	if len(data) > maxUsersFile {
		return nil, fmt.Errorf("%s: larger than %d bytes", path, maxUsersFile)
	}
	return ParseUsers(path, data)
}

// ParseUsers parses a users file's bytes; name is used in errors.
func ParseUsers(name string, data []byte) (*Users, error) {
	u := &Users{passwords: map[string][]byte{}, tokens: map[string]string{}}
	var problems []error
	sc := bufio.NewScanner(bytes.NewReader(data))
	for line := 1; sc.Scan(); line++ {
		text := strings.TrimSpace(sc.Text())
		if text == "" || strings.HasPrefix(text, "#") {
			continue
		}
		if err := u.add(text); err != nil {
			problems = append(problems, fmt.Errorf("%s: line %d: %w", name, line, err))
		}
	}
	if err := errors.Join(problems...); err != nil {
		return nil, err
	}
	return u, nil
}

func (u *Users) add(line string) error {
	user, secret, ok := strings.Cut(line, ":")
	if !ok || user == "" || strings.ContainsAny(user, " \t") {
		return errors.New("want name:bcrypt-hash or name:sha256:<64 hex digits>")
	}
	if _, ok := u.passwords[user]; ok {
		return fmt.Errorf("%q: named twice", user)
	}
	if hexHash, ok := strings.CutPrefix(secret, "sha256:"); ok {
		if b, err := hex.DecodeString(hexHash); err != nil || len(b) != sha256.Size {
			return fmt.Errorf("%q: sha256: wants 64 hex digits", user)
		}
		u.tokens[strings.ToLower(hexHash)] = user
		return nil
	}
	if _, err := bcrypt.Cost([]byte(secret)); err != nil {
		return fmt.Errorf("%q: not a bcrypt hash ($2a$, $2b$ or $2y$) nor sha256:<hex>: %v", user, err)
	}
	u.passwords[user] = []byte(secret)
	return nil
}

// Len is how many users and tokens there are.
func (u *Users) Len() int { return len(u.passwords) + len(u.tokens) }

// TokenLine is the users file's line for a bearer token.
func TokenLine(name, token string) string {
	sum := sha256.Sum256([]byte(token))
	return name + ":sha256:" + hex.EncodeToString(sum[:])
}

// guard is the door: it lets a request through when it is authenticated
// and answers 401 otherwise.
type guard struct {
	auth    fleet.Auth
	proxies []netip.Prefix
	log     *slog.Logger

	mu       sync.Mutex
	users    *Users
	loaded   time.Time // when the file was last looked at
	stamp    string    // its size and modification time then
	verified map[[32]byte]time.Time
	bcrypts  chan struct{} // bounds the bcrypt comparisons running at once
}

const (
	usersRecheck = 2 * time.Second  // how often the users file is looked at
	verifiedFor  = 10 * time.Minute // how long a checked password is believed
	maxVerified  = 4096
)

func newGuard(a fleet.Auth, log *slog.Logger) *guard {
	g := &guard{auth: a, log: log, verified: map[[32]byte]time.Time{}, bcrypts: make(chan struct{}, 2)}
	for _, p := range a.TrustedProxies {
		if pre, err := netip.ParsePrefix(p); err == nil {
			g.proxies = append(g.proxies, pre)
		} else if addr, err := netip.ParseAddr(p); err == nil {
			g.proxies = append(g.proxies, netip.PrefixFrom(addr, addr.BitLen()))
		}
	}
	return g
}

// currentUsers re-reads the users file when it changed; a file that
// became invalid keeps the last good users and is logged.
func (g *guard) currentUsers(now time.Time) *Users {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.users != nil && now.Sub(g.loaded) < usersRecheck {
		return g.users
	}
	g.loaded = now
	stamp := "missing"
	if st, err := os.Stat(g.auth.UsersFile); err == nil {
		stamp = fmt.Sprint(st.Size(), st.ModTime().UnixNano())
	}
	if g.users != nil && stamp == g.stamp {
		return g.users
	}
	u, err := LoadUsers(g.auth.UsersFile)
	if err != nil {
		g.log.Error("the users file is not valid: keeping the users read before", "err", err)
		if g.users == nil {
			g.users = &Users{}
		}
		return g.users
	}
	g.users, g.stamp, g.verified = u, stamp, map[[32]byte]time.Time{}
	g.log.Info("users read", "file", g.auth.UsersFile, "users", u.Len())
	return u
}

// who is the authenticated user of r, or "" and why not.
func (g *guard) who(r *http.Request, now time.Time) (string, string) {
	if g.auth.ProxyHeader != "" {
		if user := r.Header.Get(g.auth.ProxyHeader); user != "" && g.fromProxy(r) {
			return user, ""
		}
	}
	u := g.currentUsers(now)
	if u.Len() == 0 {
		return "", "no users: add one to " + g.auth.UsersFile + " (edgeheal-fleet user --help)"
	}
	if h := r.Header.Get("Authorization"); strings.HasPrefix(h, "Bearer ") {
		sum := sha256.Sum256([]byte(strings.TrimPrefix(h, "Bearer ")))
		if name, ok := u.tokens[hex.EncodeToString(sum[:])]; ok {
			return name, ""
		}
		return "", "unknown token"
	}
	name, password, ok := r.BasicAuth()
	if !ok {
		return "", "authentication needed"
	}
	if g.checkPassword(u, name, password, now) {
		return name, ""
	}
	return "", "wrong user or password"
}

func (g *guard) fromProxy(r *http.Request) bool {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return false
	}
	addr, err := netip.ParseAddr(host)
	if err != nil {
		return false
	}
	for _, p := range g.proxies {
		if p.Contains(addr.Unmap()) {
			return true
		}
	}
	return false
}

// checkPassword compares with bcrypt, at most two at a time, and believes
// a password it checked for verifiedFor: a browser sends it with every
// request, and a bcrypt comparison costs tens of milliseconds.
func (g *guard) checkPassword(u *Users, name, password string, now time.Time) bool {
	hash, ok := u.passwords[name]
	key := sha256.Sum256([]byte(name + "\x00" + password + "\x00" + string(hash)))
	g.mu.Lock()
	until, seen := g.verified[key]
	g.mu.Unlock()
	if seen && now.Before(until) {
		return true
	}
	if !ok {
		hash = dummyHash() // as slow for an unknown user as for a known one
	}
	g.bcrypts <- struct{}{}
	err := bcrypt.CompareHashAndPassword(hash, []byte(password))
	<-g.bcrypts
	if err != nil || !ok {
		return false
	}
	g.mu.Lock()
	if len(g.verified) >= maxVerified {
		clear(g.verified)
	}
	g.verified[key] = now.Add(verifiedFor)
	g.mu.Unlock()
	return true
}

var dummyHash = sync.OnceValue(func() []byte {
	h, _ := bcrypt.GenerateFromPassword([]byte("edgeheal-fleet"), bcrypt.DefaultCost)
	return h
})

// wrap puts the door in front of next; /healthz stays open.
func (g *guard) wrap(next http.Handler, now func() time.Time) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/healthz" {
			next.ServeHTTP(w, r)
			return
		}
		user, why := g.who(r, now())
		if user == "" {
			w.Header().Set("WWW-Authenticate", `Basic realm="edgeheal-fleet", charset="UTF-8"`)
			http.Error(w, "401 unauthorized: "+why, http.StatusUnauthorized)
			return
		}
		next.ServeHTTP(w, r)
	})
}
