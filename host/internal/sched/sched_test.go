package sched

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestConfigValidate(t *testing.T) {
	tests := []struct {
		name string
		cfg  Config
		want []string // substrings, one per reported problem
	}{
		{"zero value", Config{}, nil},
		{"explicit", Config{MaxBatchItems: 1, MaxKeyItems: 1, MaxBatches: 1, MaxStreamInFlight: 1,
			HighItems: 2, LowItems: 1, HighBytes: 2, LowBytes: 1, MaxKeyDepth: 1}, nil},
		{"high only: low defaults to half", Config{HighItems: 10, HighBytes: 3}, nil},
		{"high of one", Config{HighItems: 1, HighBytes: 1}, nil},
		{"negative", Config{MaxBatchItems: -1, MaxKeyDepth: -5}, []string{"MaxBatchItems is -1", "MaxKeyDepth is -5"}},
		{"low not below high", Config{HighItems: 10, LowItems: 10, LowBytes: 64 << 20},
			[]string{"LowItems (10) must be below HighItems (10)", "LowBytes (67108864) must be below HighBytes (33554432)"}},
		{"low above default high", Config{LowItems: 9000}, []string{"LowItems (9000) must be below HighItems (8192)"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.cfg.Validate()
			_, newErr := New[int](tc.cfg)
			if (err == nil) != (newErr == nil) {
				t.Fatalf("Validate() = %v but New() = %v", err, newErr)
			}
			if len(tc.want) == 0 {
				if err != nil {
					t.Fatalf("Validate() = %v", err)
				}
				return
			}
			if !errors.Is(err, ErrInvalidConfig) {
				t.Fatalf("Validate() = %v, not ErrInvalidConfig", err)
			}
			lines := strings.Split(err.Error(), "\n")
			if len(lines) != len(tc.want) {
				t.Fatalf("Validate() reported %d problems, want %d:\n%v", len(lines), len(tc.want), err)
			}
			for i, w := range tc.want {
				if !strings.Contains(lines[i], w) {
					t.Errorf("problem %d = %q, want it to mention %q", i, lines[i], w)
				}
			}
		})
	}
}

func TestConfigDefaults(t *testing.T) {
	s, err := New[int](Config{HighItems: 100})
	if err != nil {
		t.Fatal(err)
	}
	want := Config{MaxBatchItems: 256, MaxKeyItems: 64, MaxBatches: 4, MaxStreamInFlight: 1024,
		HighItems: 100, LowItems: 50, HighBytes: 32 << 20, LowBytes: 16 << 20, MaxKeyDepth: 4096}
	if got := s.Config(); got != want {
		t.Fatalf("Config() = %+v, want %+v", got, want)
	}
}

func TestErrors(t *testing.T) {
	tests := []struct {
		name string
		do   func(s *Scheduler[int]) error
		want error
	}{
		{"push to unknown stream", func(s *Scheduler[int]) error { return s.Push(Item[int]{Stream: 9}) }, ErrUnknownStream},
		{"push to removed stream", func(s *Scheduler[int]) error {
			s.RemoveStream(0)
			return s.Push(Item[int]{})
		}, ErrUnknownStream},
		{"negative size", func(s *Scheduler[int]) error { return s.Push(Item[int]{Size: -1}) }, ErrNegativeSize},
		{"complete unknown batch", func(s *Scheduler[int]) error { return s.Complete(1) }, ErrUnknownBatch},
		{"retry unknown batch", func(s *Scheduler[int]) error { return s.Retry(1, true) }, ErrUnknownBatch},
		{"complete twice", func(s *Scheduler[int]) error {
			s.Push(Item[int]{Key: "a"})
			b, _ := s.Next(epoch)
			s.Complete(b.ID)
			return s.Complete(b.ID)
		}, ErrUnknownBatch},
		{"retry after complete", func(s *Scheduler[int]) error {
			s.Push(Item[int]{Key: "a"})
			b, _ := s.Next(epoch)
			s.Complete(b.ID)
			return s.Retry(b.ID, false)
		}, ErrUnknownBatch},
		{"delay unknown stream", func(s *Scheduler[int]) error { return s.Delay(9, "a", epoch) }, ErrUnknownStream},
		{"delay idle key", func(s *Scheduler[int]) error { return s.Delay(0, "a", epoch) }, ErrUnknownKey},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s, _ := New[int](Config{})
			s.AddStream(0)
			if err := tc.do(s); !errors.Is(err, tc.want) {
				t.Fatalf("got %v, want %v", err, tc.want)
			}
			mustCheck(t, s)
		})
	}
}

