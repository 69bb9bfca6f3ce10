package sched

import (
	"cmp"
	"fmt"
	"slices"
	"time"
)

// Item is one unit of work for a key: a record, or a timer firing that enters the key's queue
// like a record. The scheduler reads Stream, Key and Size, and carries Offset and Value through
// untouched.
type Item[T any] struct {
	Stream uint32 // the stream (a partition) the item belongs to
	Key    string // the key; items of one (Stream, Key) run one batch at a time, in push order
	Offset int64  // the item's position in its stream, for the caller and for diagnostics
	Size   int    // bytes the item holds, counted against HighBytes while it is queued
	Value  T      // the payload
}

// Batch is a set of items handed to one worker. Items of one key are adjacent and in push order;
// no key of the batch is in any other in-flight batch.
//
// The scheduler keeps a reference to Items until the batch is completed or retried, and reads it
// again in Retry: the caller must not modify it before then.
type Batch[T any] struct {
	ID    uint64
	Items []Item[T]
}

// keyPoolSize is the number of freed keys kept for reuse however few keys exist; with more keys
// queued or in flight the pool may hold as many as exist (freeKey).
const keyPoolSize = 1024

// entry is a queued item; iso marks the items of a failed batch that must run alone.
type entry[T any] struct {
	it  Item[T]
	iso bool
}

// key is the queue of one (stream, key). It exists while it has items queued or in flight.
type key[T any] struct {
	st      *stream[T]
	name    string
	q       deque[entry[T]]
	busy    bool      // in an in-flight batch
	inReady bool      // listed in st.ready (the listing may be stale; Next skips it then)
	ready   bool      // counted in Scheduler.readyKeys: queued, not busy, not delayed
	deep    bool      // counted in st.deepKeys
	until   time.Time // deadline while delayed
	heapIdx int       // index in Scheduler.delays, -1 when not delayed
}

// stream is one input stream (a partition) and its keys.
type stream[T any] struct {
	id       uint32
	keys     map[string]*key[T]
	keysPeak int            // largest len(keys) since the map was last rebuilt
	ready    deque[*key[T]] // keys to dispatch, round robin (not in strict mode)
	order    deque[*key[T]] // strict mode: the key of every queued item, in push order
	queued   int            // items queued (not dispatched)
	bytes    int            // Size of the queued items
	inFlight int            // items in in-flight batches
	deepKeys int            // keys with deep set
	inRing   bool           // listed in Scheduler.ring
	held     bool           // an earlier stream with this ID still has items in flight
	holding  bool           // Hold: the caller stopped dispatching the stream
	removed  bool           // RemoveStream was called; in-flight batches may still point here
	paused   bool           // current flow state
	reported bool           // flow state last returned by Flow
	inFlow   bool           // listed in Scheduler.flow
}

// seg is the run of a batch's items that belongs to one key.
type seg[T any] struct {
	k *key[T]
	n int
}

// inflight is the scheduler's record of a batch handed out by Next.
type inflight[T any] struct {
	items []Item[T]
	segs  []seg[T]
	iso   bool // the batch is one isolated item
}

// FlowChange reports that a stream should stop (Paused) or resume fetching.
type FlowChange struct {
	Stream uint32
	Paused bool
}

// Scheduler decides which keys run next. It is synchronous, deterministic and not safe for
// concurrent use: one goroutine owns it. Time only enters through the now argument of Next and
// the deadlines given to Delay.
type Scheduler[T any] struct {
	cfg      Config
	strict   bool // MaxStreamInFlight == 1
	streams  map[uint32]*stream[T]
	ring     deque[*stream[T]] // streams that may have something to dispatch, round robin
	delays   delayHeap[T]
	batches  map[uint64]*inflight[T]
	lastID   uint64
	draining map[uint32]int // in-flight items of removed streams, by stream ID
	flow     []*stream[T]   // streams whose flow state may differ from the reported one
	free     []*inflight[T] // recycled batch records, at most MaxBatches
	keyPool  []*key[T]      // recycled keys, at most max(keyPoolSize, keys)
	scratch  []Item[T]      // the items of the batch Next is forming
	spare    [][]Item[T]    // Items of finished batches handed back by Reuse, at most MaxBatches
	reusing  bool           // the caller hands Items back: Next makes them MaxBatchItems long

	keys, readyKeys     int
	queued, queuedBytes int
	inFlightItems       int
}

