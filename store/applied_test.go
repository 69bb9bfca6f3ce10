package store

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/dgraph-io/badger/v4"
)

// appliedHost is a model of a host over one stream of a store: keys o%keys, each key's state
// the list of the offsets applied to it (so that the state says exactly what was applied),
// records completed out of order in a window, checkpoints with the completed offsets as the
// applied set, and restarts that replay from the stored position, skipping a record by the
// stored set or its key's mark, as the host does.
type appliedHost struct {
	t      *testing.T
	db     *DB
	s      uint32
	keys   int
	end    int64 // offsets 0..end-1
	rng    *rand.Rand
	noSets int // give no applied set every noSets-th checkpoint (a host past MaxAppliedSpan); 0: always give one
	cps    int // checkpoints collected
	relied int // keys of a checkpoint with a set whose new mark was in it, above Next, and stored

	// This run:
	next, horizon int64 // stored at open
	replay        int64
	set           AppliedSet
	admitted      int64 // next offset to admit
	inflight      []int64
	completed     map[int64]bool // at or above the stored Next
	state         map[int][]int64
	mark          map[int]int64
	storedMark    map[int]int64 // read at open, for replay
	stored        map[int]bool  // the store holds a mark entry of the key
	dirty         map[int]int64 // key → First since the last checkpoint
	prefix        int64         // committed prefix of completions
	skipped       int
}

func (h *appliedHost) key(o int64) int { return int(o % int64(h.keys)) }

func encodeOffsets(l []int64) []byte {
	var b []byte
	for _, o := range l {
		b = binary.AppendVarint(b, o)
	}
	return b
}

func decodeOffsets(b []byte) []int64 {
	var l []int64
	for len(b) > 0 {
		o, n := binary.Varint(b)
		l = append(l, o)
		b = b[n:]
	}
	return l
}

// stateOf returns the offsets the stored state of key k holds.
func (h *appliedHost) stateOf(k int) []int64 {
	v, _, err := h.db.Get("t", h.s, []byte(fmt.Sprint(k)), []byte("a"))
	if err != nil {
		h.t.Fatal(err)
	}
	return decodeOffsets(v)
}

// open starts a run from what the store holds, as a restarted host does.
func (h *appliedHost) open() {
	t := h.t
	pos, ok, err := h.db.Position("t", h.s)
	if err != nil {
		t.Fatal(err)
	}
	if !ok {
		pos = Position{Horizon: -1}
	}
	h.next, h.horizon, h.replay = pos.Next, pos.Horizon, pos.Horizon
	if h.set, err = h.db.Applied("t", h.s); err != nil {
		t.Fatal(err)
	}
	h.admitted, h.prefix = pos.Next, pos.Next
	h.inflight = nil
	h.completed = map[int64]bool{}
	h.state, h.mark, h.stored, h.dirty = map[int][]int64{}, map[int]int64{}, map[int]bool{}, map[int]int64{}
	h.storedMark = map[int]int64{}
	for k := range h.keys {
		h.state[k] = h.stateOf(k)
		m, ok, err := h.db.Mark("t", h.s, []byte(fmt.Sprint(k)))
		if err != nil {
			t.Fatal(err)
		}
		h.mark[k], h.stored[k], h.storedMark[k] = NoneApplied, ok, math.MinInt64
		if ok {
			h.mark[k], h.storedMark[k] = m, m
		}
	}
}