// TestModel drives the scheduler with random operations over thousands of keys (fixed seeds),
// completing batches in random order, and checks every batch against the model: per-key FIFO,
// no key in two in-flight batches, the batch, key, stream and pool limits, isolation, delays,
// and finally that every item completed exactly once in push order per key.
func TestModel(t *testing.T) {
	tests := []struct {
		name    string
		cfg     Config
		streams int
		keys    int
		ops     int
	}{
		{"defaults", Config{}, 3, 3000, 60_000},
		{"small batches", Config{MaxBatchItems: 8, MaxKeyItems: 3, MaxBatches: 3, MaxStreamInFlight: 20}, 3, 2000, 40_000},
		{"strict", Config{MaxStreamInFlight: 1, MaxBatches: 3}, 3, 1000, 30_000},
		{"tight marks", Config{MaxBatchItems: 16, MaxKeyItems: 4, HighItems: 64, MaxKeyDepth: 8, MaxStreamInFlight: 32}, 2, 500, 30_000},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(1, uint64(len(tc.name))))
			h := newHarness(t, tc.cfg, false)
			for i := range tc.streams {
				h.addStream(uint32(i))
			}
			for op := range tc.ops {
				switch r := rng.IntN(100); {
				case r < 55:
					st := uint32(rng.IntN(tc.streams))
					if !h.paused(st) || r < 5 { // mostly respect backpressure
						h.push(st, fmt.Sprint("k", rng.IntN(tc.keys)), rng.IntN(100))
					}
				case r < 75:
					h.next()
				case r < 93:
					if len(h.batchIDs) > 0 {
						h.finish(h.batchIDs[rng.IntN(len(h.batchIDs))], false, false)
					}
				case r < 96:
					if len(h.batchIDs) > 0 {
						id := h.batchIDs[rng.IntN(len(h.batchIDs))]
						h.finish(id, true, rng.IntN(2) == 0)
					}
				case r < 98:
					if k, ok := h.itemKey[1+rng.IntN(h.seq+1)]; ok {
						h.delay(k.stream, k.key, h.now.Add(time.Duration(rng.IntN(3000))*time.Millisecond))
					}
				default:
					h.now = h.now.Add(time.Duration(rng.IntN(1000)) * time.Millisecond)
					h.flow()
				}
				if op%5000 == 0 {
					h.check()
				}
			}
			h.drain()
			if len(h.completed) != h.pushed {
				t.Fatalf("%v: not every item completed", h)
			}
			t.Log(h)
		})
	}
}

