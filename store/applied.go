package store

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math/bits"
	"slices"

	"github.com/dgraph-io/badger/v4"
)

// The applied table (format 4) keeps, per (task, stream), the offsets at or above the stream's
// Next whose effects are in the stored state: the applied set that a checkpoint writes with its
// positions, so that a key's mark entry need not be rewritten when its new mark is in the set
// (see "Applied sets" in the package documentation).
//
//	applied  'A' (0x41) | u16 len(task) | task | u32 stream    i64 base | n × u64 bits
//
// Bit j of word i (least significant first) says offset base + 64i + j. Readers ignore the
// bits below the stream's Position.Next: the set may be older than the position.
const tableApplied byte = 'A'

// MaxAppliedSpan is the most offsets an applied set spans from its stream's Next
// (Checkpoint.Applied): 32 KiB of bits. A host whose completed offsets reach further (a key
// retried for long keeps Next back while the horizon runs on) gives no set, and its checkpoint
// writes every changed key's mark.
const MaxAppliedSpan = 1 << 18

// AppliedSet is a set of offsets: bit j of Bits[i] is offset Base + 64i + j.
type AppliedSet struct {
	Base int64
	Bits []uint64
}

// Has reports whether offset o is in s.
func (s AppliedSet) Has(o int64) bool {
	if o < s.Base {
		return false
	}
	d := o - s.Base
	if d >= int64(len(s.Bits))*64 {
		return false
	}
	return s.Bits[d/64]&(1<<(uint(d)%64)) != 0
}

// Len returns the number of offsets in s.
func (s AppliedSet) Len() int {
	n := 0
	for _, w := range s.Bits {
		n += bits.OnesCount64(w)
	}
	return n
}

// last returns the highest offset in s, or Base-1 if s is empty.
func (s AppliedSet) last() int64 {
	for i := len(s.Bits) - 1; i >= 0; i-- {
		if w := s.Bits[i]; w != 0 {
			return s.Base + int64(i)*64 + int64(63-bits.LeadingZeros64(w))
		}
	}
	return s.Base - 1
}

// from returns the offsets of s at or above next, rebased at next, without trailing zero
// words; nil if none.
func (s AppliedSet) from(next int64) []uint64 {
	var out []uint64
	for i, w := range s.Bits {
		for w != 0 {
			j := bits.TrailingZeros64(w)
			w &= w - 1
			o := s.Base + int64(i)*64 + int64(j)
			if o < next {
				continue
			}
			d := o - next
			for int64(len(out)) <= d/64 {
				out = append(out, 0)
			}
			out[d/64] |= 1 << (uint(d) % 64)
		}
	}
	return out
}

func appendAppliedKey(dst []byte, task string, stream uint32) []byte {
	return appendStreamPrefix(dst, tableApplied, task, stream)
}

func appendAppliedValue(dst []byte, base int64, words []uint64) []byte {
	dst = appendI64(dst, base)
	for _, w := range words {
		dst = binary.BigEndian.AppendUint64(dst, w)
	}
	return dst
}

func decodeApplied(v []byte) (AppliedSet, error) {
	if len(v) < 8 || (len(v)-8)%8 != 0 {
		return AppliedSet{}, fmt.Errorf("%w: applied set value of %d bytes", ErrCorrupt, len(v))
	}
	s := AppliedSet{Base: int64(binary.BigEndian.Uint64(v)), Bits: make([]uint64, (len(v)-8)/8)}
	for i := range s.Bits {
		s.Bits[i] = binary.BigEndian.Uint64(v[8+8*i:])
	}
	return s, nil
}

// Applied returns the applied set of (task, stream): the offsets at or above the stream's
// Position.Next that a checkpoint recorded as applied (Checkpoint.Applied), based at Next.
// A replayed record whose offset is in it was applied and is skipped, like one at or below its
// key's mark. A stream without a set, or without a position, returns an empty set.
func (db *DB) Applied(task string, stream uint32) (AppliedSet, error) {
	if err := validTask(task); err != nil {
		return AppliedSet{}, err
	}
	if err := db.enter(); err != nil {
		return AppliedSet{}, err
	}
	defer db.leave()
	var s AppliedSet
	err := db.viewRecover(func(txn *badger.Txn) error {
		pos, ok, err := txnPosition(txn, task, stream)
		if err != nil || !ok {
			return err
		}
		stored, ok, err := txnApplied(txn, task, stream)
		if err != nil || !ok {
			return err
		}
		s = AppliedSet{Base: pos.Next, Bits: stored.from(pos.Next)}
		return nil
	})
	return s, wrapErr("applied set", err)
}

