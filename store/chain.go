package store

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"

	"github.com/dgraph-io/badger/v4"
)

// Chain logs (added without a format change: see the package doc on adding tables).
//
// A chain log is the durable, numbered sequence of one task's records of one output name that
// other tasks of the same host read as an input (task chaining). Its entries are written by the
// producing task's Commit (Checkpoint.Chain), in the same transaction as the state, marks and
// positions of that checkpoint, so a crash keeps both or neither; readers read them with
// ChainRead and, once their own checkpoints cover a prefix, drop it with ChainTrim.
//
// Layout: 'L' | u16 len(task) | task | u16 len(output) | output | u64 offset → value (opaque).
const tableChain byte = 'L'

// MaxChainOutputLen is the longest output name of a chain log, in bytes.
const MaxChainOutputLen = 255

// ChainEntry is one entry of a chain log: in a Checkpoint, an entry to append; from ChainRead,
// an entry read.
type ChainEntry struct {
	// Output names the log within the task (the output name the entries were emitted to).
	Output string
	// Offset numbers the entry within its log. A Checkpoint's entries of one log must have
	// increasing offsets, each above every offset already in the log.
	Offset uint64
	// Value is the entry's bytes, opaque to the store.
	Value []byte
}

func appendChainPrefix(dst []byte, task, output string) []byte {
	dst = appendTaskPrefix(dst, tableChain, task)
	dst = binary.BigEndian.AppendUint16(dst, uint16(len(output)))
	return append(dst, output...)
}

func chainKeyLen(task, output string) int {
	return taskPrefixOverhead + len(task) + 2 + len(output) + 8
}

// ChainEntryCost is the estimated cost, in entries and bytes, of one chain log entry in a
// checkpoint of task, like StateWriteCost.
func ChainEntryCost(task, output string, valueLen int) (entries, bytes int) {
	return 1, chainKeyLen(task, output) + entryOverhead + valueCost(valueLen)
}

func validChainOutput(output string) error {
	if len(output) == 0 || len(output) > MaxChainOutputLen {
		return fmt.Errorf("%w: chain output name of %d bytes (want 1..%d)", ErrInvalidName, len(output), MaxChainOutputLen)
	}
	return nil
}

// validateChain checks a checkpoint's chain entries: valid names, increasing offsets per log.
func validateChain(cp *Checkpoint) error {
	last := map[string]uint64{}
	for i := range cp.Chain {
		e := &cp.Chain[i]
		if err := validChainOutput(e.Output); err != nil {
			return fmt.Errorf("%w: task %q: %w", ErrInvalidCheckpoint, cp.Task, err)
		}
		if l, ok := last[e.Output]; ok && e.Offset <= l {
			return fmt.Errorf("%w: task %q: chain %q: offset %d after %d", ErrInvalidCheckpoint, cp.Task, e.Output, e.Offset, l)
		}
		last[e.Output] = e.Offset
	}
	return nil
}

// chainSize is the estimated cost of a checkpoint's chain entries.
func chainSize(cp *Checkpoint) (entries, size int) {
	for i := range cp.Chain {
		e, s := ChainEntryCost(cp.Task, cp.Chain[i].Output, len(cp.Chain[i].Value))
		entries, size = entries+e, size+s
	}
	return entries, size
}

// writeChain adds the checkpoint's chain entries to the current transaction.
func (w *txnWriter) writeChain(cp *Checkpoint) error {
	for i := range cp.Chain {
		e := &cp.Chain[i]
		k := appendChainPrefix(w.alloc(chainKeyLen(cp.Task, e.Output)), cp.Task, e.Output)
		k = binary.BigEndian.AppendUint64(k, e.Offset)
		if err := w.txn.Set(k, e.Value); err != nil {
			if errors.Is(err, badger.ErrTxnTooBig) {
				err = fmt.Errorf("%w: %w", ErrTxnTooBig, err)
			}
			return fmt.Errorf("store: commit: chain %q entry %d: %w", e.Output, e.Offset, err)
		}
	}
	return nil
}