// TestFairness checks S5: every cold key is served within a bounded number of batches despite
// a hot key or a busy stream.
func TestFairness(t *testing.T) {
	t.Run("hot key vs cold keys", func(t *testing.T) {
		const cold = 500
		cfg := Config{MaxBatchItems: 16, MaxKeyItems: 4, MaxBatches: 1}
		s, _ := New[int](cfg)
		s.AddStream(0)
		for i := range 10_000 {
			s.Push(Item[int]{Key: "hot", Offset: int64(i)})
		}
		for i := range cold {
			s.Push(Item[int]{Key: fmt.Sprint("cold", i), Offset: int64(10_000 + i)})
		}
		served, batches := 0, 0
		for served < cold {
			b, ok := s.Next(epoch)
			if !ok {
				t.Fatal("no batch")
			}
			batches++
			hot := 0
			for _, it := range b.Items {
				if it.Key == "hot" {
					hot++
				} else {
					served++
				}
			}
			if hot > cfg.MaxKeyItems {
				t.Fatalf("batch %d: hot key has %d items", batches, hot)
			}
			s.Complete(b.ID)
		}
		// Each batch serves at least MaxBatchItems-MaxKeyItems cold keys.
		if bound := (cold+11)/12 + 1; batches > bound {
			t.Fatalf("cold keys served after %d batches, bound %d", batches, bound)
		}
	})
	t.Run("cold keys arriving while hot keys run", func(t *testing.T) {
		// Keys h0..h9 always have thousands of items queued; a new cold key arrives before
		// every batch. Each cold key must run within a few batches of its arrival.
		cfg := Config{MaxBatchItems: 8, MaxKeyItems: 2, MaxBatches: 2}
		s, _ := New[int](cfg)
		s.AddStream(0)
		s.AddStream(1)
		for i := range 3000 {
			s.Push(Item[int]{Stream: 0, Key: fmt.Sprint("h", i%10), Offset: int64(i)})
		}
		arrived := map[string]int{} // cold key -> batch count at arrival
		worst, batches := 0, 0
		var inflight []uint64
		for i := range 400 {
			k := fmt.Sprint("cold", i)
			s.Push(Item[int]{Stream: uint32(i % 2), Key: k, Offset: int64(10_000 + i)})
			arrived[k] = batches
			for len(inflight) < cfg.MaxBatches {
				b, ok := s.Next(epoch)
				if !ok {
					break
				}
				batches++
				inflight = append(inflight, b.ID)
				for _, it := range b.Items {
					if at, ok := arrived[it.Key]; ok {
						worst = max(worst, batches-at)
						delete(arrived, it.Key)
					}
				}
			}
			s.Complete(inflight[0])
			inflight = inflight[1:]
		}
		// Ten hot keys and a cold key share stream 0's turns: at most two batches of them
		// before the cold key's turn comes, plus the batch it rides in.
		if worst > 4 {
			t.Fatalf("a cold key waited %d batches", worst)
		}
	})
	t.Run("stream with one key vs busy stream", func(t *testing.T) {
		s, _ := New[int](Config{MaxBatchItems: 8, MaxBatches: 1})
		s.AddStream(0)
		s.AddStream(1)
		for i := range 5000 {
			s.Push(Item[int]{Stream: 0, Key: fmt.Sprint("k", i), Offset: int64(i)})
		}
		s.Push(Item[int]{Stream: 1, Key: "lonely"})
		b, _ := s.Next(epoch)
		if !slices.ContainsFunc(b.Items, func(it Item[int]) bool { return it.Stream == 1 }) {
			t.Fatalf("first batch %v has nothing of stream 1", b.Items)
		}
	})
}

// TestStrictOrder checks S3 with MaxStreamInFlight 1: each stream dispatches one item at a
// time, strictly in push order across keys, while streams run side by side; failures retry in
// place.
func TestStrictOrder(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 7))
	h := newHarness(t, Config{MaxStreamInFlight: 1, MaxBatches: 3}, true)
	h.addStream(0)
	h.addStream(1)
	for range 300 {
		st := uint32(rng.IntN(2))
		h.push(st, fmt.Sprint("k", rng.IntN(50)), 0)
	}
	var order [2][]int
	concurrent := false
	for len(h.pending) > 0 {
		for {
			b, ok := h.next()
			if !ok {
				break
			}
			streams := map[uint32]int{}
			for _, it := range b.Items {
				streams[it.Stream]++
			}
			concurrent = concurrent || len(h.batches) > 1 || len(streams) > 1
		}
		id := h.batchIDs[rng.IntN(len(h.batchIDs))]
		retry := rng.IntN(5) == 0
		if !retry {
			for _, q := range h.batches[id] {
				order[h.itemKey[q].stream] = append(order[h.itemKey[q].stream], q)
			}
		}
		h.finish(id, retry, false)
	}
	for i, o := range order {
		if !slices.IsSorted(o) || len(o) == 0 {
			t.Fatalf("stream %d completed out of push order: %v", i, o)
		}
	}
	if !concurrent {
		t.Fatal("the two streams never ran side by side")
	}
}