// viewRecover runs fn in a read transaction, turning a panic of Badger's into ErrCorrupt.
func (db *DB) viewRecover(fn func(txn *badger.Txn) error) (err error) {
	defer db.recoverRead(&err)
	return db.bdb.View(fn)
}

func txnPosition(txn *badger.Txn, task string, stream uint32) (p Position, ok bool, err error) {
	item, err := txn.Get(appendPositionKey(nil, task, stream))
	switch {
	case errors.Is(err, badger.ErrKeyNotFound):
		return p, false, nil
	case err != nil:
		return p, false, err
	}
	err = item.Value(func(v []byte) (err error) { p, err = decodePosition(v); return err })
	return p, err == nil, err
}

func txnApplied(txn *badger.Txn, task string, stream uint32) (s AppliedSet, ok bool, err error) {
	item, err := txn.Get(appendAppliedKey(nil, task, stream))
	switch {
	case errors.Is(err, badger.ErrKeyNotFound):
		return s, false, nil
	case err != nil:
		return s, false, err
	}
	err = item.Value(func(v []byte) (err error) { s, err = decodeApplied(v); return err })
	return s, err == nil, err
}

// appliedWrite is what Commit does to one stream's applied set in its last transaction.
type appliedWrite struct {
	stream uint32
	next   int64    // the Next of the stream's position in the Commit: the set's base
	words  []uint64 // the new set, based at next; nil: delete it
}

