package store

import (
	"bytes"
	"errors"
	"fmt"
	"sync"

	"github.com/dgraph-io/badger/v4"
)

// Timer is a stored timer. Its byte slices are copies owned by the caller.
type Timer struct {
	// Key is the record key the timer belongs to.
	Key []byte
	// Name names the timer within the key.
	Name []byte
	// Domain is the timer's time domain, 0..MaxTimerDomain.
	Domain uint8
	// Due is when the timer is due, in the domain's unit.
	Due int64
	// Payload is the bytes the timer was set with (non-nil, possibly empty).
	Payload []byte
}

// TimerRef is a position in a domain's due order, (Due, Key, Name): the
// position of a timer that DB.DueTimers returned, to continue after it.
type TimerRef struct {
	Due  int64
	Key  []byte
	Name []byte
}

// DueTimers calls fn for the timers of (task, stream, domain) whose Due is at
// most upTo, in the order of (Due, then Key as in the state table: length,
// then bytes; then Name bytewise), starting at the first timer or, if after
// is not nil, at the first timer strictly after *after. It stops after limit
// timers (limit < 1: none, to learn only next) or when fn returns false.
//
// It returns the Due of the first timer in that order that it did not pass
// to fn, due or not, with ok true, or ok false if there is none: the caller's
// hint for when to look again. The cost is one seek in the due index and a
// walk of at most limit+1 entries, plus one point read per timer returned,
// whatever the number of pending timers. Deleted timers leave tombstones in
// the index until Badger compacts them away; DueTimers remembers in memory
// where the live entries of each index begin, so that a call walks only the
// tombstones of the timers deleted since the previous call that started at
// the first timer, except the first such call after Open, which walks them
// all once.
//
// Timers are read from one snapshot. fn receives copies it may keep; it must
// not call other methods of db. A domain above MaxTimerDomain has no timers.
func (db *DB) DueTimers(task string, stream uint32, domain uint8, upTo int64, after *TimerRef, limit int, fn func(t Timer) (more bool)) (next int64, ok bool, err error) {
	if err := validTask(task); err != nil {
		return 0, false, err
	}
	if err := db.enter(); err != nil {
		return 0, false, err
	}
	defer db.leave()
	prefix := appendDuePrefix(nil, task, stream, domain)
	seek := prefix
	if after != nil {
		// The smallest key strictly after after's entry: the same key with a
		// zero byte appended to the name.
		seek = append(appendDueKey(nil, task, stream, domain, after.Due, after.Key, after.Name), 0)
	}
	gen := db.floors.generation() // before the snapshot
	var (
		tk        []byte
		fromFloor bool   // the walk starts at the floor (or the index start)
		firstLive []byte // the first entry the walk found, or the index end
	)
	err = db.bdb.View(func(txn *badger.Txn) error {
		// Every due-index entry below the floor is deleted in this snapshot
		// (the floor is read after the snapshot is taken): skip their
		// tombstones.
		if floor := db.floors.get(prefix); floor != nil && bytes.Compare(floor, seek) >= 0 {
			seek, fromFloor = floor, true
		} else {
			fromFloor = floor == nil && after == nil
		}
		it := txn.NewIterator(badger.IteratorOptions{Prefix: prefix})
		defer it.Close()
		n := 0
		for it.Seek(seek); it.ValidForPrefix(prefix); it.Next() {
			if firstLive == nil {
				firstLive = it.Item().KeyCopy(nil)
			}
			_, _, _, due, key, name, err := decodeDueKey(it.Item().Key())
			if err != nil {
				return err
			}
			if due > upTo || n >= limit {
				next, ok = due, true
				return nil
			}
			n++
			tk = appendTimerKey(tk[:0], task, stream, key, name)
			item, err := txn.Get(tk)
			if errors.Is(err, badger.ErrKeyNotFound) {
				return fmt.Errorf("%w: key %q timer %q: due-index entry without a timer", ErrCorrupt, key, name)
			}
			if err != nil {
				return err
			}
			t := Timer{Key: append([]byte{}, key...), Name: append([]byte{}, name...), Domain: domain, Due: due}
			err = item.Value(func(v []byte) error {
				d, vdue, payload, err := decodeTimerValue(v)
				if err == nil && (d != domain || vdue != due) {
					err = fmt.Errorf("%w: timer of domain %d due %d indexed in domain %d at %d", ErrCorrupt, d, vdue, domain, due)
				}
				t.Payload = append([]byte{}, payload...)
				return err
			})
			if err != nil {
				return fmt.Errorf("key %q timer %q: %w", key, name, err)
			}
			if !fn(t) {
				it.Next()
				if it.ValidForPrefix(prefix) {
					_, _, _, due, _, _, err := decodeDueKey(it.Item().Key())
					if err != nil {
						return err
					}
					next, ok = due, true
				}
				return nil
			}
		}
		return nil
	})
	if err != nil {
		return 0, false, wrapErr("due timers", err)
	}
	if fromFloor {
		if firstLive == nil {
			firstLive = prefixEnd(prefix) // no entry at all
		}
		db.raiseFloor(prefix, firstLive, gen)
	}
	return next, ok, nil
}

