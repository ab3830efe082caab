package fleet

import (
	"math/rand/v2"
	"slices"
	"time"
)

// window is how far back the view's own lag and message rate look.
const window = 10 * time.Second

// samplesPerSecond bounds the lag samples kept for each second of the
// window (a uniform sample of that second's messages).
const samplesPerSecond = 64

// stats is the view's own health: messages by type and result, events by
// kind, the lag of live messages and the message rate over the last
// window.
type stats struct {
	messages map[[2]string]uint64  // {type, result} → count
	events   [numEventKinds]uint64 // applied events by kind (EventKinds)
	last     time.Time             // when the last message arrived

	connected  bool
	connDetail string
	secs       [10]second // per-second ring over window
}

type second struct {
	unix    int64
	n       int
	lagMax  time.Duration // the largest raw delay
	seen    int           // lag samples offered this second
	samples []float32     // corrected delays, a uniform sample of at most samplesPerSecond
}

func newStats() stats {
	return stats{messages: map[[2]string]uint64{}}
}

// clockOffset is a node's clock offset as the view estimates it: the
// smallest delay (arrival − ts) among its live messages of its current
// session, which is its clock's offset plus the quickest path. Delays
// are measured above it, so a node whose clock is off by minutes does not
// look like a view that lags by minutes.
type clockOffset struct {
	min     float32 // seconds
	session uint64
	set     bool
}

func (c *clockOffset) correct(d time.Duration, session uint64) time.Duration {
	s := float32(d.Seconds())
	if !c.set || session != c.session || s < c.min {
		c.min, c.session, c.set = s, session, true
	}
	return d - time.Duration(float64(c.min)*float64(time.Second))
}

func (st *stats) record(a applied, m Message) {
	st.messages[[2]string{a.typ, string(a.res)}]++
	if m.Received.After(st.last) {
		st.last = m.Received
	}
	sec := &st.secs[m.Received.Unix()%int64(len(st.secs))]
	if sec.unix != m.Received.Unix() {
		*sec = second{unix: m.Received.Unix(), samples: sec.samples[:0]}
	}
	sec.n++
	if a.res != Applied {
		return
	}
	if a.typ == TypeEvent {
		st.events[kindIndex(a.kind)]++
	}
	if !a.lag {
		return
	}
	sec.lagMax = max(sec.lagMax, a.raw)
	sec.seen++
	v := float32(max(a.corrected, 0).Seconds())
	if len(sec.samples) < samplesPerSecond {
		sec.samples = append(sec.samples, v)
	} else if i := rand.N(sec.seen); i < samplesPerSecond {
		sec.samples[i] = v
	}
}

// Health is the view's own state, for /metrics and the page.
type Health struct {
	Connected     bool           `json:"connected"`
	ConnectDetail string         `json:"connect_detail"`
	Nodes         int            `json:"nodes"`
	ByState       map[string]int `json:"by_state"`
	OpenIncidents map[string]int `json:"open_incidents"` // by kind (IncidentKinds)
	// LagSeconds is the median delay of the live messages of the last
	// 10 s, each measured above its node's clock offset: one late replay
	// or one node with a skewed clock does not move it.
	LagSeconds float64 `json:"lag_seconds"`
	// LagMaxSeconds is the largest raw delay (arrival − ts) of those
	// messages, clock offsets included.
	LagMaxSeconds float64   `json:"lag_max_seconds"`
	MessageRate   float64   `json:"messages_per_second"`
	LastMessage   time.Time `json:"last_message"`
	LastError     string    `json:"last_error,omitempty"`
	// LastFailure is the last panic met applying a message, with its
	// stack: a bug of the view, which went on without that message.
	LastFailure string            `json:"last_failure,omitempty"`
	Messages    map[string]uint64 `json:"messages"` // "type/result" → count
	Events      map[string]uint64 `json:"events"`   // by kind (EventKinds)
}

// recent is the rate, the median corrected lag and the largest raw lag
// over the window that ends at now.
func (st *stats) recent(now time.Time) (rate float64, lag, lagMax time.Duration) {
	n := 0
	var all []float32
	for _, s := range st.secs {
		if s.unix > now.Unix()-int64(len(st.secs)) && s.unix <= now.Unix() {
			n += s.n
			lagMax = max(lagMax, s.lagMax)
			all = append(all, s.samples...)
		}
	}
	if len(all) > 0 {
		slices.Sort(all)
		lag = time.Duration(float64(all[(len(all)-1)/2]) * float64(time.Second))
	}
	return float64(n) / window.Seconds(), lag, lagMax
}