// TestBackpressure checks S4: a producer that stops pushing when Flow says paused never
// queues more than the high mark (for bytes, plus the item that crossed it), pausing happens at
// the high mark and resuming at the low mark, and no item is lost.
func TestBackpressure(t *testing.T) {
	tests := []struct {
		name     string
		cfg      Config
		keys     int
		size     func(i int) int
		maxItems int // bound on queued items while the producer respects pause (checking Flow after each push)
		maxBytes int
	}{
		{"items", Config{HighItems: 100, LowItems: 40, MaxBatchItems: 2, MaxBatches: 2}, 50,
			func(int) int { return 10 }, 100, 1 << 30},
		{"bytes", Config{HighBytes: 10_000, LowBytes: 2_000, MaxBatchItems: 2, MaxBatches: 2}, 50,
			func(i int) int { return 50 + i%200 }, 1 << 30, 10_000 + 250},
		{"key depth", Config{MaxKeyDepth: 64, MaxBatchItems: 2, MaxBatches: 2}, 1,
			func(int) int { return 1 }, 64, 1 << 30},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, tc.cfg, true)
			h.addStream(0)
			c := h.cfg
			const total = 5000
			pushedItems, pauses, resumes := 0, 0, 0
			for step := 0; pushedItems < total || len(h.pending) > 0; step++ {
				if step%4 != 3 { // the producer is three times faster than the consumer
					if !h.paused(0) && pushedItems < total {
						h.push(0, fmt.Sprint("k", pushedItems%tc.keys), tc.size(pushedItems))
						pushedItems++
					}
				} else {
					if b, ok := h.next(); ok {
						h.finish(b.ID, false, false)
					}
				}
				was := h.paused(0)
				h.flow()
				st := h.s.Stats().Streams[0]
				if st.QueuedItems > tc.maxItems || st.QueuedBytes > tc.maxBytes {
					t.Fatalf("step %d: %d items, %d bytes queued", step, st.QueuedItems, st.QueuedBytes)
				}
				switch now := h.paused(0); {
				case now && !was:
					pauses++
					deep := tc.name == "key depth" && st.QueuedItems >= c.MaxKeyDepth
					if st.QueuedItems < c.HighItems && st.QueuedBytes < c.HighBytes && !deep {
						t.Fatalf("step %d: paused at %d items, %d bytes", step, st.QueuedItems, st.QueuedBytes)
					}
				case !now && was:
					resumes++
					if st.QueuedItems > c.LowItems || st.QueuedBytes > c.LowBytes {
						t.Fatalf("step %d: resumed at %d items, %d bytes", step, st.QueuedItems, st.QueuedBytes)
					}
				}
			}
			if pauses < 5 || resumes < 5 {
				t.Fatalf("%d pauses, %d resumes", pauses, resumes)
			}
			h.drain()
			if len(h.completed) != total {
				t.Fatalf("%d of %d items completed", len(h.completed), total)
			}
		})
	}
}

// TestStuckKey checks S4: a key whose batch never completes pauses its own stream once it is
// deep, but neither other keys of that stream nor the other stream stop.
func TestStuckKey(t *testing.T) {
	h := newHarness(t, Config{MaxBatchItems: 8, MaxKeyItems: 4, MaxBatches: 3, MaxKeyDepth: 32}, true)
	h.addStream(0)
	h.addStream(1)
	h.push(0, "stuck", 0)
	stuck, _ := h.next()
	done := map[uint32]int{}
	paused0 := false
	for i := range 4000 {
		for st := range uint32(2) {
			if !h.paused(st) {
				key := fmt.Sprint("k", i%20)
				if st == 0 && i%2 == 0 {
					key = "stuck"
				}
				h.push(st, key, 0)
			}
		}
		if b, ok := h.next(); ok {
			for _, it := range b.Items {
				done[it.Stream]++
			}
			h.finish(b.ID, false, false)
		}
		h.flow()
		paused0 = paused0 || h.paused(0)
		if h.paused(1) {
			t.Fatalf("step %d: stream 1 paused", i)
		}
	}
	if !paused0 {
		t.Fatal("stream 0 never paused behind its stuck key")
	}
	if done[1] < 3000 || done[0] < 20 {
		t.Fatalf("completed per stream: %v", done)
	}
	if st := h.s.Stats().Streams[0]; st.QueuedItems > 32+20 {
		t.Fatalf("stream 0 queued %d items behind the stuck key", st.QueuedItems)
	}
	h.finish(stuck.ID, false, false)
	h.drain()
}