// check verifies that replay from the store as it is would apply every record exactly once:
// below Next every record is applied; from Next on, replay skips a record (by the set or its
// key's mark) exactly when its key's state holds it; no state holds a record twice.
func (h *appliedHost) check(when string) {
	t := h.t
	t.Helper()
	pos, ok, err := h.db.Position("t", h.s)
	if err != nil {
		t.Fatal(err)
	}
	if !ok {
		pos = Position{Horizon: -1}
	}
	set, err := h.db.Applied("t", h.s)
	if err != nil {
		t.Fatal(err)
	}
	applied := map[int64]bool{}
	marks := map[int]int64{}
	for k := range h.keys {
		for _, o := range h.stateOf(k) {
			if applied[o] || h.key(o) != k {
				t.Fatalf("%s: offset %d applied twice or to key %d", when, o, k)
			}
			applied[o] = true
		}
		marks[k] = math.MinInt64
		if m, ok, err := h.db.Mark("t", h.s, []byte(fmt.Sprint(k))); err != nil {
			t.Fatal(err)
		} else if ok {
			marks[k] = m
		}
	}
	for o := range h.end {
		switch {
		case o < pos.Next && !applied[o]:
			t.Fatalf("%s: offset %d below Next %d not applied", when, o, pos.Next)
		case o >= pos.Next && o <= pos.Horizon:
			skip := set.Has(o) || o <= marks[h.key(o)]
			if skip != applied[o] {
				t.Fatalf("%s: offset %d (key %d, stored mark %d, in set %v, Next %d, Horizon %d): replay skips it %v, applied %v",
					when, o, h.key(o), marks[h.key(o)], set.Has(o), pos.Next, pos.Horizon, skip, applied[o])
			}
		case o > pos.Horizon && applied[o]:
			t.Fatalf("%s: offset %d above the horizon %d applied", when, o, pos.Horizon)
		}
	}
}

// step admits up to a few records and completes some in flight, in any order.
func (h *appliedHost) step(window, admit int) {
	for n := 0; n < admit && len(h.inflight) < window && h.admitted < h.end; n++ {
		o := h.admitted
		h.admitted++
		k := h.key(o)
		if o <= h.replay && (h.set.Has(o) || o <= h.storedMark[k]) {
			h.skipped++
			h.completed[o] = true // replay skips it: complete, no effects
			continue
		}
		h.inflight = append(h.inflight, o)
	}
	for n := h.rng.IntN(window/4 + 1); n > 0 && len(h.inflight) > 0; n-- {
		// Mostly not the oldest: Next trails the completions, as at saturation.
		i := h.rng.IntN(len(h.inflight))
		if len(h.inflight) > 1 && i == 0 && h.rng.IntN(4) > 0 {
			i = 1
		}
		// A key's records apply in order (the scheduler sequences them): the key's oldest.
		for j := range i {
			if h.key(h.inflight[j]) == h.key(h.inflight[i]) {
				i = j
				break
			}
		}
		o := h.inflight[i]
		h.inflight = slices.Delete(h.inflight, i, i+1)
		k := h.key(o)
		h.state[k] = append(h.state[k], o)
		h.mark[k] = max(h.mark[k], o)
		if _, ok := h.dirty[k]; !ok {
			h.dirty[k] = o
		}
		h.dirty[k] = min(h.dirty[k], o)
		h.completed[o] = true
	}
	for h.completed[h.prefix] {
		h.prefix++
	}
}

