package kube

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"math/big"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/edgeheal/edgeheal/localapi"
)

// Options configure a Reporter. Client, Node and Status are required.
type Options struct {
	Client Client
	Node   string // the Node object's name
	Host   string // events' source host; default Node
	// Status reads the agent's status (SocketStatus reads /v1/status).
	Status func(ctx context.Context) (*Status, error)
	// Interval is how often the status is read (default 1 s); Stale how
	// long the agent's loop may make no progress before the condition
	// turns Unknown (default 30 s).
	Interval, Stale time.Duration
	Taint           bool
	Grace           time.Duration // default 0: at once
	Heartbeat       time.Duration // default 1 min
	// MaxBackoff caps the wait between attempts while the API server
	// fails (default 30 s; the first retry is after 1 s).
	MaxBackoff time.Duration
	// QueueLimit bounds the events waiting for the API server (default
	// 256). A full queue gives up the oldest event of the least important
	// class first: information, then actions, incidents last (eventClass).
	QueueLimit int
	Log        *slog.Logger
	Now        func() time.Time
}

// Reporter keeps the Node's condition, taint and events in step with the
// agent's status. Its poll of the status never waits on the API server:
// the writes run in a goroutine of their own, which takes the latest
// wanted state when it gets to it, so an API server that is slow or gone
// delays only the writes, and the condition is right once it is back.
type Reporter struct {
	o Options

	mu         sync.Mutex
	want       Verdict
	haveWant   bool
	darkSince  time.Time
	falseSince time.Time
	prevV      *Verdict // the last verdict
	known      *Verdict // the last verdict that was not Unknown
	prevSt     *Status
	corr       Correlator
	queue      []Write
	dropped    int
	wake       chan struct{}

	// the writer's own state (only its goroutine touches it)
	last      *Condition
	seeded    bool
	taintOn   *bool // nil: not known
	failures  int
	lastError string
}

// New makes a Reporter.
func New(o Options) *Reporter {
	if o.Host == "" {
		o.Host = o.Node
	}
	if o.Interval <= 0 {
		o.Interval = time.Second
	}
	if o.Stale <= 0 {
		o.Stale = 30 * time.Second
	}
	if o.Heartbeat <= 0 {
		o.Heartbeat = time.Minute
	}
	if o.MaxBackoff <= 0 {
		o.MaxBackoff = 30 * time.Second
	}
	if o.QueueLimit <= 0 {
		o.QueueLimit = 256
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	return &Reporter{o: o, wake: make(chan struct{}, 1)}
}

// Run polls the status and writes until ctx ends; it returns nil then.
func (r *Reporter) Run(ctx context.Context) error {
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); r.writeLoop(ctx) }()
	t := time.NewTicker(r.o.Interval)
	defer t.Stop()
	for {
		r.Poll(ctx)
		select {
		case <-ctx.Done():
			wg.Wait()
			return nil
		case <-t.C:
		}
	}
}

// Poll reads the status once and updates what the writer is to write.
func (r *Reporter) Poll(ctx context.Context) {
	pctx, cancel := context.WithTimeout(ctx, r.o.Interval+2*time.Second)
	st, err := r.o.Status(pctx)
	cancel()
	if ctx.Err() != nil {
		return
	}
	now := r.o.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	prev := Verdict{}
	if r.prevV != nil {
		prev = *r.prevV
	}
	v := Diagnose(prev, st, err, now, r.o.Stale)
	if v.Dark && !prev.Dark {
		r.darkSince = now
	} else if !v.Dark && v.Status != Unknown {
		r.darkSince = time.Time{}
	}
	if v.Status == False && (r.known == nil || r.known.Status != False) {
		r.falseSince = now
	}
	var cur *Status
	if err == nil {
		cur = st
	}
	for _, n := range Notes(r.known, v, r.prevSt, cur, r.falseSince, now) {
		r.noteLocked(n)
	}
	if v.Status != Unknown {
		known := v
		r.known = &known
	}
	changed := !r.haveWant || v != r.want
	r.want, r.haveWant = v, true
	r.prevV = &v
	if cur != nil {
		r.prevSt = cur
	}
	// A taint is due when the grace runs out, with no change of verdict;
	// a removal comes with one (True), and a failed write is retried by
	// the writer's own backoff.
	if changed || WantTaint(r.o.Taint, v, r.darkSince, now, r.o.Grace) == TaintAdd {
		r.kick()
	}
}