// New returns a scheduler with no streams. It returns the error of cfg.Validate if any.
func New[T any](cfg Config) (*Scheduler[T], error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	return &Scheduler[T]{
		cfg:      cfg,
		strict:   cfg.MaxStreamInFlight == 1,
		streams:  map[uint32]*stream[T]{},
		batches:  map[uint64]*inflight[T]{},
		draining: map[uint32]int{},
	}, nil
}

// Config returns the configuration in use, with every default filled in.
func (s *Scheduler[T]) Config() Config { return s.cfg }

// AddStream starts accepting items for the stream. Adding a stream that is present does nothing.
// If a removed stream with the same ID still has batches in flight, the new stream's items wait
// until those batches complete, so a key never runs in two batches at once across a revoke and
// re-assign.
func (s *Scheduler[T]) AddStream(id uint32) {
	if s.streams[id] != nil {
		return
	}
	s.streams[id] = &stream[T]{id: id, keys: map[string]*key[T]{}, held: s.draining[id] > 0}
}

// RemoveStream forgets the stream (S2) and returns exactly its queued items, sorted by Offset
// (a stable sort of the keys' queues taken in key order). Batches in flight that hold its items
// must still be completed or retried; their items are then discarded, and the stream stays
// non-idle until they are. Pending flow changes of the stream are dropped. Removing an unknown
// stream returns nil.
func (s *Scheduler[T]) RemoveStream(id uint32) (dropped []Item[T]) {
	st := s.streams[id]
	if st == nil {
		return nil
	}
	delete(s.streams, id)
	st.removed = true
	names := make([]string, 0, len(st.keys))
	for name := range st.keys {
		names = append(names, name)
	}
	slices.Sort(names)
	dropped = make([]Item[T], 0, st.queued)
	for _, name := range names {
		k := st.keys[name]
		for i := range k.q.len() {
			dropped = append(dropped, k.q.at(i).it)
		}
		k.q.clear()
		if k.heapIdx >= 0 {
			s.delays.remove(k)
		}
		if k.ready {
			k.ready = false
			s.readyKeys--
		}
	}
	slices.SortStableFunc(dropped, func(a, b Item[T]) int { return cmp.Compare(a.Offset, b.Offset) })
	s.keys -= len(st.keys)
	s.queued -= st.queued
	s.queuedBytes -= st.bytes
	if st.inFlight > 0 {
		s.draining[id] += st.inFlight
	}
	st.keys, st.queued, st.bytes = nil, 0, 0
	st.ready.clear()
	st.order.clear()
	return dropped
}

// Push appends the item at the tail of its key's queue. It returns an error wrapping
// ErrUnknownStream if the stream is not added, and ErrNegativeSize if it.Size < 0. Push never
// refuses an item because of backpressure: a paused stream still accepts what was already
// fetched, and Flow tells the caller to stop fetching.
func (s *Scheduler[T]) Push(it Item[T]) error {
	st := s.streams[it.Stream]
	if st == nil {
		return fmt.Errorf("%w: push to stream %d", ErrUnknownStream, it.Stream)
	}
	if it.Size < 0 {
		return fmt.Errorf("%w: %d bytes at stream %d offset %d", ErrNegativeSize, it.Size, it.Stream, it.Offset)
	}
	k := st.keys[it.Key]
	if k == nil {
		if n := len(s.keyPool); n > 0 {
			k, s.keyPool = s.keyPool[n-1], s.keyPool[:n-1]
			k.st, k.name = st, it.Key
		} else {
			k = &key[T]{st: st, name: it.Key, heapIdx: -1}
		}
		st.keys[it.Key] = k
		st.keysPeak = max(st.keysPeak, len(st.keys))
		s.keys++
	}
	k.q.pushBack(entry[T]{it: it})
	if s.strict {
		st.order.pushBack(k)
	}
	s.queuedDelta(st, 1, it.Size)
	s.depthChanged(k)
	s.settle(k)
	return nil
}