// checkpoint collects what a host's checkpoint would: the dirty keys, the position, partial
// positions at each key's First, and the completed offsets above Next as the applied set.
func (h *appliedHost) checkpoint() *Checkpoint {
	cp := &Checkpoint{Task: "t"}
	for k := range h.keys {
		first, ok := h.dirty[k]
		if !ok {
			continue
		}
		cp.Keys = append(cp.Keys, KeyWrites{Stream: h.s, Key: []byte(fmt.Sprint(k)), Mark: h.mark[k], StateVersion: 1,
			MarkStored: h.stored[k], First: first, Writes: []Write{set("a", string(encodeOffsets(h.state[k])))}})
	}
	hz := h.horizon
	var bits []uint64
	for o := range h.completed {
		hz = max(hz, o)
		if o >= h.prefix {
			d := o - h.prefix
			for int64(len(bits)) <= d/64 {
				bits = append(bits, 0)
			}
			bits[d/64] |= 1 << (d % 64)
		}
	}
	cp.Positions = []StreamPosition{{Stream: h.s, Position: Position{Next: h.prefix, Horizon: hz}}}
	h.cps++
	if h.noSets == 0 || h.cps%h.noSets != 0 {
		cp.Applied = []StreamApplied{{Stream: h.s, Bits: bits}}
		for _, kw := range cp.Keys {
			if kw.MarkStored && kw.Mark >= h.prefix {
				h.relied++
			}
		}
	}
	slices.SortFunc(cp.Keys, func(a, b KeyWrites) int { return int(a.First - b.First) })
	var firsts []int64
	for _, kw := range cp.Keys {
		if kw.First > h.next && kw.First < h.prefix {
			firsts = append(firsts, kw.First)
		}
	}
	firsts = append(firsts, h.prefix)
	slices.Sort(firsts)
	for _, f := range slices.Compact(firsts) {
		if f > h.next {
			cp.Partial = append(cp.Partial, StreamPosition{Stream: h.s, Position: Position{Next: f}})
		}
	}
	return cp
}

// committed is what follows a checkpoint's commit in the host.
func (h *appliedHost) committed(cp *Checkpoint) {
	for k := range h.dirty {
		h.stored[k] = true
	}
	clear(h.dirty)
	h.next = cp.Positions[0].Position.Next
	h.horizon = cp.Positions[0].Position.Horizon
}

// runAppliedModel runs the model to the end, checking the store after every checkpoint and
// every crash; crashAt picks, per checkpoint, the transaction to fail (-1: none).
func runAppliedModel(t *testing.T, db *DB, h *appliedHost, window, split int, crashAt func(cp int) int) {
	h.open()
	restarted := false
	for cpn := 0; ; cpn++ {
		if restarted {
			// A checkpoint soon after a restart, before the replay passed the stored set: a few
			// records admitted, skipped ones too.
			h.step(window, window/8)
		} else {
			for range 1 + h.rng.IntN(8) {
				h.step(window, window)
			}
		}
		cp := h.checkpoint()
		if split > 0 {
			// Checkpoints alternate between one transaction, which keeps marks by the set, and
			// split ones, which must keep the set for the keys they have not written yet.
			db.opts.MaxTxnEntries = DefaultMaxTxnEntries
			if cpn%2 != 0 {
				db.opts.MaxTxnEntries = split
			}
		}
		k := crashAt(cpn)
		if k < 0 {
			mustCommit(t, db, cp)
			h.committed(cp)
			h.check(fmt.Sprintf("checkpoint %d", cpn))
		} else if commitCrashingAt(t, db, k, cp) {
			h.committed(cp)
			h.check(fmt.Sprintf("checkpoint %d", cpn))
		} else {
			h.check(fmt.Sprintf("checkpoint %d crashed at transaction %d", cpn, k))
			h.open() // the restart
			restarted = true
			continue
		}
		restarted = false
		if h.prefix == h.end && len(h.dirty) == 0 && h.next == h.end {
			break
		}
		if cpn > 10000 {
			t.Fatal("the model does not finish")
		}
	}
	for k := range h.keys {
		got := h.stateOf(k)
		slices.Sort(got)
		var want []int64
		for o := int64(k); o < h.end; o += int64(h.keys) {
			want = append(want, o)
		}
		if !slices.Equal(got, want) {
			t.Fatalf("key %d applied %v, want %v", k, got, want)
		}
	}
}

