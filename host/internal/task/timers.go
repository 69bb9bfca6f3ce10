package task

import (
	"bytes"
	"cmp"
	"container/heap"
	"maps"
	"math"
	"slices"
	"time"

	"github.com/wasmstream/wasmstream/abi"
	"github.com/wasmstream/wasmstream/host/internal/modrt"
	"github.com/wasmstream/wasmstream/host/internal/sched"
	"github.com/wasmstream/wasmstream/host/internal/statecache"
	"github.com/wasmstream/wasmstream/store"
)

// Timers and watermarks (DESIGN S14–S16, ABI.md §4.10–4.13).
//
// A timer lives in the store (committed with its key's state, S9) and, until the next checkpoint,
// in the stream's dirty map, which overrides the store: the set or delete the loop applied last.
// A checkpoint collected and not yet committed holds its ops in the committing map, which the
// dirty map overrides and which overrides the store (the commit lands while the loop reads it).
// Due timers are found from two ordered sources, never by scanning all timers: the store's due
// index (read from a cursor that only moves forward until the next commit changes the index) and a
// heap of the dirty sets. A due timer becomes a firing: an item in its key's queue, so it never
// runs beside that key's records and comes after the records queued before it. Until the firing
// completes its timer is "queued"; a set or delete of the timer meanwhile cancels the firing (the
// worker skips it), and the next lookup sees the new setting.

// noDue is the "nothing known to fall due" time.
const noDue = math.MaxInt64

// timerID names a timer within its stream.
type timerID struct{ key, name string }

// dirtyTimer is an uncommitted timer op.
type dirtyTimer struct {
	del     bool
	domain  int32
	due     int64
	payload []byte
}

// streamTime is a stream's event time and timers as the loop sees them.
type streamTime struct {
	maxTs    int64     // highest record timestamp read, -1 before any
	wm       int64     // watermark: maxTs minus the allowed lateness, never decreasing; -1 none
	ended    bool      // a finite input was read to its end and is done: the watermark is the end of time
	lastRead time.Time // when the stream last had a record (idle timeout)

	live       int64 // the stream's pending timers as the loop applied them (timerRoom)
	dirty      map[timerID]dirtyTimer
	committing map[timerID]dirtyTimer // the dirty ops of the checkpoint in flight (timersCollected)
	heaps      [2]dueHeap             // dirty sets by due time, per domain (entries may be stale)
	queued     map[timerID]*item      // firings queued or in flight
	after      [2]*store.TimerRef     // the store's due index is read after this, until the next commit
	next       [2]int64               // the store's next due time after `after`; math.MinInt64: unknown

	// The watermark a checkpoint persists is that of the committed prefix: the highest timestamp
	// of the records below the committed position. A restart replays the records after it in
	// the same order, so the running watermark passes the same values again and nothing that
	// depends on it (late flags, event-time firings) sees a watermark from records not yet
	// replayed.
	stamps      []stamp // timestamps of records read and not yet below a checkpoint
	prefixMaxTs int64   // highest timestamp below the committed position, -1 none

	nextTick    time.Time // when the next tick is due (zero: ticks are off)
	tickWaiting bool      // the stream is held until its tick can run
	tickRunning bool
}

func newStreamTime(now time.Time, tickEvery time.Duration) streamTime {
	tm := streamTime{
		maxTs: -1, wm: -1, lastRead: now, prefixMaxTs: -1,
		dirty: map[timerID]dirtyTimer{}, committing: map[timerID]dirtyTimer{}, queued: map[timerID]*item{},
		next: [2]int64{math.MinInt64, math.MinInt64},
	}
	if tickEvery > 0 {
		tm.nextTick = now.Add(tickEvery)
	}
	return tm
}

// stamp is a record's offset and timestamp.
type stamp struct{ offset, ts int64 }

// committedWatermark drops the stamps below next (the committed position) and returns the
// watermark to persist with it: that of the committed prefix, never below prev.
func (tm *streamTime) committedWatermark(next int64, lateness time.Duration, prev int64) int64 {
	i := 0
	for i < len(tm.stamps) && tm.stamps[i].offset < next {
		tm.prefixMaxTs = max(tm.prefixMaxTs, tm.stamps[i].ts)
		i++
	}
	tm.stamps = tm.stamps[:copy(tm.stamps, tm.stamps[i:])]
	if tm.prefixMaxTs < 0 {
		return prev
	}
	return max(prev, tm.prefixMaxTs-lateness.Milliseconds())
}

