package fleet

import "time"

// window is how far back the view's own lag and message rate look.
const window = 10 * time.Second

// stats is the view's own health: messages by type and result, events by
// kind, the lag of live messages and the message rate over the last
// window.
type stats struct {
	messages map[[2]string]uint64 // {type, result} → count
	events   map[string]uint64    // applied events by kind
	last     time.Time            // when the last message arrived

	connected  bool
	connDetail string
	secs       [10]second // per-second ring over window
}

type second struct {
	unix    int64
	n       int
	lagMax  time.Duration
	lagSeen bool
}

func newStats() stats {
	return stats{messages: map[[2]string]uint64{}, events: map[string]uint64{}}
}

func (st *stats) record(a applied, m Message) {
	st.messages[[2]string{a.typ, string(a.res)}]++
	if m.Received.After(st.last) {
		st.last = m.Received
	}
	sec := &st.secs[m.Received.Unix()%int64(len(st.secs))]
	if sec.unix != m.Received.Unix() {
		*sec = second{unix: m.Received.Unix()}
	}
	sec.n++
	if a.res != Applied {
		return
	}
	if a.typ == TypeEvent {
		st.events[a.kind]++
	}
	if m.Retained {
		return // delivered at subscribe: its age is the node's silence, not the view's lag
	}
	if !a.ts.IsZero() {
		lag := max(m.Received.Sub(a.ts), 0)
		sec.lagSeen = true
		sec.lagMax = max(sec.lagMax, lag)
	}
}

// Health is the view's own state, for /metrics and the page.
type Health struct {
	Connected     bool              `json:"connected"`
	ConnectDetail string            `json:"connect_detail"`
	Nodes         int               `json:"nodes"`
	ByState       map[string]int    `json:"by_state"`
	OpenIncidents map[string]int    `json:"open_incidents"` // by kind
	LagSeconds    float64           `json:"lag_seconds"`    // the largest lag of a live message in the last 10 s
	MessageRate   float64           `json:"messages_per_second"`
	LastMessage   time.Time         `json:"last_message"`
	LastError     string            `json:"last_error,omitempty"`
	Messages      map[string]uint64 `json:"messages"` // "type/result" → count
	Events        map[string]uint64 `json:"events"`   // by kind
}

// rate and lag over the window that ends at now.
func (st *stats) recent(now time.Time) (rate float64, lag time.Duration) {
	n := 0
	for _, s := range st.secs {
		if s.unix > now.Unix()-int64(len(st.secs)) && s.unix <= now.Unix() {
			n += s.n
			if s.lagSeen {
				lag = max(lag, s.lagMax)
			}
		}
	}
	return float64(n) / window.Seconds(), lag
}
