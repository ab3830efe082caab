package lab

import (
	"errors"
	"time"
)

// SetFault makes the modem apply f to every frame, both ways. With d > 0
// the modem goes back to Pass after d (unless another fault was set in
// between); d == 0 keeps f until changed.
func (l *Lab) SetFault(f Fault, d time.Duration) error {
	if err := f.Validate(); err != nil {
		return err
	}
	if f.Kind == "" {
		f.Kind = FaultPass
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return errors.New("lab is closed")
	}
	if l.faultTimer != nil {
		l.faultTimer.Stop()
		l.faultTimer = nil
	}
	l.faultUntil = time.Time{}
	l.relay.setFault(f)
	if d > 0 && f.Kind != FaultPass {
		l.faultUntil = time.Now().Add(d)
		var t *time.Timer
		t = time.AfterFunc(d, func() {
			l.mu.Lock()
			defer l.mu.Unlock()
			if l.faultTimer != t || l.closed {
				return // superseded
			}
			l.relay.setFault(Fault{Kind: FaultPass})
			l.faultTimer = nil
			l.faultUntil = time.Time{}
		})
		l.faultTimer = t
	}
	return nil
}

// Fault returns the modem's current fault and, for a timed one, when it
// ends.
func (l *Lab) Fault() (Fault, time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.relay.currentFault(), l.faultUntil
}

// Pass lets every frame through (the modem still never completes a
// checksum: the offload fault is not a relay fault).
func (l *Lab) Pass() error { return l.SetFault(Fault{Kind: FaultPass}, 0) }

// Blackhole drops every IP frame (ARP passes), for d (0: until changed).
func (l *Lab) Blackhole(d time.Duration) error { return l.SetFault(Fault{Kind: FaultBlackhole}, d) }

// Loss drops each frame with probability pct/100, for d (0: until changed).
func (l *Lab) Loss(pct float64, d time.Duration) error {
	return l.SetFault(Fault{Kind: FaultLoss, LossPct: pct}, d)
}

// Delay holds each frame delay ± jitter (uniform), for d (0: until
// changed). Jitter reorders frames.
func (l *Lab) Delay(delay, jitter, d time.Duration) error {
	return l.SetFault(Fault{Kind: FaultDelay, Delay: delay, Jitter: jitter}, d)
}

// PathMTU drops every IP packet longer than mtu bytes, both ways, without
// an ICMP "fragmentation needed" (a path-MTU blackhole), for d (0: until
// changed). Small packets pass as before.
func (l *Lab) PathMTU(mtu int, d time.Duration) error {
	return l.SetFault(Fault{Kind: FaultMTU, MTU: mtu}, d)
}