// dueFloors keeps, in memory, a floor for each due index (task, stream,
// domain) that DueTimers has walked: a key such that every entry of the index
// below it is deleted. DueTimers seeks to the floor instead of the start of
// the index, because a timer that fired and was deleted leaves a tombstone in
// Badger until compaction drops it, and walking the tombstones of every timer
// fired since would make each call cost more the more timers have fired.
//
// Invariant: no entry of the committed due index, nor of a Commit in
// progress, sorts below its index's floor. A Commit lowers the floors below
// the entries it will set before it writes anything. DueTimers raises a floor
// to the first entry its walk from the floor found, and only if no Commit ran
// since before its snapshot (raiseFloor), so that it never raises a floor past
// an entry its snapshot missed. Floors start unknown at Open.
type dueFloors struct {
	mu    sync.Mutex
	gen   uint64            // incremented when a Commit ends
	floor map[string][]byte // due prefix -> floor key
}

func (f *dueFloors) generation() uint64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.gen
}

// get returns the floor of the index with the given due prefix, or nil.
func (f *dueFloors) get(prefix []byte) []byte {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.floor[string(prefix)]
}

// lower lowers the floors below every timer cp sets.
func (f *dueFloors) lower(cp *Checkpoint) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.floor) == 0 {
		return
	}
	var k []byte
	for i := range cp.Keys {
		kw := &cp.Keys[i]
		for j := range kw.Timers {
			op := &kw.Timers[j]
			if op.Delete {
				continue
			}
			k = f.lowerLocked(k, cp.Task, kw.Stream, op.Domain, op.Due, kw.Key, op.Name)
		}
	}
}

// lowerSnapshots lowers the floors below every timer of snaps, as lower does
// for a checkpoint.
func (f *dueFloors) lowerSnapshots(task string, stream uint32, snaps []KeySnapshot) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.floor) == 0 {
		return
	}
	var k []byte
	for i := range snaps {
		for j := range snaps[i].Timers {
			tm := &snaps[i].Timers[j]
			k = f.lowerLocked(k, task, stream, tm.Domain, tm.Due, snaps[i].Key, tm.Name)
		}
	}
}

// lowerLocked lowers the floor of the timer's due index to the timer's entry
// if that is below it, using buf for the entry; f.mu must be held. It returns
// buf for reuse.
func (f *dueFloors) lowerLocked(buf []byte, task string, stream uint32, domain uint8, due int64, key, name []byte) []byte {
	prefixLen := taskPrefixOverhead + len(task) + streamPartLen + 1
	k := appendDueKey(buf[:0], task, stream, domain, due, key, name)
	if floor, ok := f.floor[string(k[:prefixLen])]; ok && bytes.Compare(k, floor) < 0 {
		f.floor[string(k[:prefixLen])] = bytes.Clone(k)
	}
	return k
}

// changed records that a Commit (or a Restore or DropStream) has ended.
func (f *dueFloors) changed() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.gen++
}

