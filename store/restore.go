package store

import (
	"bytes"
	"errors"
	"fmt"
	"slices"

	"github.com/dgraph-io/badger/v4"
)

// Restore writes snaps into (task, stream), replacing the whole state of each
// snapshot's key: names of the key absent from the snapshot are deleted, and
// so are its timers absent from the snapshot (with their due-index entries);
// the snapshot's names and timers are written; the key's mark and state
// version are set, or its mark deleted if the snapshot has none (HasMark
// false). Keys not in snaps are left alone. If the same key appears twice, the
// later snapshot wins (each replaces the whole state, so only the last one is
// written). Then, if pos is not nil, pos becomes the stream's position.
//
// Restore writes like Commit: in one atomic Badger transaction when
// everything fits within Options.MaxTxnBytes and Options.MaxTxnEntries,
// otherwise in several, split between keys, so that each key is replaced
// atomically, with pos in the last transaction; if it splits, it first raises
// the stream's durable Horizon to pos.Horizon, as Commit does. Restoring the
// same snapshots again is harmless, so an interrupted Restore is completed by
// running it again.
//
// Restore validates everything before writing: it returns a *KeyError
// wrapping ErrInvalidCheckpoint for a malformed snapshot (stream ID 0, a mark
// below NoneApplied, names not strictly ascending or with Delete set, a timer
// name twice, a timer domain above MaxTimerDomain) or ErrKeyTooLarge for a key
// and name too long, and an error wrapping ErrInvalidCheckpoint for a pos
// with Next < 0 or Horizon < -1. It returns a *KeyError wrapping ErrTxnTooBig
// when one key's state does not fit in one transaction, and ErrReadOnly on a
// read-only DB.
//
// Restore is serialised with DropStream and with every Commit, of any stream:
// it waits for the Commits in progress and holds new ones off until it
// returns, so pass snapshots in batches. It does not retain snaps or pos;
// the caller must not modify them during the call.
func (db *DB) Restore(task string, stream uint32, snaps []KeySnapshot, pos *Position) error {
	return db.restore(task, stream, snaps, pos, nil)
}

// RestoreApplied is Restore of snaps and pos that also replaces the stream's applied set with
// set, in the transaction of pos (a changelog's position record carries the set of the
// checkpoint it was written for: a key record written from the store alone carries the stored
// mark, which the set may have left low). set's offsets below pos.Next are ignored; an empty set
// deletes the stored one. It returns an error wrapping ErrInvalidCheckpoint for a set that
// spans more than MaxAppliedSpan from pos.Next or holds an offset above pos.Horizon.
func (db *DB) RestoreApplied(task string, stream uint32, snaps []KeySnapshot, pos Position, set AppliedSet) error {
	s := set.At(pos.Next)
	if why := s.invalidFor(pos.Horizon); why != "" {
		return fmt.Errorf("%w: task %q: stream %d: %s", ErrInvalidCheckpoint, task, stream, why)
	}
	return db.restore(task, stream, snaps, &pos, &appliedWrite{stream: stream, next: pos.Next, words: s.Bits})
}

func (db *DB) restore(task string, stream uint32, snaps []KeySnapshot, pos *Position, applied *appliedWrite) error {
	if err := validateSnapshots(task, stream, snaps, pos); err != nil {
		return err
	}
	if err := db.enterWrite(task); err != nil {
		return err
	}
	defer db.leave()
	db.writeMu.Lock()
	defer db.writeMu.Unlock()
	db.floors.lowerSnapshots(task, stream, snaps)
	defer db.floors.changed()
	defer db.timerCounts.forget(task, stream) // counted again when next asked for

	superseded := supersededSnapshots(snaps)

	// The current state of the keys is read from one read transaction taken
	// now: no other writer runs (writeMu), and every key is written once, so
	// it is still current when the key is replaced. Reading through the write
	// transaction instead would cost a sort of its pending writes per
	// iterator.
	rd := db.bdb.NewTransaction(false)
	defer rd.Discard()
	stateIt := rd.NewIterator(badger.IteratorOptions{Prefix: appendStreamPrefix(nil, tableState, task, stream)})
	defer stateIt.Close()
	timerIt := rd.NewIterator(badger.IteratorOptions{Prefix: appendStreamPrefix(nil, tableTimer, task, stream)})
	defer timerIt.Close()

	w := txnWriter{db: db, txn: db.bdb.NewTransaction(true)}
	defer func() { w.txn.Discard() }()
	if pos != nil {
		cp := &Checkpoint{Task: task, Positions: []StreamPosition{{Stream: stream, Position: *pos}}}
		w.beforeSplit = func() error { _, err := db.raiseHorizons(cp); return err }
	}
	r := restorer{w: &w, task: task, stream: stream, stateIt: stateIt, timerIt: timerIt}
	for i := range snaps {
		if superseded != nil && superseded[i] {
			continue
		}
		if err := r.key(&snaps[i]); err != nil {
			return err
		}
	}
	if pos != nil {
		k := appendPositionKey(w.alloc(positionKeyLen(task)), task, stream)
		// The applied set, if given (RestoreApplied), in the position's transaction.
		var aw []appliedWrite
		if applied != nil {
			aw = []appliedWrite{*applied}
		}
		if err := w.reserve(addCost(1, len(k)+positionValueMax+entryOverhead)(appliedCost(task, aw))); err != nil {
			return err
		}
		if err := writeApplied(w.txn, w.alloc, task, aw); err != nil {
			return err
		}
		if err := w.txn.Set(k, appendPosition(w.alloc(positionValueMax), *pos)); err != nil {
			return fmt.Errorf("store: restore: stream %d position: %w", stream, err)
		}
	}
	if err := w.flush(); err != nil {
		return fmt.Errorf("store: restore: %w", err)
	}
	return nil
}

