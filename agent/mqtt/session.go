package mqtt

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/edgeheal/edgeheal/agent/statedir"
)

// Session is the MQTT session counter persisted in the state directory. It
// increases with every connection attempt, so that the cloud can tell a
// stale Last Will ({"state":"lost","session":N}) from a newer status: a
// message whose session is lower than the last one seen is stale.
//
// A counter that cannot be read (a corrupt file) or kept (a read-only or
// full state directory) must not stop reporting, and must not go back
// either, or the cloud would take the node's new status for a stale one.
// So the Session then counts from the Unix time in seconds, which is above
// any counter the file could have held and grows across restarts while
// the clock does, and says so in Problem.
type Session struct {
	path string
	now  func() time.Time

	mu      sync.Mutex
	cur     uint64
	clock   bool  // counting from the clock: the file could not be read or written
	problem error // why, for the publisher's health
}

// OpenSession reads the counter in dir/session (0 when the file does not
// exist yet). It always returns a usable Session; Problem says when the
// file could not be read and the session counts from the clock.
func OpenSession(dir string, now func() time.Time) *Session {
	if now == nil {
		now = time.Now
	}
	s := &Session{path: filepath.Join(dir, "session"), now: now}
	b, err := os.ReadFile(s.path)
	switch {
	case errors.Is(err, os.ErrNotExist):
	case err != nil:
		s.fallBack(fmt.Errorf("reading the session counter: %w", err))
	default:
		n, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64)
		if err != nil {
			s.fallBack(fmt.Errorf("the session counter %s is corrupt: %w", s.path, err))
			break
		}
		s.cur = n
	}
	return s
}

// fallBack switches to counting from the clock. Called with mu held (or
// before the Session is shared).
func (s *Session) fallBack(why error) {
	s.clock, s.problem = true, why
}

// Current is the last session number handed out (or read at open).
func (s *Session) Current() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cur
}

// Problem is why the counter is not kept in its file, or nil.
func (s *Session) Problem() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.problem
}

// Next returns a session number larger than every one handed out before,
// written to the file first (temporary file, fsync, rename, directory
// fsync) unless the Session counts from the clock. A write that fails
// switches it to the clock, with the reason in Problem.
func (s *Session) Next() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := s.cur + 1
	if !s.clock {
		if err := s.write(n); err == nil {
			s.cur = n
			return n
		} else {
			s.fallBack(fmt.Errorf("keeping the session counter: %w", err))
		}
	}
	s.cur = max(n, uint64(s.now().Unix()))
	return s.cur
}

func (s *Session) write(n uint64) error {
	return statedir.WriteFile(s.path, []byte(strconv.FormatUint(n, 10)+"\n"), 0o600)
}