// TestCommitKeepsMarksInAppliedSet: at saturation, Next far behind the completed offsets, a
// checkpoint in one transaction of 100 changed keys whose new marks are in the applied set writes
// their state, the position, the set and the checkpoint number: 103 entries, not 203; a key
// whose mark the set lacks gets its mark written; after a reopen replay skips exactly the
// applied offsets.
func TestCommitKeepsMarksInAppliedSet(t *testing.T) {
	const n = 100
	dir := t.TempDir()
	db := openTestDBAt(t, dir, Options{})
	s := mustStreamID(t, db, "t", "s")
	// Round r applies offsets 1+r*n .. (r+1)*n, one per key; offset 0 never completes, so Next
	// stays 0 and every new mark is above it.
	round := func(r int, stored bool, lack int) *Checkpoint {
		cp := counterCheckpoint(s, n, r, 0, 1, stored)
		var bits []uint64
		for o := int64(1); o <= int64((r+1)*n); o++ {
			if o == int64(lack) {
				continue
			}
			for int64(len(bits)) <= o/64 {
				bits = append(bits, 0)
			}
			bits[o/64] |= 1 << (o % 64)
		}
		for i := range cp.Keys {
			cp.Keys[i].Mark++ // offset 1 + r*n + i
		}
		cp.Positions[0].Position.Horizon = int64((r + 1) * n)
		cp.Applied = []StreamApplied{{Stream: s, Bits: bits}}
		return cp
	}
	mustCommit(t, db, round(0, false, -1))
	if c := lastCommitEntries(t, db); c[tableMark] != n || c[tableApplied] != 1 {
		t.Fatalf("first checkpoint wrote %v, want %d marks and the set", c, n)
	}
	lack := 1 + n + 7 // key 7's new mark
	mustCommit(t, db, round(1, true, lack))
	c := lastCommitEntries(t, db)
	total := 0
	for _, e := range c {
		total += e
	}
	// n state entries, key 7's mark, the position, the set and the checkpoint number.
	if c[tableState] != n || c[tableMark] != 1 || c[tableApplied] != 1 || total != n+4 {
		t.Errorf("second checkpoint wrote %v (%d entries), want %d state entries, 1 mark, the set: %d in all", c, total, n, n+4)
	}
	mustClose(t, db)
	db = openTestDBAt(t, dir, Options{})
	set, err := db.Applied("t", s)
	if err != nil {
		t.Fatal(err)
	}
	for o := int64(0); o <= 2*n; o++ {
		key := []byte(fmt.Sprint((o - 1) % n))
		mark, _, err := db.Mark("t", s, key)
		if err != nil {
			t.Fatal(err)
		}
		applied := o >= 1 && o != int64(lack)
		if o == int64(lack) {
			applied = true // its mark was written
		}
		skip := set.Has(o) || (o >= 1 && o <= mark)
		if skip != applied {
			t.Errorf("offset %d: replay skips it %v, want %v (mark %d, in set %v)", o, skip, applied, mark, set.Has(o))
		}
	}
	if set.Has(0) || set.Len() != 2*n-1 {
		t.Errorf("stored set has %d offsets (0: %v), want %d", set.Len(), set.Has(0), 2*n-1)
	}
}