// supersededSnapshots returns which snapshots a later one of the same key
// replaces, or nil if no key appears twice.
func supersededSnapshots(snaps []KeySnapshot) []bool {
	if len(snaps) < 2 {
		return nil
	}
	last := make(map[string]int, len(snaps))
	var out []bool
	for i := range snaps {
		if j, dup := last[string(snaps[i].Key)]; dup {
			if out == nil {
				out = make([]bool, len(snaps))
			}
			out[j] = true
		}
		last[string(snaps[i].Key)] = i
	}
	return out
}

// validateSnapshots checks everything Restore can check before writing.
func validateSnapshots(task string, stream uint32, snaps []KeySnapshot, pos *Position) error {
	for i := range snaps {
		s := &snaps[i]
		keyErr := func(err error) error {
			return &KeyError{Task: task, Stream: stream, Key: s.Key, Err: err}
		}
		switch {
		case stream == 0:
			return keyErr(fmt.Errorf("%w: stream ID 0", ErrInvalidCheckpoint))
		case s.HasMark && s.Mark < NoneApplied:
			return keyErr(fmt.Errorf("%w: snapshot mark %d (want ≥ -1)", ErrInvalidCheckpoint, s.Mark))
		case markKeyLen(task, s.Key) > maxBadgerKey:
			return keyErr(fmt.Errorf("%w: key of %d bytes", ErrKeyTooLarge, len(s.Key)))
		}
		for j := range s.Names {
			wr := &s.Names[j]
			if n := len(task) + len(s.Key) + len(wr.Name); n > MaxStateKeyLen {
				return keyErr(fmt.Errorf("%w: task, key and name of %d bytes > %d", ErrKeyTooLarge, n, MaxStateKeyLen))
			}
			if wr.Delete {
				return keyErr(fmt.Errorf("%w: snapshot name %q with Delete set", ErrInvalidCheckpoint, wr.Name))
			}
			if j > 0 && bytes.Compare(s.Names[j-1].Name, wr.Name) >= 0 {
				return keyErr(fmt.Errorf("%w: snapshot name %q not after %q", ErrInvalidCheckpoint, wr.Name, s.Names[j-1].Name))
			}
		}
		for j := range s.Timers {
			t := &s.Timers[j]
			if n := len(task) + len(s.Key) + len(t.Name); n > MaxTimerKeyLen {
				return keyErr(fmt.Errorf("%w: task, key and timer name of %d bytes > %d", ErrKeyTooLarge, n, MaxTimerKeyLen))
			}
			if t.Domain > MaxTimerDomain {
				return keyErr(fmt.Errorf("%w: timer %q: domain %d > %d", ErrInvalidCheckpoint, t.Name, t.Domain, MaxTimerDomain))
			}
		}
		if duplicateTimerName(s.Timers) {
			return keyErr(fmt.Errorf("%w: a timer name appears twice", ErrInvalidCheckpoint))
		}
	}
	if pos != nil && (pos.Next < 0 || pos.Horizon < -1) {
		return fmt.Errorf("%w: task %q: stream %d: position %+v out of range", ErrInvalidCheckpoint, task, stream, *pos)
	}
	return nil
}

// restorer replaces keys' state for one Restore.
type restorer struct {
	w                *txnWriter
	task             string
	stream           uint32
	stateIt, timerIt *badger.Iterator // over the stream's state and timer tables, in the read transaction
	ops              []restoreOp      // the current key's operations, reused
	order            []int            // the current snapshot's timers, sorted by name, reused
}

