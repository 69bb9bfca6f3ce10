package sched

import (
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"
)

// hkey names a key of one incarnation of a stream (a stream removed and added again is a new
// incarnation).
type hkey struct {
	stream uint32
	gen    int
	key    string
}

// harness drives a Scheduler[int] (the Value is a unique sequence number) alongside a model of
// what S1-S6 and S17 allow, and fails the test on the first difference.
type harness struct {
	t    testing.TB
	s    *Scheduler[int]
	cfg  Config
	now  time.Time
	full bool // check the invariants after every operation, and work conservation after Next

	seq                         int
	gens                        int                // incarnations handed out
	gen                         map[uint32]int     // current incarnation of each live stream
	items                       map[int]Item[int]  // every pushed item not yet completed or dropped
	itemKey                     map[int]hkey       // and its key
	pending                     map[hkey][]int     // per key: items queued or in flight, in push order
	order                       map[hkey][]int     // strict mode: per stream (key ""): items not completed, in push order
	batches                     map[uint64][]int   // in-flight batches
	batchIDs                    []uint64           // in-flight batch IDs in dispatch order
	busy                        map[hkey]uint64    // keys in flight
	inFlight                    map[hkey]int       // per stream incarnation (key ""): items in flight
	delayed                     map[hkey]time.Time // per key: deadline set by Delay
	iso                         map[int]bool       // items that must run alone
	completed                   map[int]bool       // items completed
	applied                     map[hkey][]int     // per key: items in completion order
	reported                    map[uint32]bool    // flow state last returned by Flow
	dispatched, pushed, dropped int
}

func newHarness(t testing.TB, cfg Config, full bool) *harness {
	s, err := New[int](cfg)
	if err != nil {
		t.Fatal(err)
	}
	return &harness{
		t: t, s: s, cfg: s.Config(), now: epoch, full: full,
		gen: map[uint32]int{}, items: map[int]Item[int]{}, itemKey: map[int]hkey{},
		pending: map[hkey][]int{}, order: map[hkey][]int{}, batches: map[uint64][]int{},
		busy: map[hkey]uint64{}, inFlight: map[hkey]int{}, delayed: map[hkey]time.Time{},
		iso: map[int]bool{}, completed: map[int]bool{}, applied: map[hkey][]int{},
		reported: map[uint32]bool{},
	}
}

func (h *harness) fatalf(format string, args ...any) {
	h.t.Helper()
	h.t.Fatalf(format, args...)
}

func (h *harness) strict() bool { return h.cfg.MaxStreamInFlight == 1 }

func (h *harness) streamKey(stream uint32, gen int) hkey { return hkey{stream: stream, gen: gen} }

func (h *harness) check() {
	h.t.Helper()
	if err := h.s.checkInvariants(); err != nil {
		h.fatalf("invariants: %v", err)
	}
}

func (h *harness) after() {
	h.t.Helper()
	if h.full {
		h.check()
	}
}

func (h *harness) addStream(id uint32) {
	h.s.AddStream(id)
	if _, ok := h.gen[id]; !ok {
		h.gens++
		h.gen[id] = h.gens
	}
	h.after()
}

func (h *harness) push(stream uint32, key string, size int) {
	h.t.Helper()
	h.seq++
	it := Item[int]{Stream: stream, Key: key, Offset: int64(h.seq), Size: size, Value: h.seq}
	err := h.s.Push(it)
	gen, live := h.gen[stream]
	switch {
	case !live:
		if !errors.Is(err, ErrUnknownStream) {
			h.fatalf("Push to removed stream %d: %v", stream, err)
		}
		return
	case err != nil:
		h.fatalf("Push: %v", err)
	}
	k := hkey{stream, gen, key}
	h.items[h.seq] = it
	h.itemKey[h.seq] = k
	h.pending[k] = append(h.pending[k], h.seq)
	if h.strict() {
		sk := h.streamKey(stream, gen)
		h.order[sk] = append(h.order[sk], h.seq)
	}
	h.pushed++
	h.after()
}

// ready reports whether the model allows key k to be dispatched now.
func (h *harness) ready(k hkey) bool {
	p := h.pending[k]
	if len(p) == 0 || h.busy[k] != 0 || h.delayed[k].After(h.now) || h.gen[k.stream] != k.gen {
		return false
	}
	if h.held(k.stream, k.gen) {
		return false
	}
	sk := h.streamKey(k.stream, k.gen)
	if h.inFlight[sk] >= h.cfg.MaxStreamInFlight {
		return false
	}
	if h.strict() {
		return h.order[sk][0] == p[0]
	}
	return true
}

// held reports whether an earlier incarnation of the stream still has items in flight.
func (h *harness) held(stream uint32, gen int) bool {
	for k, n := range h.inFlight {
		if k.stream == stream && k.gen < gen && n > 0 {
			return true
		}
	}
	return false
}

