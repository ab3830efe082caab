package fleet

import "fmt"

// keepFailure keeps a panic met applying or decoding one message, and
// its stack, for Health: a bug met by one message costs the view that
// message and no more (a retained one would otherwise end the view at its
// every start); Apply counts the message failed.
func (s *Store) keepFailure(name, kind string, p *panicked) {
	s.lastFailure = clip(fmt.Sprintf("%s: the view could not apply this %s: %v", name, kind, p), maxFailure)
	s.lastErr = clip(fmt.Sprintf("%s: the view could not apply this %s (a bug: its stack is in /v1/fleet's last_failure and the log): panic: %v", name, kind, p.value), maxText)
}

// countBack counts a node's share as the node now is, after an Apply
// that took it out and panicked.
func (s *Store) countBack(name string) {
	if n, ok := s.nodes[name]; ok {
		s.count(n.share(), +1)
	}
}

// panicked is a panic recovered, with the stack where it happened.
type panicked struct {
	value any
	stack []byte
}

func (p *panicked) Error() string { return fmt.Sprintf("panic: %v\n%s", p.value, p.stack) }
