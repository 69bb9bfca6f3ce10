// Package hist is a histogram that any number of goroutines record into without a lock, and
// that a reader copies at any time: fixed bucket bounds, one atomic counter per bucket. The
// host records batch sizes, guest call latencies and checkpoint durations in it; the CLI's
// Prometheus collector reads copies (Snapshot) at scrape time.
package hist

import (
	"math"
	"sort"
	"sync/atomic"
)

// Histogram counts observations in buckets with fixed upper bounds. The zero value is not
// usable; create one with New. Observe and Snapshot are safe from any goroutine.
type Histogram struct {
	bounds []float64       // ascending upper bounds (inclusive); +Inf is implicit
	counts []atomic.Uint64 // per bucket, len(bounds)+1 (the last: above every bound)
	sum    atomic.Uint64   // float64 bits of the sum of observations
}

// New returns a Histogram with the given ascending upper bounds.
func New(bounds ...float64) *Histogram {
	b := append([]float64(nil), bounds...)
	sort.Float64s(b)
	return &Histogram{bounds: b, counts: make([]atomic.Uint64, len(b)+1)}
}

// Observe records v.
func (h *Histogram) Observe(v float64) {
	i := sort.SearchFloat64s(h.bounds, v) // first bound >= v
	h.counts[i].Add(1)
	for {
		old := h.sum.Load()
		if h.sum.CompareAndSwap(old, math.Float64bits(math.Float64frombits(old)+v)) {
			return
		}
	}
}

// Snapshot is a copy of a Histogram: Counts[i] observations were at most Bounds[i] (and above
// the bound before); Counts[len(Bounds)] were above every bound. Counts are not cumulative.
type Snapshot struct {
	Bounds []float64
	Counts []uint64
	Count  uint64
	Sum    float64
}

// Snapshot copies the histogram. Observations running concurrently may or may not be in it,
// and Sum may lag Count by those.
func (h *Histogram) Snapshot() Snapshot {
	if h == nil {
		return Snapshot{}
	}
	s := Snapshot{Bounds: h.bounds, Counts: make([]uint64, len(h.counts)), Sum: math.Float64frombits(h.sum.Load())}
	for i := range h.counts {
		s.Counts[i] = h.counts[i].Load()
		s.Count += s.Counts[i]
	}
	return s
}