func (h *harness) next() (Batch[int], bool) {
	h.t.Helper()
	b, ok := h.s.Next(h.now)
	if !ok {
		if h.full && len(h.batches) < h.cfg.MaxBatches {
			for k := range h.pending {
				if h.ready(k) {
					h.fatalf("Next formed no batch but key %v is ready", k)
				}
			}
		}
		h.after()
		return b, false
	}
	if len(h.batches) >= h.cfg.MaxBatches {
		h.fatalf("batch %d formed with %d batches in flight", b.ID, len(h.batches))
	}
	if n := len(b.Items); n == 0 || n > h.cfg.MaxBatchItems {
		h.fatalf("batch %d has %d items", b.ID, n)
	}
	if _, dup := h.batches[b.ID]; dup {
		h.fatalf("batch ID %d reused", b.ID)
	}
	seen := map[hkey]bool{}
	var seqs []int
	for i := 0; i < len(b.Items); {
		it := b.Items[i]
		k := h.itemKey[it.Value]
		if it.Stream != k.stream || it.Key != k.key || h.items[it.Value] != it {
			h.fatalf("batch %d: item %v not as pushed", b.ID, it)
		}
		j := i
		for j < len(b.Items) && b.Items[j].Stream == it.Stream && b.Items[j].Key == it.Key {
			j++
		}
		n := j - i
		if seen[k] {
			h.fatalf("batch %d: key %v in two runs", b.ID, k)
		}
		seen[k] = true
		if !h.ready(k) {
			h.fatalf("batch %d: key %v dispatched but not ready (busy %d, delayed until %v, now %v, held %v)",
				b.ID, k, h.busy[k], h.delayed[k], h.now, h.held(k.stream, k.gen))
		}
		if n > h.cfg.MaxKeyItems {
			h.fatalf("batch %d: key %v contributes %d items", b.ID, k, n)
		}
		p := h.pending[k]
		for x := range n {
			if b.Items[i+x].Value != p[x] {
				h.fatalf("batch %d: key %v item %d is %d, want %d (FIFO)", b.ID, k, x, b.Items[i+x].Value, p[x])
			}
			if h.iso[p[x]] && len(b.Items) != 1 {
				h.fatalf("batch %d: isolated item %d not alone", b.ID, p[x])
			}
			seqs = append(seqs, p[x])
		}
		sk := h.streamKey(k.stream, k.gen)
		if h.inFlight[sk]+n > h.cfg.MaxStreamInFlight {
			h.fatalf("batch %d: stream %d would have %d in flight", b.ID, k.stream, h.inFlight[sk]+n)
		}
		h.inFlight[sk] += n
		h.busy[k] = b.ID
		i = j
	}
	h.batches[b.ID] = seqs
	h.batchIDs = append(h.batchIDs, b.ID)
	h.dispatched += len(seqs)
	h.after()
	return b, true
}

func (h *harness) finish(id uint64, retry, isolate bool) {
	h.t.Helper()
	var err error
	if retry {
		err = h.s.Retry(id, isolate)
	} else {
		err = h.s.Complete(id)
	}
	seqs, ok := h.batches[id]
	if !ok {
		if !errors.Is(err, ErrUnknownBatch) {
			h.fatalf("finishing unknown batch %d: %v", id, err)
		}
		return
	}
	if err != nil {
		h.fatalf("finishing batch %d: %v", id, err)
	}
	delete(h.batches, id)
	h.batchIDs = slices.DeleteFunc(h.batchIDs, func(x uint64) bool { return x == id })
	for _, q := range seqs {
		k := h.itemKey[q]
		sk := h.streamKey(k.stream, k.gen)
		h.inFlight[sk]--
		if h.inFlight[sk] == 0 {
			delete(h.inFlight, sk)
		}
		delete(h.busy, k)
		live := h.gen[k.stream] == k.gen
		if retry && live {
			if isolate {
				h.iso[q] = true
			}
			continue
		}
		// Completed, or discarded because its stream is gone.
		if p := h.pending[k]; len(p) == 0 || p[0] != q {
			h.fatalf("batch %d: item %d is not the oldest of key %v", id, q, k)
		}
		h.pending[k] = h.pending[k][1:]
		if h.strict() && live {
			if o := h.order[sk]; o[0] != q {
				h.fatalf("strict stream %d: completed %d before %d", k.stream, q, o[0])
			}
			h.order[sk] = h.order[sk][1:]
			if len(h.order[sk]) == 0 {
				delete(h.order, sk)
			}
		}
		if len(h.pending[k]) == 0 {
			delete(h.pending, k)
			delete(h.delayed, k)
		}
		delete(h.iso, q)
		delete(h.items, q)
		delete(h.itemKey, q)
		if !retry && live {
			if h.completed[q] {
				h.fatalf("item %d completed twice", q)
			}
			h.completed[q] = true
			h.applied[k] = append(h.applied[k], q)
		}
	}
	h.after()
}

