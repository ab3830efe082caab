package report

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
)

// Session is the MQTT session counter persisted in the state directory. It
// increases with every connection attempt, so that the cloud can tell a
// stale Last Will ({"state":"lost","session":N}) from a newer status: a
// message whose session is lower than the last one seen is stale.
type Session struct {
	path string

	mu  sync.Mutex
	cur uint64
}

// OpenSession reads the counter in dir/session (0 when the file does not
// exist yet). A file that cannot be parsed is an error: silently restarting
// at 0 would make every later Will look stale.
func OpenSession(dir string) (*Session, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("creating state directory: %w", err)
	}
	s := &Session{path: filepath.Join(dir, "session")}
	b, err := os.ReadFile(s.path)
	switch {
	case errors.Is(err, os.ErrNotExist):
	case err != nil:
		return nil, fmt.Errorf("reading session counter: %w", err)
	default:
		n, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64)
		if err != nil {
			return nil, fmt.Errorf("parsing session counter %s: %w", s.path, err)
		}
		s.cur = n
	}
	return s, nil
}

// Current is the last session number handed out (or read at open).
func (s *Session) Current() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cur
}

// Next increments the counter and returns the new value once it is durable
// (written to a temporary file, synced, renamed, directory synced). On error
// the counter is unchanged.
func (s *Session) Next() (uint64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := s.cur + 1
	tmp := s.path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return 0, fmt.Errorf("writing session counter: %w", err)
	}
	_, err = f.WriteString(strconv.FormatUint(n, 10) + "\n")
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, s.path)
	}
	if err == nil {
		err = syncDir(filepath.Dir(s.path))
	}
	if err != nil {
		return 0, fmt.Errorf("writing session counter: %w", err)
	}
	s.cur = n
	return n, nil
}