// Insert puts the item into its key's queue before the items that must come after it, and
// reports whether it did; it does nothing and returns false when no queued item of the key must
// come after it (the caller then pushes it, or keeps it for later). order tells where a queued
// item's value stands: > 0 after the item, < 0 before it, 0 either. The queue is read from its
// tail while no item answers < 0, and the item goes in front of the earliest item that answered
// > 0: its cost is the number of items read, none but the tail's in the common case where the
// tail comes before the item. The item runs alone if the item it precedes does (Retry).
func (s *Scheduler[T]) Insert(it Item[T], order func(T) int) (bool, error) {
	st := s.streams[it.Stream]
	if st == nil {
		return false, fmt.Errorf("%w: insert into stream %d", ErrUnknownStream, it.Stream)
	}
	if it.Size < 0 {
		return false, fmt.Errorf("%w: %d bytes at stream %d offset %d", ErrNegativeSize, it.Size, it.Stream, it.Offset)
	}
	k := st.keys[it.Key]
	if k == nil {
		return false, nil
	}
	pos := -1
	for i := k.q.len() - 1; i >= 0; i-- {
		c := order(k.q.at(i).it.Value)
		if c < 0 {
			break
		}
		if c > 0 {
			pos = i
		}
	}
	if pos < 0 {
		return false, nil
	}
	k.q.insert(pos, entry[T]{it: it, iso: k.q.at(pos).iso})
	if s.strict {
		// The item takes the place in the stream's order of the key's item it precedes: the
		// pos-th entry of the key there.
		seen := 0
		for i := range st.order.len() {
			if st.order.at(i) != k {
				continue
			}
			if seen == pos {
				st.order.insert(i, k)
				break
			}
			seen++
		}
	}
	s.queuedDelta(st, 1, it.Size)
	s.depthChanged(k)
	s.settle(k)
	return true, nil
}

// Last returns the value of the key's last queued item; false when the key has none queued.
func (s *Scheduler[T]) Last(stream uint32, key string) (T, bool) {
	var zero T
	st := s.streams[stream]
	if st == nil {
		return zero, false
	}
	k := st.keys[key]
	if k == nil || k.q.len() == 0 {
		return zero, false
	}
	return k.q.at(k.q.len() - 1).it.Value, true
}