func (h *harness) delay(stream uint32, key string, until time.Time) {
	h.t.Helper()
	err := h.s.Delay(stream, key, until)
	gen, live := h.gen[stream]
	k := hkey{stream, gen, key}
	switch {
	case !live:
		if !errors.Is(err, ErrUnknownStream) {
			h.fatalf("Delay on removed stream: %v", err)
		}
	case len(h.pending[k]) == 0:
		if !errors.Is(err, ErrUnknownKey) {
			h.fatalf("Delay on idle key %v: %v", k, err)
		}
	case err != nil:
		h.fatalf("Delay: %v", err)
	case until.IsZero():
		delete(h.delayed, k)
	default:
		h.delayed[k] = until
	}
	h.after()
}

func (h *harness) remove(stream uint32) {
	h.t.Helper()
	got := h.s.RemoveStream(stream)
	gen, live := h.gen[stream]
	if !live {
		if got != nil {
			h.fatalf("RemoveStream of unknown stream %d returned %d items", stream, len(got))
		}
		return
	}
	delete(h.gen, stream)
	delete(h.reported, stream)
	var want []int
	for k, p := range h.pending {
		if k.stream != stream || k.gen != gen {
			continue
		}
		keep := p[:0:0]
		for _, q := range p {
			if h.inFlightItem(q) {
				keep = append(keep, q)
			} else {
				want = append(want, q)
				delete(h.items, q)
				delete(h.itemKey, q)
				delete(h.iso, q)
			}
		}
		if len(keep) == 0 {
			delete(h.pending, k)
		} else {
			h.pending[k] = keep
		}
		delete(h.delayed, k)
	}
	delete(h.order, h.streamKey(stream, gen))
	gotSeqs := make([]int, len(got))
	for i, it := range got {
		gotSeqs[i] = it.Value
		if i > 0 && got[i-1].Offset > it.Offset {
			h.fatalf("RemoveStream: dropped items out of offset order")
		}
	}
	slices.Sort(gotSeqs)
	slices.Sort(want)
	if !slices.Equal(gotSeqs, want) {
		h.fatalf("RemoveStream(%d) dropped %v, want %v", stream, gotSeqs, want)
	}
	h.dropped += len(want)
	h.after()
}

func (h *harness) inFlightItem(q int) bool {
	for _, seqs := range h.batches {
		if slices.Contains(seqs, q) {
			return true
		}
	}
	return false
}

func (h *harness) flow() {
	h.t.Helper()
	seen := map[uint32]bool{}
	for _, c := range h.s.Flow() {
		if _, live := h.gen[c.Stream]; !live {
			h.fatalf("Flow reports removed stream %d", c.Stream)
		}
		if seen[c.Stream] {
			h.fatalf("Flow reports stream %d twice", c.Stream)
		}
		seen[c.Stream] = true
		if h.reported[c.Stream] == c.Paused {
			h.fatalf("Flow reports stream %d paused=%v again", c.Stream, c.Paused)
		}
		h.reported[c.Stream] = c.Paused
	}
	h.after()
}

// paused returns the flow state the caller last saw for the stream.
func (h *harness) paused(stream uint32) bool { return h.reported[stream] }

// drain completes everything: it lifts the delays by moving the clock past them, and runs
// batches until none forms. Then every item pushed to a live stream must have completed
// exactly once, in push order per key.
func (h *harness) drain() {
	h.t.Helper()
	for _, id := range slices.Clone(h.batchIDs) {
		h.finish(id, false, false)
	}
	for {
		if at, ok := h.s.NextWake(); ok && at.After(h.now) {
			h.now = at
		}
		b, ok := h.next()
		if !ok {
			if _, waiting := h.s.NextWake(); waiting {
				continue
			}
			break
		}
		h.finish(b.ID, false, false)
	}
	h.check()
	if len(h.pending) != 0 || len(h.items) != 0 {
		h.fatalf("after drain: %d keys, %d items left", len(h.pending), len(h.items))
	}
	for k, a := range h.applied {
		if !slices.IsSorted(a) {
			h.fatalf("key %v applied out of push order: %v", k, a)
		}
	}
	if st := h.s.Stats(); st.Keys != 0 || st.QueuedItems != 0 || st.InFlightItems != 0 || st.DelayedKeys != 0 {
		h.fatalf("after drain: %+v", st)
	}
	for id := range h.gen {
		if !h.s.Idle(id) {
			h.fatalf("stream %d not idle after drain", id)
		}
	}
}

func (h *harness) String() string {
	return fmt.Sprintf("pushed %d dispatched %d completed %d dropped %d", h.pushed, h.dispatched, len(h.completed), h.dropped)
}
