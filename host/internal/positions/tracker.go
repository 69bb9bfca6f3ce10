package positions

import "fmt"

// minRing is the smallest ring the tracker allocates, and the size below which it never shrinks.
const minRing = 16

// slot is one added record that is not yet part of the committed prefix.
type slot struct {
	off  int64
	done bool
}

// Tracker computes the committable position of one stream. The zero value is not usable; call
// NewTracker. A Tracker is not safe for concurrent use.
type Tracker struct {
	start     int64 // resume position given to NewTracker
	last      int64 // last added offset; start-1 before the first Add
	commit    int64 // committable position
	horizon   int64 // highest completed offset; start-1 before the first Complete
	ring      []slot
	head, n   int // ring[head] is the oldest slot; n slots are in use
	remaining int // slots in the ring that are not done
}

// NewTracker returns a tracker for a stream read from start, the offset of the next record to
// read (the position restored from the last checkpoint).
func NewTracker(start int64) *Tracker {
	return &Tracker{start: start, last: start - 1, commit: start, horizon: start - 1}
}

// Add records that the record at offset entered processing. Offsets must be added in strictly
// increasing order and not below the start position; gaps are allowed. Otherwise Add returns an
// error wrapping ErrNotIncreasing and changes nothing.
func (t *Tracker) Add(offset int64) error {
	if offset <= t.last {
		return fmt.Errorf("%w: add %d after %d (start %d)", ErrNotIncreasing, offset, t.last, t.start)
	}
	if t.n == len(t.ring) {
		t.resize(max(minRing, 2*len(t.ring)))
	}
	t.ring[(t.head+t.n)&(len(t.ring)-1)] = slot{off: offset}
	t.n++
	t.remaining++
	t.last = offset
	return nil
}

// Complete records that the work of the record at offset has finished. Records may complete in
// any order. Completing an offset that was never added or is already complete returns an error
// wrapping ErrNotInFlight and changes nothing.
func (t *Tracker) Complete(offset int64) error {
	i, ok := t.find(offset)
	if !ok {
		return fmt.Errorf("%w: complete %d", ErrNotInFlight, offset)
	}
	s := &t.ring[(t.head+i)&(len(t.ring)-1)]
	s.done = true
	t.remaining--
	t.horizon = max(t.horizon, offset)
	if i == 0 {
		t.popDone()
	}
	return nil
}

// Committable returns 1 + the highest added offset o such that every added offset <= o is
// complete, or the start position if no such offset exists. It never decreases.
func (t *Tracker) Committable() int64 { return t.commit }

// Horizon returns the highest offset ever completed, or start-1 if none has completed. Records
// between Committable and Horizon may have completed already; a restart replays them.
func (t *Tracker) Horizon() int64 { return t.horizon }

// InFlight returns the number of records added but not yet completed.
func (t *Tracker) InFlight() int { return t.remaining }

// find returns the index (from the oldest slot) of the in-flight slot holding offset.
func (t *Tracker) find(offset int64) (int, bool) {
	if t.n == 0 {
		return 0, false
	}
	mask := len(t.ring) - 1
	first := t.ring[t.head].off
	if offset < first || offset > t.last {
		return 0, false
	}
	// Offsets strictly increase, so the slot of offset is at index <= offset-first, and exactly
	// there when no gap precedes it: try that first, then binary search below it.
	hi := t.n - 1
	if d := offset - first; d >= 0 && d < int64(t.n) {
		i := int(d)
		if s := t.ring[(t.head+i)&mask]; s.off == offset {
			return i, !s.done
		}
		hi = i - 1
	}
	lo := 0
	for lo <= hi {
		m := int(uint(lo+hi) >> 1)
		s := t.ring[(t.head+m)&mask]
		switch {
		case s.off == offset:
			return m, !s.done
		case s.off < offset:
			lo = m + 1
		default:
			hi = m - 1
		}
	}
	return 0, false
}

// popDone pops the completed prefix of the ring and advances the committable position.
func (t *Tracker) popDone() {
	mask := len(t.ring) - 1
	for t.n > 0 {
		s := t.ring[t.head]
		if !s.done {
			break
		}
		t.commit = s.off + 1
		t.head = (t.head + 1) & mask
		t.n--
	}
	if t.n == 0 {
		t.head = 0
	}
	if len(t.ring) > minRing && t.n < len(t.ring)/4 {
		t.resize(len(t.ring) / 2)
	}
}

// resize moves the slots in use into a ring of size c, a power of two >= t.n.
func (t *Tracker) resize(c int) {
	r := make([]slot, c)
	mask := len(t.ring) - 1
	for i := range t.n {
		r[i] = t.ring[(t.head+i)&mask]
	}
	t.ring, t.head = r, 0
}

// AppendDone appends to dst (cleared first) the completed offsets at or above Committable, as a
// bitmap based there: bit j of word i says offset Committable()+64i+j. It returns false, and
// dst empty, when one of them is span or more offsets above Committable.
func (t *Tracker) AppendDone(dst []uint64, span int64) ([]uint64, bool) {
	dst = dst[:0]
	mask := len(t.ring) - 1
	for i := 0; i < t.n; i++ {
		s := t.ring[(t.head+i)&mask]
		if !s.done {
			continue
		}
		d := s.off - t.commit
		if d >= span {
			return dst[:0], false
		}
		for int64(len(dst)) <= d/64 {
			dst = append(dst, 0)
		}
		dst[d/64] |= 1 << (uint(d) % 64)
	}
	return dst, true
}
