package store

import (
	"fmt"

	"github.com/dgraph-io/badger/v4"
)

// Moved counts what MoveStream moved.
type Moved struct {
	Keys   int64 // record keys with state or a mark
	Timers int64
	// Position is the stream's position before the move, when it had one.
	Position    Position
	HadPosition bool
}

// MoveStream moves everything stored for (task, stream) — its position and applied set, marks, state, timers
// and due index — to stream toStream of task to (an ID of to's, from StreamID), then drops it
// from task as DropStream does (the stream keeps its ID). Nothing is deleted before it was
// copied: the copy is written first, in as many transactions as it needs, and only then is
// the source dropped. An interrupted MoveStream leaves the source whole (or, if DropStream was
// interrupted, partly dropped: run it again). Existing entries of the destination with the same
// keys are overwritten; move into a destination of its own (a new task name) to keep both.
//
// It is how `wasmstream reset` moves a task's state aside. It is serialised with Restore and
// with every Commit, of any stream, and returns ErrReadOnly on a read-only DB.
func (db *DB) MoveStream(task string, stream uint32, to string, toStream uint32) (Moved, error) {
	var m Moved
	if task == to && stream == toStream {
		return m, fmt.Errorf("%w: move of task %q stream %d onto itself", ErrInvalidName, task, stream)
	}
	if err := validTask(to); err != nil {
		return m, err
	}
	if err := db.enterWrite(task); err != nil {
		return m, err
	}
	err := func() error {
		defer db.leave()
		db.writeMu.Lock()
		defer db.writeMu.Unlock()
		defer db.floors.changed()
		defer db.timerCounts.forget(to, toStream)

		rd := db.bdb.NewTransaction(false)
		defer rd.Discard()
		w := txnWriter{db: db, txn: db.bdb.NewTransaction(true)}
		defer func() { w.txn.Discard() }()
		for _, tag := range []byte{tablePosition, tableApplied, tableMark, tableState, tableTimer, tableDue} {
			prefix := appendStreamPrefix(nil, tag, task, stream)
			it := rd.NewIterator(badger.IteratorOptions{Prefix: prefix})
			for it.Seek(prefix); it.ValidForPrefix(prefix); it.Next() {
				item := it.Item()
				rest := item.Key()[len(prefix):]
				nk := appendStreamPrefix(w.alloc(taskPrefixOverhead+len(to)+streamPartLen+len(rest)), tag, to, toStream)
				nk = append(nk, rest...)
				v, err := item.ValueCopy(nil)
				if err == nil {
					err = w.reserve(1, len(nk)+len(v)+entryOverhead)
				}
				if err == nil {
					err = w.txn.Set(nk, v)
				}
				if err != nil {
					it.Close()
					return err
				}
				switch tag {
				case tablePosition:
					if m.Position, err = decodePosition(v); err != nil {
						it.Close()
						return err
					}
					m.HadPosition = true
				case tableMark:
					m.Keys++
				case tableTimer:
					m.Timers++
				}
			}
			it.Close()
		}
		return w.flush()
	}()
	if err != nil {
		return m, wrapErr(fmt.Sprintf("move stream %d of task %q to task %q", stream, task, to), err)
	}
	return m, db.DropStream(task, stream)
}

// DropTask deletes everything stored for task's streams — positions, marks, state, timers — and
// the streams' IDs, so that the task is no longer listed by Tasks. The module registry is not
// touched. It is meant for the backups `wasmstream reset` moves state aside into; a task a host
// runs must not be dropped while the host runs it.
func (db *DB) DropTask(task string) error {
	infos, err := db.Streams(task)
	if err != nil {
		return err
	}
	for _, s := range infos {
		if err := db.DropStream(task, s.ID); err != nil {
			return err
		}
	}
	if err := db.enterWrite(task); err != nil {
		return err
	}
	defer db.leave()
	db.streamMu.Lock()
	defer db.streamMu.Unlock()
	err = db.update(func(txn *badger.Txn) error {
		for _, s := range infos {
			if err := txn.Delete(appendStreamKey(nil, task, s.Name)); err != nil {
				return err
			}
			if err := txn.Delete(appendReplayKey(nil, task, s.ID)); err != nil {
				return err
			}
		}
		return txn.Delete(appendTaskKey(nil, task))
	})
	return wrapErr(fmt.Sprintf("drop task %q", task), err)
}