// restoreOp is one set or delete of a restore.
type restoreOp struct {
	k, v []byte
	del  bool
}

func (r *restorer) set(k, v []byte) { r.ops = append(r.ops, restoreOp{k: k, v: v}) }
func (r *restorer) del(k []byte)    { r.ops = append(r.ops, restoreOp{k: k, del: true}) }

// key writes the replacement of s.Key's state into the current transaction,
// starting a new one first if it does not fit.
func (r *restorer) key(s *KeySnapshot) error {
	w, task, stream := r.w, r.task, r.stream
	fail := func(err error) error {
		if errors.Is(err, badger.ErrTxnTooBig) {
			err = fmt.Errorf("%w: %w", ErrTxnTooBig, err)
		}
		return &KeyError{Task: task, Stream: stream, Key: s.Key, Err: err}
	}
	r.ops = r.ops[:0]

	// Names: delete those the snapshot lacks (both lists are in name order),
	// then set the snapshot's.
	prefix := appendStateKeyPrefix(w.alloc(stateKeyLen(task, s.Key, nil)), task, stream, s.Key)
	j := 0
	for r.stateIt.Seek(prefix); r.stateIt.ValidForPrefix(prefix); r.stateIt.Next() {
		k := r.stateIt.Item().Key()
		name := k[len(prefix):]
		for j < len(s.Names) && bytes.Compare(s.Names[j].Name, name) < 0 {
			j++
		}
		if j < len(s.Names) && bytes.Equal(s.Names[j].Name, name) {
			continue
		}
		r.del(append(w.alloc(len(k)), k...))
	}
	for i := range s.Names {
		wr := &s.Names[i]
		k := append(append(w.alloc(len(prefix)+len(wr.Name)), prefix...), wr.Name...)
		r.set(k, wr.Value)
	}

	// Timers: delete those the snapshot lacks with their due-index entries,
	// and the old entry of those whose domain or due changes; then set the
	// snapshot's with their entries.
	r.order = r.order[:0]
	for i := range s.Timers {
		r.order = append(r.order, i)
	}
	slices.SortFunc(r.order, func(a, b int) int { return bytes.Compare(s.Timers[a].Name, s.Timers[b].Name) })
	prefix = appendTimerKeyPrefix(w.alloc(timerKeyLen(task, s.Key, nil)), task, stream, s.Key)
	j = 0
	for r.timerIt.Seek(prefix); r.timerIt.ValidForPrefix(prefix); r.timerIt.Next() {
		item := r.timerIt.Item()
		k := item.Key()
		name := k[len(prefix):]
		for j < len(r.order) && bytes.Compare(s.Timers[r.order[j]].Name, name) < 0 {
			j++
		}
		var keep *Timer
		if j < len(r.order) && bytes.Equal(s.Timers[r.order[j]].Name, name) {
			keep = &s.Timers[r.order[j]]
		}
		var domain uint8
		var due int64
		err := item.Value(func(v []byte) (err error) {
			domain, due, _, err = decodeTimerValue(v)
			return err
		})
		if err != nil {
			return fail(fmt.Errorf("timer %q: %w", name, err))
		}
		if keep == nil {
			r.del(append(w.alloc(len(k)), k...))
		}
		if keep == nil || keep.Domain != domain || keep.Due != due {
			r.del(appendDueKey(w.alloc(dueKeyLen(task, s.Key, name)), task, stream, domain, due, s.Key, name))
		}
	}
	for i := range s.Timers {
		t := &s.Timers[i]
		k := append(append(w.alloc(len(prefix)+len(t.Name)), prefix...), t.Name...)
		r.set(k, appendTimerValue(w.alloc(timerValueOverhead+len(t.Payload)), t.Domain, t.Due, t.Payload))
		r.set(appendDueKey(w.alloc(dueKeyLen(task, s.Key, t.Name)), task, stream, t.Domain, t.Due, s.Key, t.Name), []byte{})
	}

	mk := appendMarkKey(w.alloc(markKeyLen(task, s.Key)), task, stream, s.Key)
	if s.HasMark {
		r.set(mk, appendMarkValue(w.alloc(markValueLen), s.Mark, s.StateVersion))
	} else {
		r.del(mk)
	}

	size := 0
	for i := range r.ops {
		size += len(r.ops[i].k) + len(r.ops[i].v) + entryOverhead
	}
	if err := w.reserve(len(r.ops), size); err != nil {
		return err
	}
	for i := range r.ops {
		op := &r.ops[i]
		var err error
		if op.del {
			err = w.txn.Delete(op.k)
		} else {
			err = w.txn.Set(op.k, op.v)
		}
		if err != nil {
			return fail(err)
		}
	}
	clear(r.ops) // drop references to the caller's values
	return nil
}