// raiseFloor raises the floor of the index with the given due prefix to
// first, the first entry a walk from the floor found in a snapshot taken
// after generation gen, if no Commit has run or is running since.
func (db *DB) raiseFloor(prefix, first []byte, gen uint64) {
	if !db.writeMu.TryLock() {
		return // a Commit is running: its entries may be missing from the snapshot
	}
	defer db.writeMu.Unlock()
	f := &db.floors
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.gen != gen {
		return // a Commit ended since: its entries may be missing from the snapshot
	}
	if f.floor == nil {
		f.floor = map[string][]byte{}
	}
	if old := f.floor[string(prefix)]; old == nil || bytes.Compare(first, old) > 0 {
		f.floor[string(prefix)] = first
	}
}

// Timer returns the timer name of (task, stream, key) and whether it exists.
func (db *DB) Timer(task string, stream uint32, key, name []byte) (Timer, bool, error) {
	if err := validTask(task); err != nil {
		return Timer{}, false, err
	}
	var t Timer
	var ok bool
	err := db.get(appendTimerKey(nil, task, stream, key, name), func(v []byte) error {
		domain, due, payload, err := decodeTimerValue(v)
		if err != nil {
			return err
		}
		t = Timer{Key: append([]byte{}, key...), Name: append([]byte{}, name...),
			Domain: domain, Due: due, Payload: append([]byte{}, payload...)}
		ok = true
		return nil
	})
	return t, ok, wrapErr("timer", err)
}

// timerCounts holds the number of timers of the streams PendingTimers was asked about, kept up
// to date by Commit and forgotten by Restore and DropStream (the next PendingTimers counts
// again), so that reading it costs a map lookup.
type timerCounts struct {
	mu sync.Mutex
	n  map[taskStream]int64
}

type taskStream struct {
	task   string
	stream uint32
}

// add applies the changes of one committed transaction of task.
func (c *timerCounts) add(task string, delta map[uint32]int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for stream, d := range delta {
		k := taskStream{task, stream}
		if n, ok := c.n[k]; ok {
			c.n[k] = max(n+d, 0)
		}
	}
}

// forget drops the count of (task, stream).
func (c *timerCounts) forget(task string, stream uint32) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.n, taskStream{task, stream})
}

// PendingTimers returns the number of committed timers of (task, stream), in every domain: set
// and neither deleted nor fired as of the last Commit. The first call for a stream reads every
// timer key of it; later ones cost a map lookup, Commit keeping the count up to date.
func (db *DB) PendingTimers(task string, stream uint32) (int64, error) {
	k := taskStream{task, stream}
	c := &db.timerCounts
	c.mu.Lock()
	n, ok := c.n[k]
	c.mu.Unlock()
	if ok {
		return n, nil
	}
	if err := validTask(task); err != nil {
		return 0, err
	}
	// Count with commits held off (in Commit's lock order), so that none is missed between the
	// count and its caching.
	if err := db.enter(); err != nil {
		return 0, err
	}
	defer db.leave()
	db.writeMu.Lock()
	defer db.writeMu.Unlock()
	cnt, err := db.countTimers(task, stream)
	if err != nil {
		return 0, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.n == nil {
		c.n = map[taskStream]int64{}
	}
	c.n[k] = cnt
	return cnt, nil
}

// TimerCount returns the number of timers of (task, stream), in every domain.
// It reads every timer key of the stream: for tests and status reports, not
// for a hot path.
func (db *DB) TimerCount(task string, stream uint32) (int, error) {
	if err := validTask(task); err != nil {
		return 0, err
	}
	n := 0
	prefix := appendStreamPrefix(nil, tableTimer, task, stream)
	err := db.iterate(prefix, nil, func([]byte, *badger.Item) (bool, error) {
		n++
		return true, nil
	})
	return n, wrapErr("timer count", err)
}

// countTimers counts the timer keys of (task, stream); the caller has entered the DB.
func (db *DB) countTimers(task string, stream uint32) (n int64, err error) {
	defer db.recoverRead(&err)
	prefix := appendStreamPrefix(nil, tableTimer, task, stream)
	err = db.bdb.View(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{Prefix: prefix})
		defer it.Close()
		for it.Seek(prefix); it.ValidForPrefix(prefix); it.Next() {
			n++
		}
		return nil
	})
	return n, wrapErr("timer count", err)
}