func (r *Reporter) noteLocked(n Note) {
	w, ok := r.corr.Correlate(n, func() string { return eventName(r.o.Node, n.Time) })
	if !ok {
		return
	}
	if len(r.queue) >= r.o.QueueLimit {
		r.dropped++
		drop := dropFrom(r.queue, w)
		given := w
		if drop < len(r.queue) {
			given = r.queue[drop]
		}
		r.o.Log.Warn("kubernetes event given up: the queue is full while the API server is away",
			"type", given.Type, "reason", given.Reason, "message", given.Message, "queue_limit", r.o.QueueLimit, "dropped", r.dropped+r.corr.Dropped)
		if drop == len(r.queue) {
			return // the new event is the one that matters least
		}
		r.queue = slices.Delete(r.queue, drop, drop+1)
	}
	r.queue = append(r.queue, w)
	r.kick()
}

// Event classes, in the order a full queue gives them up, as the agent's
// outbox does (docs/operations/kubernetes.md, "Kubernetes"): information first
// (a taint added or removed: the Node shows the taint itself), then
// actions (a repair, a recovery, which closes an incident), incidents last.
const (
	classInfo = iota
	classAction
	classIncident
)

func eventClass(n Note) int {
	switch {
	case n.Type == Warning:
		return classIncident
	case n.Reason == ReasonRepair || n.Reason == ReasonRecovered:
		return classAction
	}
	return classInfo
}

// dropFrom is the index of the event a full queue gives up for w: the
// oldest of the lowest class among the queue and w, len(queue) for w
// itself.
func dropFrom(queue []Write, w Write) int {
	drop, class := len(queue), eventClass(w.Note)
	for i, q := range queue {
		if c := eventClass(q.Note); c < class || (c == class && i < drop) {
			drop, class = i, c
		}
	}
	return drop
}

func (r *Reporter) kick() {
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

func (r *Reporter) writeLoop(ctx context.Context) {
	var wait time.Duration
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-r.wake:
			if r.failures > 0 {
				continue // waiting out the backoff; the timer brings us back
			}
		case <-timer.C:
		}
		err := r.sync(ctx)
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			r.failures++
			wait = backoff(r.failures, r.o.MaxBackoff)
			if r.failures == 1 || err.Error() != r.lastError {
				r.o.Log.Warn("the Kubernetes API server: retrying", "error", err, "retry_in_seconds", wait.Seconds())
			}
			r.lastError = err.Error()
		} else {
			if r.failures > 0 {
				r.o.Log.Info("the Kubernetes API server answers again", "failed_attempts", r.failures)
			}
			r.failures, r.lastError = 0, ""
			wait = r.o.Heartbeat
		}
		if !timer.Stop() {
			select {
			case <-timer.C:
			default:
			}
		}
		timer.Reset(wait)
	}
}

// sync writes what is due: the condition (changed, or its heartbeat), the
// taint, the queued events, in that order (the condition is what matters
// most after an outage).
func (r *Reporter) sync(ctx context.Context) error {
	r.mu.Lock()
	v, have, darkSince := r.want, r.haveWant, r.darkSince
	r.mu.Unlock()
	if !have {
		return nil
	}
	now := r.o.Now()
	if !r.seeded {
		cond, taints, _, err := r.o.Client.Node(ctx, r.o.Node)
		if err != nil {
			return err
		}
		r.last, r.seeded = cond, true
		on := hasTaint(taints)
		r.taintOn = &on
	}
	c := NextCondition(r.last, v, now)
	if c.Changed(r.last) || now.Sub(r.last.LastHeartbeatTime) >= r.o.Heartbeat-r.o.Interval {
		if err := r.o.Client.PatchCondition(ctx, r.o.Node, c); err != nil {
			return err
		}
		if c.Changed(r.last) {
			r.o.Log.Info("node condition written", "type", ConditionType, "status", c.Status, "reason", c.Reason)
		}
		r.last = &c
	}
	if err := r.syncTaint(ctx, v, darkSince, now); err != nil {
		return err
	}
	return r.flushEvents(ctx)
}