// watermark is the stream's current watermark for event-time timers and watermark_ms.
func (tm *streamTime) watermark() int64 {
	if tm.ended {
		return noDue
	}
	return tm.wm
}

// observe advances the event time with a record's timestamp and tells whether the record is late.
func (tm *streamTime) observe(offset, ts int64, lateness time.Duration, now time.Time) (late bool) {
	tm.lastRead = now
	if ts < 0 {
		return false
	}
	tm.stamps = append(tm.stamps, stamp{offset, ts})
	late = tm.wm >= 0 && ts < tm.wm
	if ts > tm.maxTs {
		tm.maxTs = ts
		if w := ts - lateness.Milliseconds(); w > tm.wm {
			tm.wm = w
		}
	}
	return late
}

// dueEntry is a dirty set in a heap.
type dueEntry struct {
	due int64
	id  timerID
}

type dueHeap []dueEntry

func (h dueHeap) Len() int { return len(h) }
func (h dueHeap) Less(i, j int) bool {
	if h[i].due != h[j].due {
		return h[i].due < h[j].due
	}
	return cmpID(h[i].id, h[j].id) < 0
}

// cmpID orders timers of one due time as the store's index does: by key length, key bytes, name.
func cmpID(a, b timerID) int {
	return cmp.Or(cmp.Compare(len(a.key), len(b.key)), cmp.Compare(a.key, b.key), cmp.Compare(a.name, b.name))
}
func (h dueHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *dueHeap) Push(x any)   { *h = append(*h, x.(dueEntry)) }
func (h *dueHeap) Pop() any {
	old := *h
	e := old[len(old)-1]
	*h = old[:len(old)-1]
	return e
}

// timersCollected moves the dirty timers into the checkpoint being collected (committing): ops
// applied from now on go to the next one.
func (t *Task) timersCollected() {
	t.timers.mu.Lock()
	defer t.timers.mu.Unlock()
	for _, st := range t.order {
		tm := &st.tm
		if len(tm.committing) == 0 {
			tm.committing, tm.dirty = tm.dirty, tm.committing
			continue
		}
		maps.Copy(tm.committing, tm.dirty)
		clear(tm.dirty)
	}
}

// timersCommitted forgets the committing timers once their checkpoint made them durable: from
// now on the store's index holds them. The heaps keep the dirty sets applied since.
func (t *Task) timersCommitted() {
	t.timers.mu.Lock()
	for _, st := range t.order {
		clear(st.tm.committing)
	}
	t.timers.mu.Unlock()
	for _, st := range t.order {
		tm := &st.tm
		for d := range tm.heaps {
			h := tm.heaps[d]
			kept := h[:0]
			for _, e := range h {
				if op, ok := tm.dirty[e.id]; ok && !op.del && op.domain == int32(d) && op.due == e.due {
					kept = append(kept, e)
				}
			}
			clear(h[len(kept):])
			tm.heaps[d] = kept
			heap.Init(&tm.heaps[d])
		}
		tm.after = [2]*store.TimerRef{}
		tm.next = [2]int64{math.MinInt64, math.MinInt64}
	}
}

// uncommitted returns the op the loop applied last to the timer and not yet committed: the dirty
// one, else the committing one.
func (tm *streamTime) uncommitted(id timerID) (dirtyTimer, bool) {
	if op, ok := tm.dirty[id]; ok {
		return op, true
	}
	op, ok := tm.committing[id]
	return op, ok
}

// applyTimer records a timer op of a succeeded unit (or the implicit delete of a fired timer).
// room is the pending-timer room the unit's call still holds (nil: none): a new timer takes
// its unit from it, so that it is never counted both as held and as pending (timerRoom).
func (t *Task) applyTimer(st *stream, e *statecache.Entry, name []byte, op dirtyTimer, room *int64) error {
	id := timerID{string(e.Key()), string(name)}
	tm := &st.tm
	existed := false
	if old, ok := tm.uncommitted(id); ok {
		existed = !old.del
	} else {
		var err error
		if _, existed, err = t.cfg.Store.Timer(t.cfg.Name, st.id, e.Key(), name); err != nil {
			return err
		}
	}
	if d := b2i(!op.del) - b2i(existed); d != 0 {
		tm.live += d
		if d > 0 && room != nil && *room > 0 {
			*room-- // the call's room becomes the timer's: used stays
		} else {
			t.timers.used.Add(d)
		}
	}
	t.timers.mu.Lock()
	tm.dirty[id] = op
	t.timers.mu.Unlock()
	if it, ok := tm.queued[id]; ok {
		// Its firing has not run: it is stale now.
		it.cancelled = true
		delete(tm.queued, id)
	}
	if !op.del {
		heap.Push(&tm.heaps[op.domain], dueEntry{due: op.due, id: id})
	}
	if !op.del && op.domain == abi.DomainEvent {
		if err := t.placeFiring(st, id, op); err != nil {
			return err
		}
	}
	sop := store.TimerOp{Name: name, Delete: op.del, Domain: uint8(op.domain), Due: op.due, Payload: op.payload}
	t.cache.AddTimer(e, sop)
	n, b := store.TimerOpCost(t.cfg.Name, e.Key(), name, len(op.payload))
	t.cache.Charge(e, n, b)
	if op.del {
		t.stats.TimersDeleted++
	} else {
		t.stats.TimersSet++
	}
	return nil
}