// TestSettleApplied: after a checkpoint that kept marks below offsets of their keys in its
// applied set, SettleApplied with each key's highest offset in the set raises the marks to them
// (true marks: a snapshot of any key is then exact without the set) and deletes the set, after
// which replay skips exactly what it skipped with it; a key given without a mark entry keeps the
// set, and a mark already higher stays.
func TestSettleApplied(t *testing.T) {
	const n = 100
	dir := t.TempDir()
	db := openTestDBAt(t, dir, Options{})
	s := mustStreamID(t, db, "t", "s")
	// As in TestCommitKeepsMarksInAppliedSet: offset 0 never completes; round r applies
	// 1+r*n .. (r+1)*n, offset 1+r*n+i to key i; round 1 keeps every mark at round 0's.
	round := func(r int, stored bool) *Checkpoint {
		cp := counterCheckpoint(s, n, r, 0, 1, stored)
		var bits []uint64
		for o := int64(1); o <= int64((r+1)*n); o++ {
			for int64(len(bits)) <= o/64 {
				bits = append(bits, 0)
			}
			bits[o/64] |= 1 << (o % 64)
		}
		for i := range cp.Keys {
			cp.Keys[i].Mark++
		}
		cp.Positions[0].Position.Horizon = int64((r + 1) * n)
		cp.Applied = []StreamApplied{{Stream: s, Bits: bits}}
		return cp
	}
	mustCommit(t, db, round(0, false))
	mustCommit(t, db, round(1, true))
	mustClose(t, db)
	db = openTestDBAt(t, dir, Options{MaxTxnEntries: 16}) // settling splits over transactions
	mark := func(i int) int64 {
		m, _, err := db.Mark("t", s, []byte(fmt.Sprint(i)))
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	if m := mark(7); m != 8 {
		t.Fatalf("key 7's stored mark %d, want 8 (round 0's, kept by the set)", m)
	}
	marks := map[string]int64{}
	for i := range n {
		marks[fmt.Sprint(i)] = int64(1 + n + i)
	}
	marks["none"] = 150 // a key without a mark entry: the set stays
	if err := db.SettleApplied("t", s, marks); err != nil {
		t.Fatal(err)
	}
	if set, err := db.Applied("t", s); err != nil || set.Len() != 2*n {
		t.Fatalf("set after settling with a key without a mark: %d offsets, %v; want it kept (%d)", set.Len(), err, 2*n)
	}
	for i := range n {
		if m := mark(i); m != int64(1+n+i) {
			t.Fatalf("key %d: mark %d after settling, want %d", i, m, 1+n+i)
		}
	}
	delete(marks, "none")
	marks["3"] = 50 // below the key's mark: left as it is
	if err := db.SettleApplied("t", s, marks); err != nil {
		t.Fatal(err)
	}
	set, err := db.Applied("t", s)
	if err != nil || set.Len() != 0 {
		t.Fatalf("set after settling: %d offsets, %v; want none", set.Len(), err)
	}
	if m := mark(3); m != 1+n+3 {
		t.Errorf("key 3: mark %d, want %d (never lowered)", m, 1+n+3)
	}
	for o := int64(0); o <= 2*n; o++ {
		if skip := o >= 1 && o <= mark(int((o-1)%n)); skip != (o >= 1) {
			t.Errorf("offset %d: replay skips it %v, want %v", o, skip, o >= 1)
		}
	}
}

// TestAppliedSetModel runs a model host over a store whose checkpoints give applied sets at
// saturation (Next behind the completions), with small transactions so that many split, and
// fails each checkpoint's transactions in turn: after every checkpoint and every crash, replay
// from the store skips exactly the applied records, and at the end every record is applied once.
func TestAppliedSetModel(t *testing.T) {
	for _, tc := range []struct {
		name   string
		split  int // MaxTxnEntries of every other checkpoint; 0: every one in one transaction
		noSets int
	}{
		{"one transaction", 0, 0},
		{"split", 12, 0},
		{"one transaction, a set every other", 0, 2},
		{"split, a set two in three", 12, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			relied := 0
			for seed := range uint64(3) {
				db := openTestDB(t, Options{})
				s := mustStreamID(t, db, "t", "s")
				h := &appliedHost{t: t, db: db, s: s, keys: 16, end: 800, rng: rand.New(rand.NewPCG(seed, 7)), noSets: tc.noSets}
				// Crash every other checkpoint, at its transactions in turn.
				runAppliedModel(t, db, h, 40, tc.split, func(c int) int {
					if c%2 == 1 {
						return (c / 2) % 4
					}
					return -1
				})
				relied += h.relied
			}
			if relied == 0 {
				t.Fatal("no checkpoint had a stored key whose new mark was in its set above Next")
			}
			t.Logf("%d keys with a new mark in the set above Next", relied)
		})
	}
}