// Next forms a batch if fewer than MaxBatches batches are in flight and some key is ready, and
// reports whether it did. Keys whose Delay deadline is not after now become ready first.
//
// A batch takes keys round robin: one key from each stream with a ready key in turn, each key
// contributing up to MaxKeyItems items in push order, until MaxBatchItems items are taken or no
// key is ready. A key is ready when it has queued items, is in no in-flight batch and is not
// delayed, and its stream is below MaxStreamInFlight and not held (see AddStream). In strict
// mode (MaxStreamInFlight 1) only the stream's oldest queued item is eligible. A key being
// isolated after Retry runs one item alone in its batch; if it comes up while a batch already
// has items, it ends that batch and leads the next one.
func (s *Scheduler[T]) Next(now time.Time) (Batch[T], bool) {
	for len(s.delays) > 0 && !s.delays[0].until.After(now) {
		k := s.delays[0]
		s.delays.remove(k)
		s.settle(k)
	}
	if len(s.batches) >= s.cfg.MaxBatches {
		return Batch[T]{}, false
	}
	var b *inflight[T]
	if n := len(s.free); n > 0 {
		b, s.free = s.free[n-1], s.free[:n-1]
	} else {
		b = &inflight[T]{}
	}
	room := s.cfg.MaxBatchItems
	for room > 0 && s.ring.len() > 0 {
		st := s.ring.front()
		if !s.schedulable(st) {
			s.ring.popFront()
			st.inRing = false
			continue
		}
		var k *key[T]
		if s.strict {
			k = st.order.front()
		} else {
			k = st.ready.front()
			if k.busy || k.heapIdx >= 0 || k.q.len() == 0 {
				// Stale: delayed or dispatched since it was listed. It is listed again when it
				// becomes ready.
				st.ready.popFront()
				k.inReady = false
				continue
			}
		}
		iso := k.q.front().iso
		if iso && len(s.scratch) > 0 {
			break
		}
		if !s.strict {
			st.ready.popFront()
			k.inReady = false
		}
		n := min(k.q.len(), s.cfg.MaxKeyItems, room, s.cfg.MaxStreamInFlight-st.inFlight)
		if iso {
			n = 1
		}
		bytes := 0
		for range n {
			e := k.q.popFront()
			s.scratch = append(s.scratch, e.it)
			bytes += e.it.Size
			if s.strict {
				st.order.popFront()
			}
		}
		b.segs = append(b.segs, seg[T]{k: k, n: n})
		b.iso = iso
		room -= n
		k.busy = true
		st.inFlight += n
		s.inFlightItems += n
		s.queuedDelta(st, -n, -bytes)
		s.depthChanged(k)
		s.settle(k)
		// Round robin: the stream goes to the back of the ring.
		s.ring.popFront()
		st.inRing = false
		s.touch(st)
		if iso {
			break
		}
	}
	if len(s.scratch) == 0 {
		s.free = append(s.free, b)
		return Batch[T]{}, false
	}
	// The items were gathered in a reused buffer; the batch gets a copy: in a finished batch's
	// Items the caller handed back (Reuse), else in a slice of its own, of exactly its size
	// unless the caller hands them back.
	if n := len(s.spare); n > 0 && cap(s.spare[n-1]) >= len(s.scratch) {
		b.items = append(s.spare[n-1], s.scratch...)
		s.spare[n-1] = nil
		s.spare = s.spare[:n-1]
	} else if s.reusing {
		b.items = append(make([]Item[T], 0, max(s.cfg.MaxBatchItems, len(s.scratch))), s.scratch...)
	} else {
		b.items = slices.Clone(s.scratch)
	}
	clear(s.scratch)
	s.scratch = s.scratch[:0]
	s.lastID++
	s.batches[s.lastID] = b
	return Batch[T]{ID: s.lastID, Items: b.items}, true
}

// Complete records that the batch finished: its keys are free to run their next items, and go to
// the back of the round robin. It returns an error wrapping ErrUnknownBatch if the batch is not
// in flight.
func (s *Scheduler[T]) Complete(batchID uint64) error {
	b := s.batches[batchID]
	if b == nil {
		return fmt.Errorf("%w: complete %d", ErrUnknownBatch, batchID)
	}
	delete(s.batches, batchID)
	for _, sg := range b.segs {
		if st := sg.k.st; s.release(sg) {
			s.settle(sg.k) // may free the key
			s.touch(st)
		}
	}
	s.recycle(b)
	return nil
}

// Reuse hands back the Items of a batch that was completed or retried and that the caller no
// longer reads: a later batch is formed in them rather than in a slice of its own (a batch of 256
// items is 12 KiB to allocate and clear). Reuse does nothing for a batch still in flight or one
// it did not form.
func (s *Scheduler[T]) Reuse(b Batch[T]) {
	s.reusing = true
	if b.ID == 0 || b.ID > s.lastID || s.batches[b.ID] != nil || cap(b.Items) == 0 || len(s.spare) >= s.cfg.MaxBatches {
		return
	}
	clear(b.Items) // drop the references to the values
	s.spare = append(s.spare, b.Items[:0])
}

// Retry records that the batch failed: its items go back to the front of their keys' queues in
// their original order, ahead of anything pushed since. With isolate, each of those items then
// runs alone in its own batch, one at a time per key, until all of them have completed, so the
// caller can tell which item fails; items already isolated stay isolated whatever isolate says.
// Items of removed streams are discarded. Retry returns an error wrapping ErrUnknownBatch if the
// batch is not in flight.
//
// Retry does not delay the keys; call Delay for a back-off.
func (s *Scheduler[T]) Retry(batchID uint64, isolate bool) error {
	return s.retry(batchID, func(string) bool { return isolate })
}