// fireDue queues the firings of due timers, at most MaxFiringsPerTurn per call over all streams
// (the record path queues every firing a record makes due: enqueue), marks ended streams, and
// lets idle streams' event-time timers fire with the clock.
func (t *Task) fireDue() error {
	now := t.cfg.Now()
	nowMs := now.UnixMilli()
	budget := t.cfg.MaxFiringsPerTurn
	for _, st := range t.order {
		if st.revoking {
			continue
		}
		tm := &st.tm
		if !tm.ended && st.done && st.inflight == 0 && t.sched.Idle(st.id) && (!st.kafka || st.boundEnd >= 0) {
			tm.ended = true // a finite input (a bounded Kafka run's partition too) is over: every event-time timer of it falls due
		}
		eventUpTo := tm.watermark()
		if t.cfg.IdleTimeout > 0 && !tm.ended && now.Sub(tm.lastRead) >= t.cfg.IdleTimeout {
			// An idle stream's event-time timers fire as if its watermark followed the clock,
			// but the watermark itself stays that of its records: records read later, a
			// history replayed after a pause, are not late because of the pause (ABI.md §4.12).
			eventUpTo = max(eventUpTo, nowMs-t.cfg.Lateness.Milliseconds())
		}
		for d, upTo := range [2]int64{nowMs, eventUpTo} {
			if upTo < 0 {
				continue
			}
			if err := t.collectDue(st, d, upTo, &budget); err != nil {
				return err
			}
			if budget <= 0 {
				return nil
			}
		}
	}
	return nil
}

// collectDue queues the firings of stream st's timers of domain d due at or before upTo, in order
// of due time: the store's and the dirty heap's candidates are merged. It may queue up to twice
// the budget (the two sources are each read up to it).
func (t *Task) collectDue(st *stream, d int, upTo int64, budget *int) error {
	tm := &st.tm
	type cand struct {
		due     int64
		id      timerID
		payload []byte
	}
	var cands []cand
	if tm.next[d] <= upTo {
		next, ok, err := t.cfg.Store.DueTimers(t.cfg.Name, st.id, uint8(d), upTo, tm.after[d], *budget, func(tr store.Timer) bool {
			tm.after[d] = &store.TimerRef{Due: tr.Due, Key: tr.Key, Name: tr.Name}
			id := timerID{string(tr.Key), string(tr.Name)}
			if _, ok := tm.uncommitted(id); ok {
				return true // the dirty op decides (a set is in the heap)
			}
			if _, ok := tm.queued[id]; ok {
				return true
			}
			cands = append(cands, cand{tr.Due, id, tr.Payload})
			return true
		})
		if err != nil {
			return err
		}
		tm.next[d] = noDue
		if ok {
			tm.next[d] = next
		}
	}
	fromStore := len(cands)
	h := &tm.heaps[d]
	for len(cands)-fromStore < *budget && h.Len() > 0 && (*h)[0].due <= upTo {
		e := heap.Pop(h).(dueEntry)
		op, ok := tm.uncommitted(e.id)
		if !ok || op.del || op.domain != int32(d) || op.due != e.due {
			continue // stale: replaced or deleted since
		}
		if _, ok := tm.queued[e.id]; ok {
			continue
		}
		cands = append(cands, cand{op.due, e.id, op.payload})
	}
	if len(cands) > fromStore && fromStore > 0 {
		slices.SortFunc(cands, func(a, b cand) int {
			return cmp.Or(cmp.Compare(a.due, b.due), cmpID(a.id, b.id))
		})
	}
	for _, c := range cands {
		if _, err := t.queueFiring(st, c.id, int32(d), c.due, c.payload, true); err != nil {
			return err
		}
	}
	*budget -= len(cands)
	return nil
}