func (r *Reporter) syncTaint(ctx context.Context, v Verdict, darkSince, now time.Time) error {
	want := WantTaint(r.o.Taint, v, darkSince, now, r.o.Grace)
	if want == TaintKeep || (r.taintOn != nil && *r.taintOn == (want == TaintAdd)) {
		return nil
	}
	_, taints, rv, err := r.o.Client.Node(ctx, r.o.Node)
	if err != nil {
		return err
	}
	next, changed := ApplyTaint(taints, want, now)
	if changed {
		if err := r.o.Client.SetTaints(ctx, r.o.Node, next, rv); err != nil {
			return err // a conflict too: the next attempt reads the node again
		}
		reason, msg := ReasonTaintAdded, fmt.Sprintf("edgeheal: %s:%s added: the overlay has been dark since %s (%s)", TaintKey, TaintEffect, darkSince.UTC().Format(time.RFC3339), v.Reason)
		if want == TaintRemove {
			reason, msg = ReasonTaintRemoved, fmt.Sprintf("edgeheal: %s:%s removed: the overlay is healthy", TaintKey, TaintEffect)
		}
		r.o.Log.Info("node taint changed", "taint", TaintKey+":"+TaintEffect, "added", want == TaintAdd)
		r.mu.Lock()
		r.noteLocked(Note{Type: Normal, Reason: reason, Message: msg, Time: now})
		r.mu.Unlock()
	}
	on := want == TaintAdd
	r.taintOn = &on
	return nil
}

func (r *Reporter) flushEvents(ctx context.Context) error {
	for {
		r.mu.Lock()
		if len(r.queue) == 0 {
			r.mu.Unlock()
			return nil
		}
		head := r.queue[0]
		r.mu.Unlock()
		w := head
		var err error
		if w.New {
			err = r.o.Client.CreateEvent(ctx, r.o.Node, w)
		} else if err = r.o.Client.PatchEvent(ctx, w); errors.Is(err, ErrNotFound) {
			w.New, w.Count, w.First = true, 1, w.Time // expired: a new Event under the same name
			err = r.o.Client.CreateEvent(ctx, r.o.Node, w)
		}
		if err != nil {
			return err
		}
		r.mu.Lock()
		if len(r.queue) > 0 && r.queue[0].Name == head.Name && r.queue[0].Count == head.Count { // not pushed out meanwhile
			r.queue = r.queue[1:]
		}
		r.mu.Unlock()
	}
}

// Dropped is how many events were not recorded: refused by the rate limit
// or pushed out of a full queue.
func (r *Reporter) Dropped() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.dropped + r.corr.Dropped
}

func hasTaint(ts []Taint) bool {
	_, changed := ApplyTaint(ts, TaintRemove, time.Time{})
	return changed
}

// backoff is the wait after n failures in a row: 1 s doubling up to max,
// drawn between half of it and all of it so a fleet spreads out.
func backoff(n int, max time.Duration) time.Duration {
	d := time.Second
	for i := 1; i < n && d < max; i++ {
		d *= 2
	}
	if d > max {
		d = max
	}
	j, err := rand.Int(rand.Reader, big.NewInt(int64(d/2)+1))
	if err != nil {
		return d
	}
	return d/2 + time.Duration(j.Int64())
}

// eventName is kubelet's way of naming an event: the object's name and
// the time in hex, plus random digits so two in one nanosecond differ.
func eventName(node string, t time.Time) string {
	var b [2]byte
	_, _ = rand.Read(b[:])
	return node + "." + strconv.FormatInt(t.UnixNano(), 16) + hex.EncodeToString(b[:])
}

// SocketStatus reads the agent's /v1/status on its local API's Unix
// socket (report.http.socket), believing only an agent run by root
// (localapi): a process that squats the metrics port, or a path, sets no
// condition and no taint.
func SocketStatus(socket string) func(ctx context.Context) (*Status, error) {
	c := localapi.New(socket)
	return func(ctx context.Context) (*Status, error) {
		st, err := c.Status(ctx)
		if err != nil {
			return nil, err
		}
		return &st, nil
	}
}