// appliedBits returns a bitmap based at next holding the offsets offs.
func appliedBits(next int64, offs ...int64) []uint64 {
	var bits []uint64
	for _, o := range offs {
		d := o - next
		for int64(len(bits)) <= d/64 {
			bits = append(bits, 0)
		}
		bits[d/64] |= 1 << (d % 64)
	}
	return bits
}

func mustApplied(t *testing.T, db *DB, task string, s uint32) []int64 {
	t.Helper()
	set, err := db.Applied(task, s)
	if err != nil {
		t.Fatal(err)
	}
	var offs []int64
	for o := set.Base; o < set.Base+int64(len(set.Bits))*64; o++ {
		if set.Has(o) {
			offs = append(offs, o)
		}
	}
	return offs
}

// TestAppliedSetFormat: a store of format 3 (no applied sets) opens and upgrades to format 4,
// its streams with no set (every key's mark is its own); once upgraded, a binary of format 3
// refuses it (ErrFormatTooNew, as TestFormatVersion checks for FormatVersion+1), as it must: it
// would ignore the sets and apply their records again.
func TestAppliedSetFormat(t *testing.T) {
	if FormatVersion < 4 {
		t.Fatalf("FormatVersion = %d, want at least 4: a binary that ignores applied sets must refuse a store that has them", FormatVersion)
	}
	dir := t.TempDir()
	db := openTestDBAt(t, dir, Options{})
	s := mustStreamID(t, db, "t", "s")
	mustCommit(t, db, &Checkpoint{Task: "t", Keys: []KeyWrites{{Stream: s, Key: []byte("k"), Mark: 7, StateVersion: 1, Writes: []Write{set("n", "v")}}},
		Positions: []StreamPosition{{Stream: s, Position: Position{Next: 5, Horizon: 7}}}})
	mustClose(t, db)
	rawBadger(t, dir, func(txn *badger.Txn) error {
		return txn.Set(versionKey, binary.BigEndian.AppendUint32(nil, 3))
	})
	db = openTestDBAt(t, dir, Options{})
	if got := storedFormat(t, db); got != FormatVersion {
		t.Errorf("stored format after opening a format-3 store = %d, want %d", got, FormatVersion)
	}
	if got := mustApplied(t, db, "t", s); got != nil {
		t.Errorf("applied set of a format-3 stream = %v, want none", got)
	}
	// The first checkpoint with a set keeps the stored mark whose new one is in it.
	mustCommit(t, db, &Checkpoint{Task: "t",
		Keys:      []KeyWrites{{Stream: s, Key: []byte("k"), Mark: 9, StateVersion: 1, MarkStored: true, Writes: []Write{set("n", "w")}}},
		Positions: []StreamPosition{{Stream: s, Position: Position{Next: 6, Horizon: 9}}},
		Applied:   []StreamApplied{{Stream: s, Bits: appliedBits(6, 7, 9)}}})
	if mark, _, _ := db.Mark("t", s, []byte("k")); mark != 7 {
		t.Errorf("mark = %d, want the stored 7 (its new mark 9 is in the set)", mark)
	}
	if got := mustApplied(t, db, "t", s); !slices.Equal(got, []int64{7, 9}) {
		t.Errorf("applied set = %v, want [7 9]", got)
	}
}