// queueFiring puts a firing in its key's queue: at its tail, or for an event-time firing before
// the key's queued items that must come after it (firingOrder), which makes its place depend on
// the input alone, not on when its timer was set or found due. With tail false, an event-time
// firing that no queued item must follow is not queued (its timer is not due yet: it waits in
// the index). It reports whether the firing was queued. Push and Insert fail only for a stream
// the scheduler does not have (sched.ErrUnknownStream; the size is never negative): callers pass
// live streams, so an error is a bug, and it stops the task.
func (t *Task) queueFiring(st *stream, id timerID, domain int32, due int64, payload []byte, tail bool) (bool, error) {
	f := &abi.Firing{Time: due, Key: []byte(id.key), Name: []byte(id.name), Payload: payload}
	if domain == abi.DomainEvent {
		f.Flags = abi.FiringEventTime
	}
	if st.kafka {
		f.Partition = uint32(st.tp.Partition)
	}
	it := &item{fire: f, stamp: due}
	seq := id.key
	if t.cfg.Policy == PolicyPartition {
		seq = ""
	}
	// A firing's offset is a unique negative number: it never reaches the stream's tracker.
	si := sched.Item[*item]{Stream: st.id, Key: seq, Offset: t.fireSeq - 1, Size: len(id.key) + len(id.name) + len(payload) + 64, Value: it}
	queued := false
	if domain == abi.DomainEvent {
		var err error
		if queued, err = t.sched.Insert(si, firingOrder(f)); err != nil {
			return false, err
		}
	}
	if !queued {
		if !tail {
			return false, nil
		}
		if err := t.sched.Push(si); err != nil {
			return false, err
		}
	}
	t.fireSeq--
	st.tm.queued[id] = it
	t.pending++
	t.stats.TimersQueued++
	return true, nil
}

// firingOrder places an event-time firing f among its key's queued items (sched.Insert): after
// the records read before the watermark reached f's time, before those read from then on
// (ABI.md §4.12); among event-time firings by time, then as the store's index orders timers.
// Processing-time firings and migrations leave it free: their place is not the input's.
func firingOrder(f *abi.Firing) func(*item) int {
	return func(v *item) int {
		switch {
		case v.migrate:
			return 0
		case v.fire == nil:
			if v.stamp >= f.Time {
				return 1
			}
			return -1
		case v.fire.Flags&abi.FiringEventTime == 0:
			return 0
		}
		return cmp.Or(cmp.Compare(v.fire.Time, f.Time),
			cmpID(timerID{string(v.fire.Key), string(v.fire.Name)}, timerID{string(f.Key), string(f.Name)}))
	}
}

// placeFiring queues the firing of an event-time timer that a succeeded unit just set, if it is
// due for the key's queued items or the watermark (queueFiring); otherwise it waits in the index.
func (t *Task) placeFiring(st *stream, id timerID, op dirtyTimer) error {
	wm := st.tm.watermark()
	due := wm >= 0 && op.due <= wm
	if !due {
		// The common case, a timer ahead of the key's queue: nothing to place, nothing made.
		seq := id.key
		if t.cfg.Policy == PolicyPartition {
			seq = ""
		}
		last, ok := t.sched.Last(st.id, seq)
		if !ok || (last.fire == nil && !last.migrate && last.stamp < op.due) {
			return nil
		}
	}
	_, err := t.queueFiring(st, id, op.domain, op.due, op.payload, due)
	return err
}