// DropStream deletes everything stored for (task, stream): its position and
// applied set, its timers and their due-index entries, its state and its marks. The stream
// keeps its ID (DB.StreamID returns it again). It is meant for restoring a
// partition from a changelog when the local copy cannot be trusted: drop the
// stream, then Restore the snapshots.
//
// DropStream deletes in as many Badger transactions as the stream needs
// (Options.MaxTxnBytes, Options.MaxTxnEntries): position and applied set first, then each
// timer with its due-index entry, then state, then marks. An interrupted
// DropStream leaves the stream partly dropped, without a position; run it
// again before using the stream. It is serialised with Restore and with every
// Commit, of any stream, and returns ErrReadOnly on a read-only DB.
func (db *DB) DropStream(task string, stream uint32) error {
	if err := db.enterWrite(task); err != nil {
		return err
	}
	defer db.leave()
	db.writeMu.Lock()
	defer db.writeMu.Unlock()
	defer db.floors.changed()
	defer db.timerCounts.forget(task, stream)

	// As in Restore, read from one read transaction: nothing else writes the
	// stream while writeMu is held.
	rd := db.bdb.NewTransaction(false)
	defer rd.Discard()
	w := txnWriter{db: db, txn: db.bdb.NewTransaction(true)}
	defer func() { w.txn.Discard() }()
	del := func(keys ...[]byte) error {
		size := 0
		for _, k := range keys {
			size += len(k) + entryOverhead
		}
		if err := w.reserve(len(keys), size); err != nil {
			return err
		}
		for _, k := range keys {
			if err := w.txn.Delete(k); err != nil {
				return err
			}
		}
		return nil
	}
	// each calls fn for every key of the stream in table tag.
	each := func(tag byte, fn func(k []byte, item *badger.Item) error) error {
		prefix := appendStreamPrefix(nil, tag, task, stream)
		it := rd.NewIterator(badger.IteratorOptions{Prefix: prefix})
		defer it.Close()
		for it.Seek(prefix); it.ValidForPrefix(prefix); it.Next() {
			if err := fn(it.Item().Key(), it.Item()); err != nil {
				return err
			}
		}
		return nil
	}
	copyKey := func(k []byte) []byte { return append(w.alloc(len(k)), k...) }
	deleteAll := func(_ []byte, item *badger.Item) error { return del(copyKey(item.Key())) }

	err := each(tablePosition, deleteAll)
	if err == nil {
		// The applied set with the position: it describes state this drop deletes.
		err = each(tableApplied, deleteAll)
	}
	if err == nil {
		err = each(tableTimer, func(k []byte, item *badger.Item) error {
			_, _, key, name, err := decodeTimerKey(k)
			if err != nil {
				return err
			}
			var dk []byte
			err = item.Value(func(v []byte) error {
				domain, due, _, err := decodeTimerValue(v)
				dk = appendDueKey(w.alloc(dueKeyLen(task, key, name)), task, stream, domain, due, key, name)
				return err
			})
			if err != nil {
				return err
			}
			return del(copyKey(k), dk)
		})
	}
	if err == nil {
		// Every due-index entry belongs to a timer deleted above; delete any
		// other, so that nothing of the stream is left even in a store whose
		// index is inconsistent.
		var tk []byte
		err = each(tableDue, func(k []byte, _ *badger.Item) error {
			_, _, domain, due, key, name, err := decodeDueKey(k)
			if err != nil {
				return err
			}
			tk = appendTimerKey(tk[:0], task, stream, key, name)
			item, err := rd.Get(tk)
			switch {
			case errors.Is(err, badger.ErrKeyNotFound):
			case err != nil:
				return err
			default:
				indexed := false
				err := item.Value(func(v []byte) error {
					d, t, _, err := decodeTimerValue(v)
					indexed = err == nil && d == domain && t == due
					return nil
				})
				if err != nil {
					return err
				}
				if indexed {
					return nil // deleted with its timer
				}
			}
			return del(copyKey(k))
		})
	}
	if err == nil {
		err = each(tableState, deleteAll)
	}
	if err == nil {
		err = each(tableMark, deleteAll)
	}
	if err == nil {
		err = w.flush()
	}
	return wrapErr(fmt.Sprintf("drop stream %d", stream), err)
}
