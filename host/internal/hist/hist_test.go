package hist

import (
	"sync"
	"testing"
)

func TestHistogramBuckets(t *testing.T) {
	h := New(1, 10, 100)
	for _, v := range []float64{0.5, 1, 2, 10, 11, 1000} {
		h.Observe(v)
	}
	s := h.Snapshot()
	want := []uint64{2, 2, 1, 1}
	for i, c := range want {
		if s.Counts[i] != c {
			t.Fatalf("counts = %v, want %v", s.Counts, want)
		}
	}
	if s.Count != 6 || s.Sum != 1024.5 {
		t.Fatalf("count %d sum %v, want 6 and 1024.5", s.Count, s.Sum)
	}
}

func TestHistogramConcurrent(t *testing.T) {
	h := New(1, 2)
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 1000 {
				h.Observe(1)
			}
		}()
	}
	wg.Wait()
	if s := h.Snapshot(); s.Count != 8000 || s.Sum != 8000 || s.Counts[0] != 8000 {
		t.Fatalf("snapshot %+v, want 8000 observations of 1", s)
	}
}

func BenchmarkObserve(b *testing.B) {
	h := New(0.001, 0.01, 0.1, 1)
	for i := 0; i < b.N; i++ {
		h.Observe(0.005)
	}
}
