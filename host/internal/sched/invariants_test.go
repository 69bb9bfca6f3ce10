package sched

import (
	"fmt"
	"testing"
)

// checkInvariants walks the whole scheduler and checks every figure it maintains incrementally
// against a recount, and every structural invariant. It costs O(everything) and exists for tests.
func (s *Scheduler[T]) checkInvariants() error {
	c := s.cfg
	// In-flight batches: each busy key in exactly one, per-stream counts, limits.
	inBatch := map[*key[T]]uint64{}
	perStream := map[*stream[T]]int{}
	total := 0
	if len(s.batches) > c.MaxBatches {
		return fmt.Errorf("%d batches in flight, limit %d", len(s.batches), c.MaxBatches)
	}
	for id, b := range s.batches {
		n := 0
		for _, sg := range b.segs {
			if prev, ok := inBatch[sg.k]; ok {
				return fmt.Errorf("key %d/%q in batches %d and %d", sg.k.st.id, sg.k.name, prev, id)
			}
			inBatch[sg.k] = id
			if !sg.k.busy {
				return fmt.Errorf("key %d/%q in batch %d but not busy", sg.k.st.id, sg.k.name, id)
			}
			for _, it := range b.items[n : n+sg.n] {
				if it.Key != sg.k.name || it.Stream != sg.k.st.id {
					return fmt.Errorf("batch %d: item %d/%q in the run of key %q", id, it.Stream, it.Key, sg.k.name)
				}
			}
			n += sg.n
			perStream[sg.k.st] += sg.n
		}
		if n != len(b.items) || n == 0 || n > c.MaxBatchItems {
			return fmt.Errorf("batch %d: %d items in runs, %d items, limit %d", id, n, len(b.items), c.MaxBatchItems)
		}
		if b.iso && n != 1 {
			return fmt.Errorf("isolated batch %d has %d items", id, n)
		}
		total += n
	}
	if total != s.inFlightItems {
		return fmt.Errorf("inFlightItems %d, recount %d", s.inFlightItems, total)
	}
	draining := map[uint32]int{}
	for st, n := range perStream {
		if st.inFlight != n {
			return fmt.Errorf("stream %d: inFlight %d, recount %d", st.id, st.inFlight, n)
		}
		if n > c.MaxStreamInFlight {
			return fmt.Errorf("stream %d: %d in flight, limit %d", st.id, n, c.MaxStreamInFlight)
		}
		if st.removed {
			draining[st.id] += n
		}
	}
	if len(draining) != len(s.draining) {
		return fmt.Errorf("draining %v, recount %v", s.draining, draining)
	}
	for id, n := range draining {
		if s.draining[id] != n {
			return fmt.Errorf("draining %v, recount %v", s.draining, draining)
		}
	}
	for i, k := range s.delays {
		if k.heapIdx != i {
			return fmt.Errorf("delayed key %q has heap index %d at %d", k.name, k.heapIdx, i)
		}
		if i > 0 && s.delays.less(i, (i-1)/2) {
			return fmt.Errorf("delay heap out of order at %d", i)
		}
		if k.st.removed || k.st.keys[k.name] != k {
			return fmt.Errorf("delayed key %q is not live", k.name)
		}
	}
	inRing := map[*stream[T]]bool{}
	for i := range s.ring.len() {
		st := s.ring.at(i)
		if inRing[st] || !st.inRing {
			return fmt.Errorf("stream %d listed twice or flag unset", st.id)
		}
		inRing[st] = true
	}
	keys, ready, queued, bytes := 0, 0, 0, 0
	for id, st := range s.streams {
		if st.id != id || st.removed {
			return fmt.Errorf("stream %d: bad entry", id)
		}
		if st.held != (s.draining[id] > 0) {
			return fmt.Errorf("stream %d: held %v, draining %d", id, st.held, s.draining[id])
		}
		if st.inRing != inRing[st] {
			return fmt.Errorf("stream %d: inRing %v, listed %v", id, st.inRing, inRing[st])
		}
		if s.schedulable(st) && !st.inRing {
			return fmt.Errorf("stream %d schedulable but not in the ring", id)
		}
		listed := map[*key[T]]bool{}
		for i := range st.ready.len() {
			k := st.ready.at(i)
			if listed[k] || !k.inReady {
				return fmt.Errorf("stream %d: key %q listed twice or flag unset", id, k.name)
			}
			listed[k] = true
		}
		inOrder := map[*key[T]]int{}
		for i := range st.order.len() {
			inOrder[st.order.at(i)]++
		}
		sq, sb, deep := 0, 0, 0
		for name, k := range st.keys {
			if k.name != name || k.st != st {
				return fmt.Errorf("stream %d: key %q: bad entry", id, name)
			}
			if k.q.len() == 0 && !k.busy {
				return fmt.Errorf("stream %d: key %q empty and idle but not freed", id, name)
			}
			if _, ok := inBatch[k]; ok != k.busy {
				return fmt.Errorf("stream %d: key %q busy %v, in a batch %v", id, name, k.busy, ok)
			}
			r := k.q.len() > 0 && !k.busy && k.heapIdx < 0
			if r != k.ready {
				return fmt.Errorf("stream %d: key %q ready flag %v, want %v", id, name, k.ready, r)
			}
			if r {
				ready++
			}
			if s.strict {
				if inOrder[k] != k.q.len() {
					return fmt.Errorf("stream %d: key %q has %d items, %d in order", id, name, k.q.len(), inOrder[k])
				}
			} else if r && !listed[k] {
				return fmt.Errorf("stream %d: key %q ready but not listed", id, name)
			}
			if k.inReady != listed[k] {
				return fmt.Errorf("stream %d: key %q inReady %v, listed %v", id, name, k.inReady, listed[k])
			}
			isoDone := false
			for i := range k.q.len() {
				e := k.q.at(i)
				if e.it.Key != name || e.it.Stream != id {
					return fmt.Errorf("stream %d: key %q holds item of %d/%q", id, name, e.it.Stream, e.it.Key)
				}
				if e.iso && isoDone {
					return fmt.Errorf("stream %d: key %q: isolated items are not a prefix", id, name)
				}
				isoDone = !e.iso
				sb += e.it.Size
			}
			sq += k.q.len()
			d := k.q.len()
			if d >= c.MaxKeyDepth && !k.deep || 2*d < c.MaxKeyDepth && k.deep {
				return fmt.Errorf("stream %d: key %q depth %d, deep %v", id, name, d, k.deep)
			}
			if k.deep {
				deep++
			}
		}
		for k := range listed {
			if st.keys[k.name] != k {
				return fmt.Errorf("stream %d: freed key %q still listed", id, k.name)
			}
		}
		if sq != st.queued || sb != st.bytes || deep != st.deepKeys {
			return fmt.Errorf("stream %d: queued %d/%dB/%d deep, recount %d/%dB/%d", id, st.queued, st.bytes, st.deepKeys, sq, sb, deep)
		}
		if !st.paused && (st.queued >= c.HighItems || st.bytes >= c.HighBytes || st.deepKeys > 0) {
			return fmt.Errorf("stream %d: running with %d items, %d bytes, %d deep keys", id, st.queued, st.bytes, st.deepKeys)
		}
		if st.paused && st.queued <= c.LowItems && st.bytes <= c.LowBytes && st.deepKeys == 0 {
			return fmt.Errorf("stream %d: paused with %d items, %d bytes", id, st.queued, st.bytes)
		}
		if st.paused != st.reported && !st.inFlow {
			return fmt.Errorf("stream %d: flow change not pending", id)
		}
		keys += len(st.keys)
		queued += sq
		bytes += sb
	}
	if keys != s.keys || ready != s.readyKeys || queued != s.queued || bytes != s.queuedBytes {
		return fmt.Errorf("keys/ready/queued/bytes %d/%d/%d/%d, recount %d/%d/%d/%d",
			s.keys, s.readyKeys, s.queued, s.queuedBytes, keys, ready, queued, bytes)
	}
	return nil
}

func mustCheck[T any](t testing.TB, s *Scheduler[T]) {
	t.Helper()
	if err := s.checkInvariants(); err != nil {
		t.Fatal(err)
	}
}