// dueWithinCall returns the keys for which a unit of job j set an event-time timer that may fall
// due before a later item of the key in the same unit: one whose time is at or below the stamp of
// an item of its key other than the unit's first (the unit ran it after the set, whereas the
// timer's firing belongs before it); nil when there is none. The host cannot tell which item of a
// call set a timer, so this errs on the side of a split. Its cost is a pass over the unit's items
// when it set an event-time timer, and a pass over its timer ops per key only when one of them is
// due by the unit's highest stamp.
func dueWithinCall(j *job) map[string]bool {
	var keys map[string]bool
	for gi := range j.groups {
		g := &j.groups[gi]
		if len(g.work) < 2 || len(g.effects.Timers) == 0 {
			continue
		}
		minDue := int64(noDue)
		for _, op := range g.effects.Timers {
			if !op.Delete && op.Domain == abi.DomainEvent {
				minDue = min(minDue, op.Due)
			}
		}
		if minDue == noDue {
			continue
		}
		maxStamp := int64(math.MinInt64)
		for _, it := range g.work[1:] {
			if !it.migrate && (it.fire == nil || it.fire.Flags&abi.FiringEventTime != 0) {
				maxStamp = max(maxStamp, it.stamp)
			}
		}
		if minDue > maxStamp {
			continue // the common case: every timer set is due after the unit's items
		}
		for _, op := range g.effects.Timers {
			if op.Delete || op.Domain != abi.DomainEvent || op.Due > maxStamp {
				continue
			}
			for _, it := range g.work[1:] {
				key := it.rec.Key
				if it.fire != nil {
					if it.fire.Flags&abi.FiringEventTime == 0 {
						continue
					}
					key = it.fire.Key
				}
				if !it.migrate && it.stamp >= op.Due && bytes.Equal(key, op.Key) {
					if keys == nil {
						keys = map[string]bool{}
					}
					keys[string(op.Key)] = true
					break
				}
			}
		}
	}
	return keys
}

// timersIdle reports whether no timer of an ended stream is left to fire and no firing is queued:
// with finished inputs, the task is then done.
func (t *Task) timersIdle() bool {
	for _, st := range t.order {
		tm := &st.tm
		if len(tm.queued) > 0 || tm.tickRunning {
			return false
		}
		if tm.ended && (tm.next[abi.DomainEvent] != noDue || len(tm.heaps[abi.DomainEvent]) > 0) {
			return false
		}
	}
	return true
}

// tickDue holds streams whose tick is due and starts the ticks of held streams with nothing in
// flight (S16). It returns after dispatching at most the free workers.
func (t *Task) tickDue() error {
	if t.cfg.TickEvery <= 0 || t.paused || (t.eos() && !t.committedNow) {
		return nil
	}
	now := t.cfg.Now()
	order := t.order
	if t.eos() {
		// Ticks start only right after a commit, as many as there are free workers: the streams
		// due the longest go first, or those first in order would take every turn.
		order = slices.Clone(t.order)
		slices.SortStableFunc(order, func(a, b *stream) int { return a.tm.nextTick.Compare(b.tm.nextTick) })
	}
	for _, st := range order {
		tm := &st.tm
		if st.revoking || tm.tickRunning {
			continue
		}
		if t.eos() && !tm.tickWaiting && len(t.inflight) >= t.cfg.Workers {
			// Exactly once, a tick starts right after a commit or waits for the next one: a
			// stream held meanwhile would keep the barrier from running its queues dry.
			break
		}
		if !tm.tickWaiting && !now.Before(tm.nextTick) {
			tm.tickWaiting = true
			t.sched.Hold(st.id, true)
		}
		if !tm.tickWaiting || st.inflight > 0 || len(t.inflight) >= t.cfg.Workers {
			continue
		}
		// Everything the tick may read is committed first: it reads the store, not the cache.
		if err := t.checkpointWait(); err != nil {
			return err
		}
		tm.tickWaiting, tm.tickRunning = false, true
		t.tickSeq++
		j := &job{id: tickJobID(t.tickSeq), tick: &abi.Tick{
			Partition: uint32(st.tp.Partition), Now: now.UnixMilli(), Watermark: tm.watermark(), Source: st.sourceName(),
		}, groups: []group{{stream: st.id, st: st}}}
		t.stats.Ticks++
		t.startJob(j)
	}
	return nil
}

// tickJobID gives tick jobs ids that cannot collide with the scheduler's batch ids.
func tickJobID(n uint64) uint64 { return 1<<63 | n }

// finishTick applies a tick's effects and releases its stream.
// effectKeys returns the keys fx writes state or timers of.
func effectKeys(fx *modrt.Effects) [][]byte {
	var keys [][]byte
	seen := map[string]bool{}
	add := func(k []byte) {
		if !seen[string(k)] {
			seen[string(k)] = true
			keys = append(keys, k)
		}
	}
	for _, w := range fx.Writes {
		add(w.Key)
	}
	for _, op := range fx.Timers {
		add(op.Key)
	}
	return keys
}