// RetryIsolating is Retry isolating the items of the keys for which isolate returns true (and
// those already isolated); the other keys' items go back to run in batches as usual.
func (s *Scheduler[T]) RetryIsolating(batchID uint64, isolate func(key string) bool) error {
	return s.retry(batchID, isolate)
}

func (s *Scheduler[T]) retry(batchID uint64, isolate func(key string) bool) error {
	b := s.batches[batchID]
	if b == nil {
		return fmt.Errorf("%w: retry %d", ErrUnknownBatch, batchID)
	}
	delete(s.batches, batchID)
	pos := 0
	for _, sg := range b.segs {
		items := b.items[pos : pos+sg.n]
		pos += sg.n
		if !s.release(sg) {
			continue
		}
		k, st := sg.k, sg.k.st
		iso := b.iso || isolate(k.name)
		bytes := 0
		for j := len(items) - 1; j >= 0; j-- {
			k.q.pushFront(entry[T]{it: items[j], iso: iso})
			bytes += items[j].Size
			if s.strict {
				st.order.pushFront(k)
			}
		}
		s.queuedDelta(st, sg.n, bytes)
		s.depthChanged(k)
		s.settle(k)
		s.touch(st)
	}
	s.recycle(b)
	return nil
}

// Delay holds the key back: it is not dispatched before until (S17 back-off); other keys keep
// flowing, except in strict mode, where the whole stream waits behind its oldest item. Delay
// replaces any earlier deadline of the key; a zero until cancels it. The deadline lasts while the
// key has items queued or in flight. Delay returns an error wrapping ErrUnknownStream or
// ErrUnknownKey if there is no such stream, or the key has nothing queued or in flight.
func (s *Scheduler[T]) Delay(stream uint32, key string, until time.Time) error {
	st := s.streams[stream]
	if st == nil {
		return fmt.Errorf("%w: delay %d", ErrUnknownStream, stream)
	}
	k := st.keys[key]
	if k == nil {
		return fmt.Errorf("%w: delay stream %d key %q", ErrUnknownKey, stream, key)
	}
	switch {
	case until.IsZero():
		if k.heapIdx >= 0 {
			s.delays.remove(k)
		}
	case k.heapIdx >= 0:
		k.until = until
		s.delays.fix(k.heapIdx)
	default:
		k.until = until
		s.delays.push(k)
	}
	s.settle(k)
	return nil
}

// NextWake returns the earliest Delay deadline still pending, so the caller can arm a timer and
// call Next when it fires; false when no key is delayed.
func (s *Scheduler[T]) NextWake() (time.Time, bool) {
	if len(s.delays) == 0 {
		return time.Time{}, false
	}
	return s.delays[0].until, true
}

// Hold stops (hold true) or restarts (false) the dispatch of the stream's items; its items still
// queue and its batches in flight are unaffected. A caller runs something that must exclude the
// stream's batches (a partition-wide callback, S16) between Hold(true) with nothing in flight and
// Hold(false). Unknown streams are ignored.
func (s *Scheduler[T]) Hold(stream uint32, hold bool) {
	st := s.streams[stream]
	if st == nil || st.holding == hold {
		return
	}
	st.holding = hold
	if !hold {
		s.touch(st)
	}
}

// Idle reports whether the stream has nothing queued and nothing in flight, counting batches of
// an earlier stream with the same ID that was removed while they ran. An unknown stream with
// nothing in flight is idle.
func (s *Scheduler[T]) Idle(stream uint32) bool {
	if s.draining[stream] > 0 {
		return false
	}
	st := s.streams[stream]
	return st == nil || st.queued == 0 && st.inFlight == 0
}

// release returns the in-flight items of one key of a finished batch, and reports whether the
// key's stream is still there.
func (s *Scheduler[T]) release(sg seg[T]) bool {
	k, st := sg.k, sg.k.st
	k.busy = false
	st.inFlight -= sg.n
	s.inFlightItems -= sg.n
	if !st.removed {
		return true
	}
	if s.draining[st.id] -= sg.n; s.draining[st.id] == 0 {
		delete(s.draining, st.id)
		if cur := s.streams[st.id]; cur != nil {
			cur.held = false
			s.touch(cur)
		}
	}
	return false
}

