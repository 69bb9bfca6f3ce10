package store

import (
	"encoding/binary"
	"fmt"

	"github.com/dgraph-io/badger/v4"
)

// The replay table (added without a format change, as adding a table is compatible: see the
// package documentation) keeps, per (task, stream), the replay a reset started: where the
// stream restarted and the head it must reach to have caught up, so that a host shows the
// replay's progress until then.
//
//	replay   'R' (0x52) | u16 len(task) | task | u32 stream    i64 From | i64 Head | i64 At (ms)
const tableReplay byte = 'R'

const replayValueLen = 3 * 8

// Replay is a replay a reset started on a stream.
type Replay struct {
	From int64 // the offset the stream restarted at
	Head int64 // the stream's end when it was reset: caught up once its position reaches it
	At   int64 // when, in Unix milliseconds
}

func appendReplayKey(dst []byte, task string, stream uint32) []byte {
	return appendStreamPrefix(dst, tableReplay, task, stream)
}

func decodeReplay(v []byte) (Replay, error) {
	if len(v) != replayValueLen {
		return Replay{}, fmt.Errorf("%w: replay value of %d bytes", ErrCorrupt, len(v))
	}
	return Replay{From: int64(binary.BigEndian.Uint64(v)), Head: int64(binary.BigEndian.Uint64(v[8:])),
		At: int64(binary.BigEndian.Uint64(v[16:]))}, nil
}

// SetReplay records the replay a reset started on (task, stream); ClearReplay, with r nil,
// deletes it (a replay that caught up).
func (db *DB) SetReplay(task string, stream uint32, r *Replay) error {
	if err := db.enterWrite(task); err != nil {
		return err
	}
	defer db.leave()
	k := appendReplayKey(nil, task, stream)
	err := db.update(func(txn *badger.Txn) error {
		if r == nil {
			return txn.Delete(k)
		}
		v := appendI64(appendI64(appendI64(nil, r.From), r.Head), r.At)
		return txn.Set(k, v)
	})
	return wrapErr("replay", err)
}

// ReplayOf returns the replay recorded for (task, stream), if any.
func (db *DB) ReplayOf(task string, stream uint32) (Replay, bool, error) {
	if err := validTask(task); err != nil {
		return Replay{}, false, err
	}
	var r Replay
	var ok bool
	err := db.get(appendReplayKey(nil, task, stream), func(v []byte) (err error) {
		r, err = decodeReplay(v)
		ok = err == nil
		return err
	})
	return r, ok, wrapErr("replay", err)
}
