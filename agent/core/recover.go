package core

import (
	"fmt"
	"runtime/debug"
)

// PanicError is a panic recovered from a component or one of its
// goroutines, with the stack where it happened.
type PanicError struct {
	Value any
	Stack []byte
}

func (e *PanicError) Error() string { return fmt.Sprintf("panic: %v", e.Value) }

// Recovered runs fn and turns a panic into a *PanicError: for every
// goroutine a component starts (the supervisor recovers Run itself), so
// that one bug stops one piece of work, reported, and never the process.
func Recovered(fn func() error) (err error) {
	defer func() {
		if v := recover(); v != nil {
			err = &PanicError{Value: v, Stack: debug.Stack()}
		}
	}()
	return fn()
}