// TestAppliedSetWriters: every writer of a position keeps or replaces the stream's set as it
// must. A checkpoint without a set keeps it (offsets below its Next no longer read); one with a
// set adds the stored offsets at or above its Next; Restore keeps it; MoveStream moves it with
// the position; DropStream deletes it; a malformed set is refused.
func TestAppliedSetWriters(t *testing.T) {
	db := openTestDB(t, Options{})
	s := mustStreamID(t, db, "t", "s")
	pos := func(next, horizon int64) []StreamPosition {
		return []StreamPosition{{Stream: s, Position: Position{Next: next, Horizon: horizon}}}
	}
	mustCommit(t, db, &Checkpoint{Task: "t", Positions: pos(10, 40), Applied: []StreamApplied{{Stream: s, Bits: appliedBits(10, 12, 20, 40)}}})
	mustCommit(t, db, &Checkpoint{Task: "t", Positions: pos(15, 40)})
	if got := mustApplied(t, db, "t", s); !slices.Equal(got, []int64{20, 40}) {
		t.Errorf("after a checkpoint without a set: %v, want [20 40]", got)
	}
	mustCommit(t, db, &Checkpoint{Task: "t", Positions: pos(21, 50), Applied: []StreamApplied{{Stream: s, Bits: appliedBits(21, 22, 50)}}})
	if got := mustApplied(t, db, "t", s); !slices.Equal(got, []int64{22, 40, 50}) {
		t.Errorf("after a checkpoint with a set: %v, want [22 40 50]", got)
	}
	if err := db.Restore("t", s, nil, &Position{Next: 30, Horizon: 50}); err != nil {
		t.Fatal(err)
	}
	if got := mustApplied(t, db, "t", s); !slices.Equal(got, []int64{40, 50}) {
		t.Errorf("after a Restore: %v, want [40 50]", got)
	}
	backup := mustStreamID(t, db, "b", "s")
	if _, err := db.MoveStream("t", s, "b", backup); err != nil {
		t.Fatal(err)
	}
	if got := mustApplied(t, db, "t", s); got != nil {
		t.Errorf("after MoveStream, the source's set: %v, want none", got)
	}
	if got := mustApplied(t, db, "b", backup); !slices.Equal(got, []int64{40, 50}) {
		t.Errorf("after MoveStream, the destination's set: %v, want [40 50]", got)
	}
	// A reset lowers the position after the move: no set left to skip anything.
	if err := db.Restore("t", s, nil, &Position{Next: 0, Horizon: -1}); err != nil {
		t.Fatal(err)
	}
	if got := mustApplied(t, db, "t", s); got != nil {
		t.Errorf("after the reset's Restore: %v, want none", got)
	}
	if err := db.DropStream("b", backup); err != nil {
		t.Fatal(err)
	}
	if _, ok, err := txnGet(db, appendAppliedKey(nil, "b", backup)); err != nil || ok {
		t.Errorf("after DropStream, the set's entry exists: %v, %v", ok, err)
	}

	for _, tc := range []struct {
		name string
		cp   Checkpoint
	}{
		{"no position", Checkpoint{Task: "t", Applied: []StreamApplied{{Stream: s, Bits: []uint64{1}}}}},
		{"above the horizon", Checkpoint{Task: "t", Positions: pos(0, 5), Applied: []StreamApplied{{Stream: s, Bits: appliedBits(0, 6)}}}},
		{"over the span", Checkpoint{Task: "t", Positions: pos(0, MaxAppliedSpan+70), Applied: []StreamApplied{{Stream: s, Bits: appliedBits(0, MaxAppliedSpan+64)}}}},
		{"twice", Checkpoint{Task: "t", Positions: pos(0, 5), Applied: []StreamApplied{{Stream: s}, {Stream: s}}}},
	} {
		if err := db.Commit(&tc.cp); !errors.Is(err, ErrInvalidCheckpoint) {
			t.Errorf("%s: Commit = %v, want ErrInvalidCheckpoint", tc.name, err)
		}
	}
	// An empty set is valid whatever the horizon (a Kafka partition's first position may have
	// its Next at the group's offset and no horizon yet).
	if err := db.Commit(&Checkpoint{Task: "t", Positions: pos(100, -1), Applied: []StreamApplied{{Stream: s}}}); err != nil {
		t.Errorf("an empty set with a horizon below Next: %v", err)
	}
}

func txnGet(db *DB, k []byte) (v []byte, ok bool, err error) {
	err = db.get(k, func(b []byte) error { v, ok = append([]byte(nil), b...), true; return nil })
	return v, ok, err
}
