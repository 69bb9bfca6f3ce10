package sched

import (
	"slices"
	"testing"
	"time"
)

// TestInsert places items among a key's queued ones by their values: before the earliest of the
// tail's items that must come after it, skipping items that leave it free (order 0), and not at
// all when none must; in strict mode the stream's order follows, so the inserted item runs in
// its place among the other keys' items too.
func TestInsert(t *testing.T) {
	// Values are stamps; 0 is a free item. The inserted item has stamp 50 and goes before items
	// stamped 50 or more.
	order := func(v int) int {
		switch {
		case v == 0:
			return 0
		case v >= 50:
			return 1
		}
		return -1
	}
	tests := []struct {
		name   string
		queued []int
		want   []int // the key's items in dispatch order; nil: not inserted
	}{
		{"empty", nil, nil},
		{"all before", []int{10, 20}, nil},
		{"tail after", []int{10, 60}, []int{10, 50, 60}},
		{"several after", []int{10, 60, 70, 80}, []int{10, 50, 60, 70, 80}},
		{"all after", []int{60, 70}, []int{50, 60, 70}},
		{"equal comes after", []int{10, 50}, []int{10, 50, 50}},
		{"free items skipped", []int{10, 0, 60, 0}, []int{10, 0, 50, 60, 0}},
		{"free tail only", []int{10, 0}, nil},
	}
	for _, strict := range []bool{false, true} {
		for _, tc := range tests {
			name := tc.name
			if strict {
				name += " strict"
			}
			t.Run(name, func(t *testing.T) {
				cfg := Config{MaxKeyItems: 100, MaxBatchItems: 100}
				if strict {
					cfg.MaxStreamInFlight = 1
				}
				s, err := New[int](cfg)
				if err != nil {
					t.Fatal(err)
				}
				s.AddStream(1)
				for i, v := range tc.queued {
					push(t, s, Item[int]{Stream: 1, Key: "k", Offset: int64(i), Value: v})
					// Another key's item between each: strict mode must keep the stream's order.
					push(t, s, Item[int]{Stream: 1, Key: "o", Offset: int64(100 + i), Value: -1})
				}
				ok, err := s.Insert(Item[int]{Stream: 1, Key: "k", Offset: -1, Value: 50}, order)
				if err != nil {
					t.Fatal(err)
				}
				if ok != (tc.want != nil) {
					t.Fatalf("Insert = %v, want %v", ok, tc.want != nil)
				}
				want := tc.want
				if want == nil {
					want = tc.queued
				}
				var got, other []int
				var seq []int64 // strict: the offsets in dispatch order
				for {
					b, ok := s.Next(time.Time{})
					if !ok {
						break
					}
					for _, it := range b.Items {
						seq = append(seq, it.Offset)
						if it.Key == "k" {
							got = append(got, it.Value)
						} else {
							other = append(other, it.Value)
						}
					}
					if err := s.Complete(b.ID); err != nil {
						t.Fatal(err)
					}
				}
				if !slices.Equal(got, want) && !(len(got) == 0 && len(want) == 0) {
					t.Errorf("key k ran %v, want %v", got, want)
				}
				if len(other) != len(tc.queued) {
					t.Errorf("key o ran %d items, want %d", len(other), len(tc.queued))
				}
				if st := s.Stats(); st.QueuedItems != 0 {
					t.Errorf("%d items left queued", st.QueuedItems)
				}
				if strict && ok {
					// The inserted item (offset -1) runs right before the item it precedes.
					i := slices.Index(seq, -1)
					pos := slices.Index(tc.want, 50)
					if i < 0 || i+1 >= len(seq) || seq[i+1] != int64(pos) {
						t.Errorf("strict order %v: the inserted item does not run right before offset %d", seq, pos)
					}
				}
			})
		}
	}
}

func push(t *testing.T, s *Scheduler[int], it Item[int]) {
	t.Helper()
	if err := s.Push(it); err != nil {
		t.Fatal(err)
	}
}

// TestRetryIsolating puts a failed batch's items back, isolating only the keys asked for: their
// items then run one per batch, the other keys' items in batches as before.
func TestRetryIsolating(t *testing.T) {
	s, err := New[int](Config{MaxKeyItems: 100, MaxBatchItems: 100, MaxBatches: 1})
	if err != nil {
		t.Fatal(err)
	}
	s.AddStream(1)
	for i := range 3 {
		push(t, s, Item[int]{Stream: 1, Key: "a", Offset: int64(i)})
		push(t, s, Item[int]{Stream: 1, Key: "b", Offset: int64(10 + i)})
	}
	b, ok := s.Next(time.Time{})
	if !ok || len(b.Items) != 6 {
		t.Fatalf("first batch: %v %d items, want all 6", ok, len(b.Items))
	}
	if err := s.RetryIsolating(b.ID, func(key string) bool { return key == "a" }); err != nil {
		t.Fatal(err)
	}
	var sizes []string
	for {
		b, ok := s.Next(time.Time{})
		if !ok {
			break
		}
		keys := ""
		for _, it := range b.Items {
			keys += it.Key
		}
		sizes = append(sizes, keys)
		if err := s.Complete(b.ID); err != nil {
			t.Fatal(err)
		}
	}
	// a's items alone, one per batch; b's together.
	a, bb := 0, 0
	for _, keys := range sizes {
		switch keys {
		case "a":
			a++
		case "bbb":
			bb++
		default:
			t.Errorf("batch of keys %q: want a alone or b's three together", keys)
		}
	}
	if a != 3 || bb != 1 {
		t.Errorf("batches %q, want a three times alone and bbb once", sizes)
	}
}