// TestRetryIsolate checks that after Retry with isolate every item of the failed batch runs
// alone in its own batch until all of them have completed, in order per key, while other keys
// keep being batched together; afterwards the keys batch normally again.
func TestRetryIsolate(t *testing.T) {
	h := newHarness(t, Config{MaxBatchItems: 16, MaxKeyItems: 8, MaxBatches: 4}, true)
	h.addStream(0)
	for _, k := range []string{"a", "a", "a", "b", "b"} {
		h.push(0, k, 0)
	}
	b, _ := h.next()
	if len(b.Items) != 5 {
		t.Fatalf("first batch %v", b.Items)
	}
	failed := map[int]bool{}
	for _, it := range b.Items {
		failed[it.Value] = true
	}
	h.finish(b.ID, true, true)
	for _, k := range []string{"a", "b", "c", "c", "d"} {
		h.push(0, k, 0)
	}
	isolated, others := 0, 0
	for len(failed) > 0 {
		b, ok := h.next()
		if !ok {
			// Complete the oldest batch to make room.
			h.finish(h.batchIDs[0], false, false)
			continue
		}
		hasFailed := slices.ContainsFunc(b.Items, func(it Item[int]) bool { return failed[it.Value] })
		if hasFailed {
			if len(b.Items) != 1 {
				t.Fatalf("isolated item shares batch %v", b.Items)
			}
			isolated++
			delete(failed, b.Items[0].Value)
		} else {
			others += len(b.Items)
		}
		h.finish(b.ID, false, false)
	}
	if isolated != 5 {
		t.Fatalf("%d isolated batches, want 5", isolated)
	}
	// a and b are batched normally again.
	h.push(0, "a", 0)
	h.push(0, "a", 0)
	for {
		b, ok := h.next()
		if !ok {
			break
		}
		h.finish(b.ID, false, false)
		if n := len(b.Items); n > 1 && b.Items[n-1].Key == "a" && b.Items[n-2].Key == "a" {
			h.drain()
			return
		}
	}
	t.Fatal("key a never batched two items after isolation ended")
}

// TestRemoveStream checks S2 across random histories: RemoveStream drops exactly the stream's
// queued items, in-flight batches of it finish without effect, and a stream added again with
// the same ID waits for them.
func TestRemoveStream(t *testing.T) {
	for seed := range uint64(10) {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 99))
			h := newHarness(t, Config{MaxBatchItems: 6, MaxKeyItems: 2, MaxBatches: 3, MaxStreamInFlight: 5}, true)
			for i := range uint32(3) {
				h.addStream(i)
			}
			for range 2000 {
				switch r := rng.IntN(20); {
				case r < 10:
					h.push(uint32(rng.IntN(3)), fmt.Sprint("k", rng.IntN(10)), 1)
				case r < 14:
					h.next()
				case r < 17:
					if len(h.batchIDs) > 0 {
						h.finish(h.batchIDs[rng.IntN(len(h.batchIDs))], rng.IntN(4) == 0, false)
					}
				case r < 18:
					h.remove(uint32(rng.IntN(3)))
				default:
					h.addStream(uint32(rng.IntN(3)))
				}
			}
			h.drain()
		})
	}
}

// TestMemoryFreed checks that empty keys are freed and the structures shrink once thousands of
// keys have drained.
func TestMemoryFreed(t *testing.T) {
	s, _ := New[int](Config{})
	s.AddStream(0)
	for i := range 20_000 {
		s.Push(Item[int]{Key: fmt.Sprint("k", i), Offset: int64(i)})
	}
	for {
		b, ok := s.Next(epoch)
		if !ok {
			break
		}
		s.Complete(b.ID)
	}
	mustCheck(t, s)
	st := s.streams[0]
	if len(st.keys) != 0 || st.keysPeak > 1024 || len(st.ready.buf) > minDeque || s.keys != 0 {
		t.Fatalf("after drain: %d keys, peak %d, ready buffer %d", len(st.keys), st.keysPeak, len(st.ready.buf))
	}
	if len(s.free) > s.cfg.MaxBatches {
		t.Fatalf("%d recycled batch records", len(s.free))
	}
	if len(s.keyPool) > keyPoolSize {
		t.Fatalf("%d recycled keys kept with no key left, want at most %d", len(s.keyPool), keyPoolSize)
	}
}

