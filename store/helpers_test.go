package store

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"testing"

	"github.com/dgraph-io/badger/v4"
)

// openTestDB opens a store in a new temporary directory (or in memory with
// opts.InMemory). On cleanup it checks the store's consistency (checkDB) and
// closes it, unless the test closed it.
func openTestDB(t testing.TB, opts Options) *DB {
	t.Helper()
	if opts.InMemory {
		return openTestDBAt(t, "", opts)
	}
	return openTestDBAt(t, t.TempDir(), opts)
}

// openTestDBAt is openTestDB on a given directory (for reopening).
func openTestDBAt(t testing.TB, dir string, opts Options) *DB {
	t.Helper()
	db, err := Open(dir, opts)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() {
		db.mu.RLock()
		closed := db.closed
		db.mu.RUnlock()
		if closed {
			return
		}
		if err := checkDB(db); err != nil {
			t.Errorf("store inconsistent at cleanup: %v", err)
		}
		if err := db.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return db
}

// mustClose closes db, failing the test on error.
func mustClose(t testing.TB, db *DB) {
	t.Helper()
	if err := db.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
}

// mustStreamID returns the stream ID of (task, stream), failing the test on error.
func mustStreamID(t testing.TB, db *DB, task, stream string) uint32 {
	t.Helper()
	id, err := db.StreamID(task, stream)
	if err != nil {
		t.Fatalf("StreamID(%q, %q): %v", task, stream, err)
	}
	return id
}

// mustCommit commits cp, failing the test on error.
func mustCommit(t testing.TB, db *DB, cp *Checkpoint) {
	t.Helper()
	if err := db.Commit(cp); err != nil {
		t.Fatalf("Commit: %v", err)
	}
}

// checkDB decodes every record of the store and checks the cross-table
// invariants: one format version; every key and value of the right shape;
// every stream ID used by a position, mark, state entry, timer or due-index
// entry assigned to its task, and below the task's next ID; every timer
// indexed by exactly the due-index entry of its domain and due, and every
// due-index entry that of a timer; in the module registry, every version's
// bytes stored in contiguous pieces, no bytes without a version, every active
// version recorded.
func checkDB(db *DB) error {
	type taskStream struct {
		task   string
		stream uint32
	}
	next := map[string]uint32{}
	assigned := map[taskStream]bool{}
	used := map[taskStream]string{}
	var versions int
	modules := map[[32]byte]int{} // pieces by hash: highest index + 1
	pieces := map[[32]byte]int{}  // pieces by hash: count
	versionsOf := map[string][]ModuleVersion{}
	active := map[string]uint64{}
	timers := map[string]string{} // due-index key each timer needs -> timer key
	dues := map[string]bool{}     // due-index keys present
	err := db.bdb.View(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{})
		defer it.Close()
		for it.Rewind(); it.Valid(); it.Next() {
			k := it.Item().KeyCopy(nil)
			v, err := it.Item().ValueCopy(nil)
			if err != nil {
				return err
			}
			switch k[0] {
			case tableVersion:
				if !bytes.Equal(k, versionKey) {
					return fmt.Errorf("bad version key %x", k)
				}
				if _, err := decodeU32(v); err != nil {
					return err
				}
				versions++
			case tableTask:
				id, err := decodeU32(v)
				if err != nil {
					return err
				}
				next[string(k[1:])] = id
			case tableStream:
				rest, task, err := decodeTaskPrefix(k, tableStream)
				if err != nil {
					return err
				}
				if len(rest) == 0 {
					return fmt.Errorf("stream key %x without a name", k)
				}
				id, err := decodeU32(v)
				if err != nil {
					return err
				}
				if assigned[taskStream{task, id}] {
					return fmt.Errorf("task %q: stream ID %d assigned twice", task, id)
				}
				assigned[taskStream{task, id}] = true
			case tablePosition:
				rest, task, stream, err := decodeStreamPrefix(k, tablePosition)
				if err != nil {
					return err
				}
				if len(rest) != 0 {
					return fmt.Errorf("position key %x has trailing bytes", k)
				}
				if _, err := decodePosition(v); err != nil {
					return err
				}
				used[taskStream{task, stream}] = "position"
			case tableMark:
				_, task, stream, err := decodeStreamPrefix(k, tableMark)
				if err != nil {
					return err
				}
				if m, _, err := decodeMark(v); err != nil || m < NoneApplied {
					return fmt.Errorf("mark key %x: value %x: %v", k, v, err)
				}
				used[taskStream{task, stream}] = "mark"
			case tableState:
				task, stream, _, _, err := decodeStateKey(k)
				if err != nil {
					return err
				}
				used[taskStream{task, stream}] = "state"
			case tableTimer:
				task, stream, key, name, err := decodeTimerKey(k)
				if err != nil {
					return err
				}
				domain, due, _, err := decodeTimerValue(v)
				if err != nil {
					return err
				}
				if domain > MaxTimerDomain {
					return fmt.Errorf("timer key %x: domain %d", k, domain)
				}
				timers[string(appendDueKey(nil, task, stream, domain, due, key, name))] = string(k)
				used[taskStream{task, stream}] = "timer"
			case tableDue:
				task, stream, _, _, _, _, err := decodeDueKey(k)
				if err != nil {
					return err
				}
				if len(v) != 0 {
					return fmt.Errorf("due key %x: value %x", k, v)
				}
				dues[string(k)] = true
				used[taskStream{task, stream}] = "due-index entry"
			case tableModule:
				sum, i, err := decodeModuleChunkKey(k)
				if err != nil {
					return err
				}
				modules[sum] = max(modules[sum], int(i)+1)
				pieces[sum]++
			case tableVersionRecord:
				_, task, err := decodeTaskPrefix(k, tableVersionRecord)
				if err != nil {
					return err
				}
				mv, err := decodeVersionValue(v)
				if err != nil {
					return err
				}
				if !bytes.Equal(k, appendVersionKey(nil, task, mv.Version)) {
					return fmt.Errorf("version key %x holds version %d", k, mv.Version)
				}
				versionsOf[task] = append(versionsOf[task], mv)
			case tableActive:
				rest, task, err := decodeTaskPrefix(k, tableActive)
				if err != nil || len(rest) != 0 {
					return fmt.Errorf("active key %x: %v", k, err)
				}
				a, err := decodeActiveValue(v)
				if err != nil {
					return err
				}
				active[task] = a.Version
			case tableReplay:
				if _, _, _, err := decodeStreamPrefix(k, tableReplay); err != nil {
					return err
				}
				if _, err := decodeReplay(v); err != nil {
					return err
				}
			case tableCommitSeq:
				if !bytes.Equal(k, commitSeqKey) || len(v) != 8 {
					return fmt.Errorf("bad checkpoint number %x = %x", k, v)
				}
				if n := binary.BigEndian.Uint64(v); n != db.seq {
					return fmt.Errorf("checkpoint number %d in the store, %d in the DB", n, db.seq)
				}
			case tableChain:
				rest, _, err := decodeTaskPrefix(k, tableChain)
				if err != nil || len(rest) < 2 || len(rest) != 2+int(binary.BigEndian.Uint16(rest))+8 {
					return fmt.Errorf("chain key %x: %v", k, err)
				}
			case tableApplied:
				rest, task, stream, err := decodeStreamPrefix(k, tableApplied)
				if err != nil || len(rest) != 0 {
					return fmt.Errorf("applied set key %x: %v", k, err)
				}
				if _, err := decodeApplied(v); err != nil {
					return fmt.Errorf("task %q stream %d: %w", task, stream, err)
				}
				used[taskStream{task, stream}] = "applied set"
			default:
				return fmt.Errorf("key %x of unknown table", k)
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	var errs []error
	if versions != 1 {
		errs = append(errs, fmt.Errorf("%d format versions", versions))
	}
	for ts := range assigned {
		if ts.stream == 0 || ts.stream >= next[ts.task] {
			errs = append(errs, fmt.Errorf("task %q: stream ID %d not below next ID %d", ts.task, ts.stream, next[ts.task]))
		}
	}
	referenced := map[[32]byte]bool{}
	for task, vs := range versionsOf {
		for _, mv := range vs {
			referenced[mv.SHA256] = true
			if pieces[mv.SHA256] == 0 {
				errs = append(errs, fmt.Errorf("task %q version %d: module bytes missing", task, mv.Version))
			}
		}
	}
	for sum, n := range modules {
		if pieces[sum] != n {
			errs = append(errs, fmt.Errorf("module %x: %d pieces up to index %d", sum, pieces[sum], n-1))
		}
		if !referenced[sum] {
			errs = append(errs, fmt.Errorf("module %x: no version refers to it", sum))
		}
	}
	for task, v := range active {
		found := false
		for _, mv := range versionsOf[task] {
			found = found || mv.Version == v
		}
		if !found {
			errs = append(errs, fmt.Errorf("task %q: active version %d has no record", task, v))
		}
	}
	for dk, tk := range timers {
		if !dues[dk] {
			errs = append(errs, fmt.Errorf("timer %x has no due-index entry %x", tk, dk))
		}
	}
	for dk := range dues {
		if _, ok := timers[dk]; !ok {
			errs = append(errs, fmt.Errorf("due-index entry %x has no timer", dk))
		}
	}
	for ts, what := range used {
		if !assigned[ts] {
			errs = append(errs, fmt.Errorf("task %q: %s of unassigned stream %d", ts.task, what, ts.stream))
		}
	}
	return errors.Join(errs...)
}

// dumpDB returns every Badger key and value of the store, for comparing two
// stores byte for byte.
func dumpDB(t testing.TB, db *DB) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := db.bdb.View(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{})
		defer it.Close()
		for it.Rewind(); it.Valid(); it.Next() {
			v, err := it.Item().ValueCopy(nil)
			if err != nil {
				return err
			}
			out[string(it.Item().Key())] = string(v)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("dump: %v", err)
	}
	return out
}

// getString returns the value of name, or "<none>" if absent.
func getString(t testing.TB, db *DB, task string, stream uint32, key, name string) string {
	t.Helper()
	v, ok, err := db.Get(task, stream, []byte(key), []byte(name))
	if err != nil {
		t.Fatalf("Get(%q, %d, %q, %q): %v", task, stream, key, name, err)
	}
	if !ok {
		if v != nil {
			t.Errorf("Get(%q, %d, %q, %q) = %q, false: want nil value when absent", task, stream, key, name, v)
		}
		return "<none>"
	}
	return string(v)
}

// set and del build Writes.
func set(name, value string) Write { return Write{Name: []byte(name), Value: []byte(value)} }
func del(name string) Write        { return Write{Name: []byte(name), Delete: true} }

// errCrash is the failure commitCrashingAt injects.
var errCrash = errors.New("crash between transactions")

// commitCrashingAt commits cp on db failing its transaction k (0-based) as a crash would, and
// reports whether the commit finished, having fewer transactions than k+1.
func commitCrashingAt(t *testing.T, db *DB, k int, cp *Checkpoint) (finished bool) {
	t.Helper()
	db.opts.beforeTxn = func(i int) error {
		if i == k {
			return errCrash
		}
		return nil
	}
	defer func() { db.opts.beforeTxn = nil }()
	err := db.Commit(cp)
	if err != nil && !errors.Is(err, errCrash) {
		t.Fatalf("k=%d: Commit: %v", k, err)
	}
	return err == nil
}