// ChainRead calls fn, in order of offset, for the entries of task's chain log output from offset
// from on, until fn returns false or max entries were read (max ≤ 0: no bound). value is valid
// only during fn. It sees the log as of one committed state: every entry of a checkpoint or
// none.
func (db *DB) ChainRead(task, output string, from uint64, max int, fn func(offset uint64, value []byte) bool) error {
	if err := validTask(task); err != nil {
		return err
	}
	if err := validChainOutput(output); err != nil {
		return err
	}
	prefix := appendChainPrefix(nil, task, output)
	seek := binary.BigEndian.AppendUint64(append([]byte(nil), prefix...), from)
	n := 0
	err := db.iterate(prefix, seek, func(k []byte, item *badger.Item) (bool, error) {
		off := binary.BigEndian.Uint64(k[len(prefix):])
		more := true
		if err := item.Value(func(v []byte) error { more = fn(off, v); return nil }); err != nil {
			return false, err
		}
		n++
		return more && (max <= 0 || n < max), nil
	})
	return wrapErr("chain read", err)
}

// ChainHead returns the offset after the last entry of task's chain log output (0 when the log
// is empty: a new log, or one ChainTrim emptied, which it never does entirely).
func (db *DB) ChainHead(task, output string) (uint64, error) {
	if err := validTask(task); err != nil {
		return 0, err
	}
	if err := validChainOutput(output); err != nil {
		return 0, err
	}
	if err := db.enter(); err != nil {
		return 0, err
	}
	defer db.leave()
	prefix := appendChainPrefix(nil, task, output)
	var head uint64
	err := db.bdb.View(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{Prefix: prefix, Reverse: true, PrefetchValues: false})
		defer it.Close()
		it.Seek(binary.BigEndian.AppendUint64(append([]byte(nil), prefix...), math.MaxUint64))
		if it.ValidForPrefix(prefix) {
			head = binary.BigEndian.Uint64(it.Item().Key()[len(prefix):]) + 1
		}
		return nil
	})
	return head, wrapErr("chain head", err)
}

// ChainTrim deletes the entries of task's chain log output from offset from (the caller's
// knowledge of what is already gone: the scan starts there rather than over the tombstones of
// earlier trims) up to below, except the last entry of the log, which it always keeps so that
// ChainHead survives a restart. It returns how many it deleted. Trimming runs in transactions of its own, apart from checkpoints: an entry
// left by a crash is trimmed by the next call.
func (db *DB) ChainTrim(task, output string, from, below uint64) (int, error) {
	head, err := db.ChainHead(task, output)
	if err != nil || head == 0 {
		return 0, err
	}
	below = min(below, head-1)
	if err := db.enterWrite(task); err != nil {
		return 0, err
	}
	defer db.leave()
	prefix := appendChainPrefix(nil, task, output)
	var keys [][]byte
	err = db.bdb.View(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{Prefix: prefix, PrefetchValues: false})
		defer it.Close()
		for it.Seek(binary.BigEndian.AppendUint64(append([]byte(nil), prefix...), from)); it.ValidForPrefix(prefix); it.Next() {
			k := it.Item().KeyCopy(nil)
			if binary.BigEndian.Uint64(k[len(prefix):]) >= below {
				break
			}
			keys = append(keys, k)
		}
		return nil
	})
	if err != nil {
		return 0, wrapErr("chain trim", err)
	}
	deleted := 0
	for len(keys) > 0 {
		n := min(len(keys), db.opts.MaxTxnEntries/2)
		txn := db.bdb.NewTransaction(true)
		for _, k := range keys[:n] {
			if err := txn.Delete(k); err != nil {
				txn.Discard()
				return deleted, wrapErr("chain trim", err)
			}
		}
		err := db.commitTxn(txn)
		txn.Discard()
		if err != nil {
			return deleted, wrapErr("chain trim", err)
		}
		deleted += n
		keys = keys[n:]
	}
	return deleted, nil
}

// addCost returns a function adding a cost to (entries, size), for adding a call's two results.
func addCost(entries, size int) func(e, s int) (int, int) {
	return func(e, s int) (int, int) { return entries + e, size + s }
}
