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
	"github.com/edgeheal/edgeheal/regfile"
)

// Session is the MQTT session counter persisted in the state directory. It
// increases with every connection attempt, so that the cloud can tell a
// stale Last Will ({"state":"lost","session":N}) from a newer status: a
// message whose session is lower than the last one seen is stale.
//
// Session numbers never go back for a node, also when its state directory
// is wiped or the node is replaced under the same name. The convention: a
// counter that starts without a file starts at the Unix time in
// milliseconds (the instance's epoch) and counts up by one per attempt from
// there. A later instance starts at its own, later, epoch, which is above
// the earlier one's numbers unless that one made more than one attempt per
// millisecond of its life (the publisher's backoff never lets it). This
// needs a clock that is not behind the earlier instance's (NTP); a clock
// before epochFloor is taken as epochFloor.
//
// A counter that cannot be read (a corrupt file) or kept (a read-only or
// full state directory) must not stop reporting, and must not go back
// either. So the Session then counts from the clock, in milliseconds,
// which is above any counter the file could have held and grows across
// restarts while the clock does, and says so in Problem.
type Session struct {
	path string
	now  func() time.Time

	mu      sync.Mutex
	cur     uint64
	fresh   bool  // no file yet: the first number is the instance's epoch
	clock   bool  // counting from the clock: the file could not be read or written
	problem error // why, for the publisher's health
}

// epochFloor is the earliest epoch a Session uses, for a clock that has
// not been set yet (a board without a real-time clock, before NTP).
var epochFloor = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// epoch is the clock's time in milliseconds, at least epochFloor's.
func epoch(now time.Time) uint64 {
	if now.Before(epochFloor) {
		now = epochFloor
	}
	return uint64(now.UnixMilli())
}

// OpenSession reads the counter in dir/session (none yet when the file does
// not exist: the first Next is the instance's epoch). It always returns a usable Session; Problem says when the
// file could not be read and the session counts from the clock.
func OpenSession(dir string, now func() time.Time) *Session {
	if now == nil {
		now = time.Now
	}
	s := &Session{path: filepath.Join(dir, "session"), now: now}
	b, err := regfile.Read(s.path, 1<<10) // a number: anything larger is no counter
	switch {
	case errors.Is(err, os.ErrNotExist):
		s.fresh = true
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
	if s.fresh {
		n = max(n, epoch(s.now()))
	}
	if !s.clock {
		if err := s.write(n); err == nil {
			s.cur, s.fresh = n, false
			return n
		} else {
			s.fallBack(fmt.Errorf("keeping the session counter: %w", err))
		}
	}
	s.cur = max(n, epoch(s.now()))
	return s.cur
}

func (s *Session) write(n uint64) error {
	return statedir.WriteFile(s.path, []byte(strconv.FormatUint(n, 10)+"\n"), 0o600)
}