// mergeApplied computes, before a Commit writes anything, each positioned stream's new applied
// set: the checkpoint's (Checkpoint.Applied) with the stored set's offsets at or above the
// new Next. The stored offsets were applied in the stored state, which a checkpoint only moves
// forward, and a key that a checkpoint left with a mark below them relies on them until Next
// passes them: dropping one would replay it.
func (db *DB) mergeApplied(cp *Checkpoint, given [][]uint64) ([]appliedWrite, error) {
	if given == nil {
		return nil, nil
	}
	var out []appliedWrite
	err := db.bdb.View(func(txn *badger.Txn) error {
		for i := range cp.Positions {
			sp := &cp.Positions[i]
			if given[i] == nil {
				continue // the stored set, if any, stays: readers ignore its offsets below Next
			}
			stored, ok, err := txnApplied(txn, cp.Task, sp.Stream)
			if err != nil {
				return fmt.Errorf("stream %d: %w", sp.Stream, err)
			}
			next := sp.Position.Next
			if !ok {
				if words := trimWords(given[i]); words != nil { // else nothing to write or delete
					out = append(out, appliedWrite{stream: sp.Stream, next: next, words: words})
				}
				continue
			}
			words := stored.from(next)
			given := given[i]
			for len(words) < len(given) {
				words = append(words, 0)
			}
			for j, w := range given {
				words[j] |= w
			}
			out = append(out, appliedWrite{stream: sp.Stream, next: next, words: trimWords(words)})
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("store: commit: applied set: %w", err)
	}
	return out, nil
}

func trimWords(w []uint64) []uint64 {
	for len(w) > 0 && w[len(w)-1] == 0 {
		w = w[:len(w)-1]
	}
	if len(w) == 0 {
		return nil
	}
	return w
}

// appliedCost is the estimated cost of writing the sets aw in a transaction of task.
func appliedCost(task string, aw []appliedWrite) (entries, size int) {
	for _, a := range aw {
		entries++
		size += positionKeyLen(task) + 8 + 8*len(a.words) + entryOverhead
	}
	return entries, size
}

// writeApplied adds the sets aw of task to txn.
func writeApplied(txn *badger.Txn, alloc func(int) []byte, task string, aw []appliedWrite) error {
	for _, a := range aw {
		k := appendAppliedKey(alloc(positionKeyLen(task)), task, a.stream)
		var err error
		if a.words == nil {
			err = txn.Delete(k)
		} else {
			err = txn.Set(k, appendAppliedValue(alloc(8+8*len(a.words)), a.next, a.words))
		}
		if err != nil {
			return fmt.Errorf("store: commit: stream %d applied set: %w", a.stream, err)
		}
	}
	return nil
}

// Last returns the highest offset in s, or Base-1 if s is empty.
func (s AppliedSet) Last() int64 { return s.last() }

// SettleApplied writes the true marks of the keys whose records a stream's applied set holds,
// so that no key's stored mark is left below an offset of its own in the set (see "Applied
// sets" in the package documentation: a changelog, which carries stored marks, needs them).
// marks gives, for each such key, the highest offset of the set ([DB.Applied]) whose record is
// the key's: the host reads them from its input. A key's mark entry is raised to it when lower
// (its state version kept); the marks of other keys are left as they are. Then, if every key
// given has a mark entry, the set is deleted: each of its offsets is at or below its key's mark,
// which replay skips as it skipped the set. A key without a mark entry (no state: a refused
// record's key) keeps the set in place.
//
// Raising a mark to an offset whose record was applied to the key's stored state is always
// exact: a key's records are applied in offset order, so its mark then covers no record the
// state lacks. The marks go in as many transactions as they need, the set's deletion in the
// last: a crash in between leaves the set, and settling again raises nothing further.
func (db *DB) SettleApplied(task string, stream uint32, marks map[string]int64) error {
	if err := validTask(task); err != nil {
		return err
	}
	if err := db.enterWrite(task); err != nil {
		return err
	}
	defer db.leave()
	db.writeMu.Lock()
	defer db.writeMu.Unlock()

	rd := db.bdb.NewTransaction(false)
	defer rd.Discard()
	w := txnWriter{db: db, txn: db.bdb.NewTransaction(true)}
	defer func() { w.txn.Discard() }()
	keys := make([]string, 0, len(marks))
	for k := range marks {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	every := true
	err := func() error {
		for _, k := range keys {
			mk := appendMarkKey(w.alloc(markKeyLen(task, []byte(k))), task, stream, []byte(k))
			item, err := rd.Get(mk)
			if errors.Is(err, badger.ErrKeyNotFound) {
				every = false
				continue
			}
			if err != nil {
				return err
			}
			var mark int64
			var version uint32
			if err := item.Value(func(v []byte) (err error) { mark, version, err = decodeMark(v); return err }); err != nil {
				return err
			}
			if mark >= marks[k] {
				continue
			}
			if err := w.reserve(1, len(mk)+markValueLen+entryOverhead); err != nil {
				return err
			}
			if err := w.txn.Set(mk, appendMarkValue(w.alloc(markValueLen), marks[k], version)); err != nil {
				return err
			}
		}
		if every {
			k := appendAppliedKey(w.alloc(positionKeyLen(task)), task, stream)
			if err := w.reserve(1, len(k)+entryOverhead); err != nil {
				return err
			}
			if err := w.txn.Delete(k); err != nil {
				return err
			}
		}
		return w.flush()
	}()
	return wrapErr(fmt.Sprintf("settle applied set of stream %d", stream), err)
}

// AppliedAfter returns, for each of cp.Positions, the applied set its stream holds once Commit
// committed cp, based at the position's Next: what Commit writes (the set cp gives with the
// stored set's offsets at or above the new Next), or the stored set's offsets at or above the
// new Next when cp gives none for the stream. A host with a changelog writes it in the
// checkpoint's position records, which it produces before it commits cp: call it with nothing
// else writing cp's streams until cp commits.
func (db *DB) AppliedAfter(cp *Checkpoint) ([]AppliedSet, error) {
	if err := validTask(cp.Task); err != nil {
		return nil, err
	}
	if err := db.enter(); err != nil {
		return nil, err
	}
	defer db.leave()
	merged, err := db.mergeApplied(cp, appliedByPosition(cp))
	if err != nil {
		return nil, err
	}
	out := make([]AppliedSet, len(cp.Positions))
	err = db.viewRecover(func(txn *badger.Txn) error {
	positions:
		for i := range cp.Positions {
			sp := &cp.Positions[i]
			out[i].Base = sp.Position.Next
			for _, a := range merged {
				if a.stream == sp.Stream {
					out[i].Bits = a.words
					continue positions
				}
			}
			stored, ok, err := txnApplied(txn, cp.Task, sp.Stream)
			if err != nil {
				return fmt.Errorf("stream %d: %w", sp.Stream, err)
			}
			if ok {
				out[i] = stored.At(sp.Position.Next)
			}
		}
		return nil
	})
	return out, wrapErr("applied set after a checkpoint", err)
}

// At returns the offsets of s at or above next as a set based at next.
func (s AppliedSet) At(next int64) AppliedSet {
	return AppliedSet{Base: next, Bits: trimWords(s.from(next))}
}

// invalidFor says why s, based at its position's Next, cannot be stored with a position of
// horizon, or "" if it can: it spans more than MaxAppliedSpan, or holds an offset above horizon.
func (s AppliedSet) invalidFor(horizon int64) string {
	switch {
	case len(s.Bits) > MaxAppliedSpan/64:
		return fmt.Sprintf("applied set of %d offsets, over MaxAppliedSpan (%d)", 64*len(s.Bits), MaxAppliedSpan)
	case s.last() >= s.Base && s.last() > horizon: // (an empty set's last is below Base)
		return fmt.Sprintf("applied offset %d above the horizon %d", s.last(), horizon)
	}
	return ""
}