func (s *Scheduler[T]) recycle(b *inflight[T]) {
	clear(b.segs)
	*b = inflight[T]{segs: b.segs[:0]} // items belong to the caller now
	s.free = append(s.free, b)
}

// schedulable reports whether the stream can contribute a key to a batch now. In normal mode it
// may answer true for a stream whose listed keys are all stale; Next then finds out.
func (s *Scheduler[T]) schedulable(st *stream[T]) bool {
	if st.removed || st.held || st.holding || st.inFlight >= s.cfg.MaxStreamInFlight {
		return false
	}
	if s.strict {
		if st.order.len() == 0 {
			return false
		}
		k := st.order.front()
		return !k.busy && k.heapIdx < 0
	}
	return st.ready.len() > 0
}

// touch lists the stream in the ring if it may have become schedulable.
func (s *Scheduler[T]) touch(st *stream[T]) {
	if !st.inRing && s.schedulable(st) {
		s.ring.pushBack(st)
		st.inRing = true
	}
}

// settle brings everything derived from a key's state up to date after it changed: the ready
// count, the stream's ready list, and the key's existence (a key with nothing queued or in flight
// is freed, together with its deadline).
func (s *Scheduler[T]) settle(k *key[T]) {
	st := k.st
	r := k.q.len() > 0 && !k.busy && k.heapIdx < 0
	if r != k.ready {
		k.ready = r
		if r {
			s.readyKeys++
		} else {
			s.readyKeys--
		}
	}
	if k.q.len() == 0 && !k.busy {
		s.freeKey(k)
		return
	}
	if r && !s.strict && !k.inReady {
		st.ready.pushBack(k)
		k.inReady = true
	}
	if r {
		s.touch(st)
	}
}

func (s *Scheduler[T]) freeKey(k *key[T]) {
	st := k.st
	if k.heapIdx >= 0 {
		s.delays.remove(k)
	}
	delete(st.keys, k.name)
	s.keys--
	limit := max(keyPoolSize, s.keys)
	if n := len(s.keyPool); n > limit {
		// Fewer keys exist than the pool holds: it shrinks with them.
		s.keyPool[n-1] = nil
		s.keyPool = s.keyPool[:n-1]
	}
	if len(s.keyPool) < limit && !k.inReady {
		// The key is referenced nowhere else now (not busy, not listed, not delayed); keep
		// it, and a small queue buffer, for the next new key. The pool may hold as many keys
		// as exist: a fetch admits records of thousands of keys that a completed batch freed
		// just before, and a pool of a fixed 1024 made each of the others a key and a queue
		// buffer to allocate; its memory still follows the keys that exist.
		q := k.q
		if len(q.buf) > minDeque*4 {
			q = deque[entry[T]]{}
		}
		*k = key[T]{q: q, heapIdx: -1}
		s.keyPool = append(s.keyPool, k)
	}
	// Go maps keep their peak size; rebuild the map once it is far below it, so memory follows
	// the keys that exist.
	if st.keysPeak >= 1024 && len(st.keys) < st.keysPeak/4 {
		m := make(map[string]*key[T], len(st.keys))
		for name, k := range st.keys {
			m[name] = k
		}
		st.keys, st.keysPeak = m, len(m)
	}
}

// queuedDelta changes the stream's queued figures and re-evaluates its flow state.
func (s *Scheduler[T]) queuedDelta(st *stream[T], items, bytes int) {
	st.queued += items
	st.bytes += bytes
	s.queued += items
	s.queuedBytes += bytes
	s.checkFlow(st)
}

// depthChanged updates the key's deep flag from its depth, with hysteresis: deep at
// MaxKeyDepth, no longer deep below half of it.
func (s *Scheduler[T]) depthChanged(k *key[T]) {
	d, st := k.q.len(), k.st
	switch {
	case !k.deep && d >= s.cfg.MaxKeyDepth:
		k.deep = true
		st.deepKeys++
	case k.deep && 2*d < s.cfg.MaxKeyDepth:
		k.deep = false
		st.deepKeys--
	default:
		return
	}
	s.checkFlow(st)
}