func (t *Task) finishTick(j *job) error {
	g := &j.groups[0]
	st := g.st
	st.tm.tickRunning = false
	st.tm.nextTick = t.cfg.Now().Add(t.cfg.TickEvery) // missed ticks coalesce
	if t.streams[g.stream] != st || st.revoking {
		return nil
	}
	defer t.sched.Hold(st.id, false)
	if j.err != nil {
		t.stats.Failures++
		t.noteError("tick failed", st.name(), nil, j.err)
		t.log.Error("partition tick failed; its effects are discarded and the next tick runs as scheduled",
			"input", st.name(), "err", j.err)
		return nil
	}
	// The tick's keys are pinned and loaded here, on the loop: the stream is held, so nothing else
	// touches them.
	load := t.cache.Loader()
	entry := func(key []byte) (*statecache.Entry, error) {
		e := g.entry(key)
		if e == nil {
			e = t.cache.Pin(st.id, key)
			g.keys = append(g.keys, e)
		}
		return e, e.Load(load)
	}
	defer t.release(j)
	if t.changelog != nil || t.cfg.MaxStateBytesPerKey > 0 {
		for _, key := range effectKeys(&g.effects) {
			if _, err := entry(key); err != nil {
				return err
			}
		}
		var limit error
		if t.changelog != nil {
			var err error
			if limit, err = t.changelogRoom(j); err != nil {
				return err
			}
		}
		if limit == nil {
			limit = t.keyStateRoom(j)
		}
		if limit != nil {
			t.stats.Failures++
			t.noteError("tick failed", st.name(), nil, limit)
			t.log.Error("partition tick failed; its effects are discarded and the next tick runs as scheduled",
				"input", st.name(), "err", limit)
			return nil
		}
	}
	for _, w := range g.effects.Writes {
		e, err := entry(w.Key)
		if err != nil {
			return err
		}
		t.applyWrite(e, w)
		t.cache.SetStateVersion(e, g.stateVer)
	}
	for _, op := range g.effects.Timers {
		e, err := entry(op.Key)
		if err != nil {
			return err
		}
		if err := t.applyTimer(st, e, op.Name, dirtyTimer{del: op.Delete, domain: op.Domain, due: op.Due, payload: op.Payload}, &g.timerHeld); err != nil {
			return err
		}
	}
	t.writeOutputs(g.effects.Outputs, func() *outputOrigin { return &outputOrigin{st: st, first: -1, last: -1, tick: true} })
	return nil
}

// unitOf builds the guest calls of one group: its items in batch order, consecutive records in one
// call and consecutive firings in another; cancelled firings are left out.
func unitOf(g *group, wm int64) modrt.Unit {
	u := modrt.Unit{Watermark: wm}
	if len(g.recs) == len(g.work) {
		// Records only, the usual case: one call over the group's records as they are.
		if len(g.recs) > 0 {
			u.Steps = []modrt.Step{{Kind: modrt.StepRecords, Records: g.recs}}
		}
		return u
	}
	for _, it := range g.work {
		switch {
		case it.fire != nil && it.cancelled:
			continue
		case it.fire != nil:
			if n := len(u.Steps); n == 0 || u.Steps[n-1].Kind != modrt.StepFirings {
				u.Steps = append(u.Steps, modrt.Step{Kind: modrt.StepFirings})
			}
			s := &u.Steps[len(u.Steps)-1]
			s.Firings = append(s.Firings, *it.fire)
		case it.migrate:
		default:
			if n := len(u.Steps); n == 0 || u.Steps[n-1].Kind != modrt.StepRecords {
				u.Steps = append(u.Steps, modrt.Step{Kind: modrt.StepRecords})
			}
			s := &u.Steps[len(u.Steps)-1]
			s.Records = append(s.Records, it.rec)
		}
	}
	return u
}

// nextWake is when the loop must look at the clock again without any other event: a delayed key's
// retry, a processing-time timer, a tick, or an idle stream's watermark advance.
func (t *Task) nextWake() (time.Time, bool) {
	w, ok := t.sched.NextWake()
	consider := func(c time.Time) {
		if !ok || c.Before(w) {
			w, ok = c, true
		}
	}
	for _, st := range t.order {
		tm := &st.tm
		if n := tm.next[abi.DomainProcessing]; n != noDue && n != math.MinInt64 {
			consider(time.UnixMilli(n))
		}
		if h := tm.heaps[abi.DomainProcessing]; len(h) > 0 {
			consider(time.UnixMilli(h[0].due))
		}
		if !tm.nextTick.IsZero() && !tm.tickWaiting && !tm.tickRunning {
			consider(tm.nextTick)
		}
	}
	if t.cfg.IdleTimeout > 0 {
		consider(t.cfg.Now().Add(min(t.cfg.IdleTimeout, time.Second)))
	}
	return w, ok
}

func b2i(b bool) int64 {
	if b {
		return 1
	}
	return 0
}