// TestKeyPoolFollowsKeys checks that the keys a completed batch freed are kept for the next
// fetch's new keys while as many keys are still queued, beyond the 1024 kept however few exist:
// with 6000 keys queued, a fetch of 2048 new keys after 2048 completed made none.
func TestKeyPoolFollowsKeys(t *testing.T) {
	s, _ := New[int](Config{HighItems: 100_000, LowItems: 50_000})
	s.AddStream(0)
	push := func(from, to int) {
		for i := from; i < to; i++ {
			if err := s.Push(Item[int]{Key: fmt.Sprint("k", i), Offset: int64(i)}); err != nil {
				t.Fatal(err)
			}
		}
	}
	push(0, 6000)
	done := 0
	for done < 2000 {
		b, ok := s.Next(epoch)
		if !ok {
			t.Fatal("no batch with keys queued")
		}
		done += len(b.Items)
		if err := s.Complete(b.ID); err != nil {
			t.Fatal(err)
		}
	}
	if want := 6000 - done; s.keys != want || len(s.keyPool) != done {
		t.Fatalf("after %d keys completed: %d keys, %d pooled; want %d keys and every freed one pooled", done, s.keys, len(s.keyPool), want)
	}
	push(6000, 6000+done)
	if len(s.keyPool) != 0 {
		t.Fatalf("%d pooled keys left after as many new keys came", len(s.keyPool))
	}
	mustCheck(t, s)
}

func TestDeque(t *testing.T) {
	var d deque[int]
	var model []int
	rng := rand.New(rand.NewPCG(3, 3))
	for range 100_000 {
		switch r := rng.IntN(10); {
		case r < 4:
			v := rng.Int()
			d.pushBack(v)
			model = append(model, v)
		case r < 6:
			v := rng.Int()
			d.pushFront(v)
			model = slices.Insert(model, 0, v)
		case len(model) > 0:
			if got := d.popFront(); got != model[0] {
				t.Fatalf("popFront = %d, want %d", got, model[0])
			}
			model = model[1:]
		}
		if d.len() != len(model) || len(model) > 0 && (d.front() != model[0] || d.at(len(model)-1) != model[len(model)-1]) {
			t.Fatal("deque differs from model")
		}
		if len(d.buf) > minDeque && d.len() < len(d.buf)/8 {
			t.Fatalf("buffer of %d for %d elements", len(d.buf), d.len())
		}
	}
}

// TestReuse checks that batches are formed in the Items that Reuse handed back, with no
// allocation of their own, and that Reuse leaves alone the Items of a batch still in flight or
// of one the scheduler did not form.
func TestReuse(t *testing.T) {
	s, err := New[int](Config{MaxBatchItems: 8, MaxKeyItems: 8, MaxBatches: 2})
	if err != nil {
		t.Fatal(err)
	}
	s.AddStream(0)
	names := []string{"a", "b", "c", "d", "e", "f", "g", "h"}
	push := func() {
		for i, name := range names {
			if err := s.Push(Item[int]{Stream: 0, Key: name, Size: 1, Value: i + 1}); err != nil {
				t.Fatal(err)
			}
		}
	}
	push()
	first, ok := s.Next(epoch)
	if !ok || len(first.Items) != 8 {
		t.Fatalf("Next() = %v, %v; want a batch of 8", first, ok)
	}
	s.Reuse(first) // in flight: left alone
	s.Reuse(Batch[int]{ID: 99, Items: first.Items})
	if first.Items[0].Value == 0 {
		t.Fatal("Reuse cleared the Items of a batch in flight")
	}
	if err := s.Complete(first.ID); err != nil {
		t.Fatal(err)
	}
	s.Reuse(first)
	push()
	second, ok := s.Next(epoch)
	if !ok || len(second.Items) != 8 {
		t.Fatalf("Next() = %v, %v; want a batch of 8", second, ok)
	}
	if &second.Items[0] != &first.Items[:1][0] {
		t.Error("the batch after Reuse was not formed in the Items handed back")
	}
	for i, it := range second.Items {
		if it.Value != i+1 {
			t.Fatalf("item %d = %v, want value %d", i, it, i+1)
		}
	}
	if err := s.Complete(second.ID); err != nil {
		t.Fatal(err)
	}
	s.Reuse(second)
	round := func(reuse bool) func() {
		return func() {
			push()
			b, ok := s.Next(epoch)
			if !ok {
				t.Fatal("no batch")
			}
			if err := s.Complete(b.ID); err != nil {
				t.Fatal(err)
			}
			if reuse {
				s.Reuse(b)
			}
		}
	}
	with := testing.AllocsPerRun(20, round(true))
	s.spare, s.reusing = nil, false
	without := testing.AllocsPerRun(20, round(false))
	t.Logf("push, Next and Complete of a batch of 8: %.0f allocations, %.0f with Reuse", without, with)
	if with > without-1 {
		t.Errorf("push, Next and Complete of a batch of 8: %.0f allocations, %.0f with Reuse; want one fewer", without, with)
	}
}
