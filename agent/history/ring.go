package history

import "time"

// counts are one bucket's seconds and the incidents that opened in it.
type counts struct {
	Healthy   float64 `json:"h,omitempty"`
	Dark      float64 `json:"d,omitempty"`
	Degraded  float64 `json:"g,omitempty"`
	Incidents int     `json:"i,omitempty"`
}

// ring is a window of equal buckets, the newest last: C[i] covers the
// Step seconds from Start + i*Step (unix seconds, aligned to Step, so a
// day is a UTC day). It keeps at most a given number of buckets.
type ring struct {
	Step  int64    `json:"step"`
	Start int64    `json:"start"`
	C     []counts `json:"c"`
}

func newRing(step time.Duration) ring { return ring{Step: int64(step / time.Second)} }

// at returns the bucket of t, moving the window forward when t is past
// it (keeping at most n buckets), and nil when t is older than the window.
func (r *ring) at(t time.Time, n int) *counts {
	b := t.Unix() / r.Step * r.Step
	if len(r.C) == 0 {
		r.Start = b
		r.C = append(r.C, counts{})
	}
	i := (b - r.Start) / r.Step
	if i < 0 {
		return nil
	}
	for int64(len(r.C)) <= i {
		r.C = append(r.C, counts{})
	}
	if over := len(r.C) - n; over > 0 {
		r.C = append(r.C[:0:0], r.C[over:]...)
		r.Start += int64(over) * r.Step
		i -= int64(over)
	}
	return &r.C[i]
}

// upTo is the window as of now: the buckets from n back to now's, the
// empty ones included (so that a consumer sees every hour of the last 48,
// also those the agent did not run in).
func (r ring) upTo(now time.Time, n int) (start int64, cs []counts) {
	last := now.Unix() / r.Step * r.Step
	start = last - int64(n-1)*r.Step
	cs = make([]counts, n)
	for i, c := range r.C {
		b := r.Start + int64(i)*r.Step
		if b < start || b > last {
			continue
		}
		cs[(b-start)/r.Step] = c
	}
	return start, cs
}

// total sums the buckets of the window as of now.
func (r ring) total(now time.Time, n int) counts {
	_, cs := r.upTo(now, n)
	var t counts
	for _, c := range cs {
		t.Healthy += c.Healthy
		t.Dark += c.Dark
		t.Degraded += c.Degraded
		t.Incidents += c.Incidents
	}
	return t
}
