package store

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"

	"github.com/dgraph-io/badger/v4"
)

// DB is an open store. It is safe for concurrent use.
type DB struct {
	bdb  *badger.DB
	dir  string  // "" for an in-memory store
	opts Options // defaults applied; MaxTxn* clamped to Badger's limits

	// mu guards closed: methods hold it shared while they use bdb; Close
	// holds it exclusively.
	mu     sync.RWMutex
	closed bool

	streamMu sync.Mutex // serialises stream ID assignment

	// The write locks (locks.go): writeMu, shared by Commits and exclusive for Restore,
	// DropStream, MoveStream and the timer count; the streams Commits in progress write; the
	// checkpoint number; the journal.
	writeMu     sync.RWMutex
	streamLocks streamLocks
	seqMu       sync.Mutex
	journalMu   sync.Mutex

	floors dueFloors // where DueTimers may start its seeks; see dueFloors

	timerCounts timerCounts // the counts of PendingTimers

	registryMu sync.Mutex // serialises writes to the module registry

	allocMu   sync.Mutex      // guards allocated
	allocated map[string]bool // memtable logs allocateLogs allocated, by file name

	seq       uint64    // the number of the last checkpoint handed to Badger; guarded by seqMu after Open
	journaled uint64    // the number the journal holds, once written after Open; guarded by journalMu
	rollback  *Rollback // checkpoints lost before Open (journal.go), nil if none
}

// Position is how far a task has got in one stream.
type Position struct {
	// Next is the offset of the next record to read: every record below it
	// is complete and its effects are committed (the committed prefix).
	Next int64
	// Horizon is the highest offset whose effects may be in the stored state,
	// or -1 if none. Records from Next to Horizon may have been applied; the
	// per-key applied marks say which.
	Horizon int64
	// Resume is a source-specific token for resuming at Next, for example the
	// byte offset of record Next in a file. The store does not interpret it.
	Resume int64
	// Watermark is the stream's event-time watermark (ms since the epoch) as of the checkpoint,
	// or -1 if none. Positions written before it existed read as -1.
	Watermark int64
	// TopicID is the Kafka topic id of the partition the position is in (all zero: unknown, not
	// Kafka, or written before it existed). The store does not interpret it; a host compares it
	// with the topic's id to tell a recreated topic of the same name. For a file input it is the
	// host's fingerprint of the file's first bytes, to tell a replaced file at a restart.
	TopicID [16]byte
	// Epoch is, for a Kafka partition with a changelog, the highest changelog owner epoch this
	// copy of the partition has read or claimed as of Resume (0: none, or written before it
	// existed). The store does not interpret it; a changelog replay that starts at Resume ignores
	// the records of owners below it.
	Epoch uint64
	// LeaderEpoch is, for a Kafka partition, the leader epoch of the last record below Next
	// (format 5; the zero value: unknown, as in a position written before it, one of a file
	// input, or one a reset set). The store does not interpret it; a host resumes the partition
	// at Next with it, so that the broker can tell whether its log still holds the records below
	// Next as they were read (Kafka's OffsetForLeaderEpoch).
	LeaderEpoch LeaderEpoch
}

// LeaderEpoch is a Kafka leader epoch as a Position keeps it: the epoch plus one, so that the
// zero value is unknown.
type LeaderEpoch uint32

// KnownLeaderEpoch is epoch e (a record's partition leader epoch) as a Position keeps it; a
// negative e (unknown) is the zero value.
func KnownLeaderEpoch(e int32) LeaderEpoch {
	if e < 0 {
		return 0
	}
	return LeaderEpoch(uint32(e) + 1)
}

// Epoch is the leader epoch, or -1 when unknown (Kafka's own "no epoch").
func (e LeaderEpoch) Epoch() int32 { return int32(e) - 1 }

// StreamInfo names one stream of a task.
type StreamInfo struct {
	ID   uint32
	Name string
}

// Open opens the store in dir, creating dir and a new store if needed (unless
// opts.ReadOnly). With opts.InMemory, dir must be "".
//
// Open returns ErrLocked if another user holds the store, ErrFormatTooNew if
// it was written by a newer version of this package, ErrNotStore if dir holds
// some other Badger database, and an error wrapping ErrInvalidOptions if opts
// does not validate. A read-only Open of a missing dir returns an error
// wrapping fs.ErrNotExist.
//
// Before Badger opens the store, Open verifies its files: the MANIFEST and
// the checksum of every table (one read of the whole store). A damaged or
// missing file, and a store that had data (it has MarkerFile) but opens
// empty, fail with ErrCorrupt naming the file or directory; Open recovers a
// panic of Badger's into the same error. An Open for writing returns
// ErrDiskFull when dir's file system has less than Options.MinFreeBytes
// free. A read-only Open of a store left by a crash (Badger must first cut
// the torn tail of its log) does that recovery with a brief read-write open
// when no other user holds the store.
func Open(dir string, opts Options) (db *DB, err error) {
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	if opts.InMemory != (dir == "") {
		return nil, fmt.Errorf("%w: dir must be empty exactly when InMemory is set", ErrInvalidOptions)
	}
	opts = opts.withDefaults()
	marked, innerMarked, outerMarked := false, false, false
	if !opts.InMemory {
		if outerMarked, err = hasOuterMarker(dir); err != nil {
			return nil, err
		}
		if _, err := os.Stat(dir); outerMarked && errors.Is(err, fs.ErrNotExist) {
			return nil, corrupt(dir, "missing, but the store had data (%s says so): the whole directory was deleted or moved", OuterMarker(dir))
		}
	}
	if opts.ReadOnly {
		if _, err := os.Stat(dir); err != nil {
			return nil, fmt.Errorf("store: open read-only: %w", err)
		}
	}
	if !opts.InMemory {
		unlock, held := tryLock(dir, opts.ReadOnly)
		if held {
			return nil, fmt.Errorf("%w: %s", ErrLocked, dir)
		}
		innerMarked, err = hasMarker(dir)
		marked = innerMarked || outerMarked
		var fixes fileFixes
		if err == nil {
			fixes, err = checkFiles(dir, marked)
		}
		unlock()
		if err != nil {
			return nil, err
		}
		fixes.log(opts.logger(), dir)
		if !opts.ReadOnly && opts.MinFreeBytes >= 0 {
			if err := os.MkdirAll(dir, 0o755); err != nil {
				return nil, fmt.Errorf("store: open: %w", err)
			}
			if err := checkSpace(dir, opts.MinFreeBytes); err != nil {
				return nil, err
			}
		}
	}
	bdb, err := openBadger(dir, opts.badgerOptions(dir))
	if opts.ReadOnly && truncateNeeded(err) && !lockHeld(dir, false) {
		// A crash left a torn tail in Badger's log; a read-write open cuts it off, as the
		// host's next run would, and the store then opens read-only.
		var rw *badger.DB
		if rw, err = openBadger(dir, opts.badgerOptions(dir).WithReadOnly(false)); err == nil {
			if err = rw.Close(); err == nil {
				bdb, err = openBadger(dir, opts.badgerOptions(dir))
			}
		}
	}
	if err != nil {
		if errors.Is(err, ErrCorrupt) {
			return nil, err
		}
		if !opts.InMemory && lockHeld(dir, opts.ReadOnly) {
			return nil, fmt.Errorf("%w: %w", ErrLocked, err)
		}
		return nil, fmt.Errorf("store: open %s: %w", dir, err)
	}
	// Stay below Badger's own transaction limits, which Commit's estimate
	// approximates from above.
	opts.MaxTxnBytes = int(min(int64(opts.MaxTxnBytes), bdb.MaxBatchSize()*9/10))
	opts.MaxTxnEntries = int(min(int64(opts.MaxTxnEntries), bdb.MaxBatchCount()*9/10))
	db = &DB{bdb: bdb, opts: opts, dir: dir}
	if err := db.checkFormat(marked); err != nil {
		_ = bdb.Close()
		return nil, err
	}
	if err := db.checkJournal(); err != nil {
		_ = bdb.Close()
		return nil, err
	}
	if !opts.InMemory && !opts.ReadOnly && (!innerMarked || !outerMarked) {
		// The format version must be on disk before the markers say the store has data.
		err := bdb.Sync()
		if err == nil && !innerMarked {
			err = writeMarker(dir)
		}
		if err == nil && !outerMarked {
			err = writeMarkerAt(OuterMarker(dir))
		}
		if err != nil {
			_ = bdb.Close()
			return nil, err
		}
	}
	db.allocateLogs()
	return db, nil
}

// CheckUnlocked returns ErrLocked if a user (a running host, or a reader)
// holds the store in dir.
func CheckUnlocked(dir string) error {
	if lockHeld(dir, false) {
		return fmt.Errorf("%w: %s", ErrLocked, dir)
	}
	return nil
}

// truncateNeeded reports whether err is Badger's ErrTruncateNeeded, which it
// formats into its errors (%+v) instead of wrapping.
func truncateNeeded(err error) bool {
	return err != nil && (errors.Is(err, badger.ErrTruncateNeeded) ||
		strings.Contains(err.Error(), badger.ErrTruncateNeeded.Error()))
}

// openBadger is badger.Open, with a panic turned into ErrCorrupt.
func openBadger(dir string, bo badger.Options) (bdb *badger.DB, err error) {
	defer recoverCorrupt(dir, &err)
	return badger.Open(bo)
}

// checkFormat reads the format version, writing it into a new store. marked
// tells that the store had data: then it must have a format version.
func (db *DB) checkFormat(marked bool) error {
	var (
		version uint32
		found   bool
		empty   bool
	)
	err := db.bdb.View(func(txn *badger.Txn) error {
		item, err := txn.Get(versionKey)
		if errors.Is(err, badger.ErrKeyNotFound) {
			it := txn.NewIterator(badger.IteratorOptions{})
			defer it.Close()
			it.Rewind()
			empty = !it.Valid()
			return nil
		}
		if err != nil {
			return err
		}
		found = true
		return item.Value(func(v []byte) error {
			version, err = decodeU32(v)
			return err
		})
	})
	switch {
	case err != nil:
		return fmt.Errorf("store: read format version: %w", err)
	case found && version > FormatVersion:
		return fmt.Errorf("%w: store has format %d, this version supports up to %d",
			ErrFormatTooNew, version, FormatVersion)
	case found && version == 0:
		return fmt.Errorf("%w: format version 0", ErrCorrupt)
	case found && (version == FormatVersion || db.opts.ReadOnly):
		// This version reads every older format as it is.
		return nil
	case found:
		// An older format (1 to 4): its tables are a subset of this one's (a
		// format-3 store has no applied sets: its marks are every key's), its
		// 8-byte mark values and tail-less version records stay readable, so
		// upgrading only records the new version, after which an older binary
		// refuses the store.
	case marked:
		return fmt.Errorf("%w: %s: the store had data (it has %s, or %s is beside it) but opens without it: its MANIFEST or tables were lost or replaced",
			ErrCorrupt, db.dir, MarkerFile, filepath.Base(OuterMarker(db.dir)))
	case !empty:
		return fmt.Errorf("%w: database has data but no format version", ErrNotStore)
	case db.opts.ReadOnly:
		return nil // an empty store: every read finds nothing
	}
	err = db.update(func(txn *badger.Txn) error {
		return txn.Set(versionKey, binary.BigEndian.AppendUint32(nil, FormatVersion))
	})
	if err != nil {
		return fmt.Errorf("store: write format version: %w", err)
	}
	return nil
}

// Close closes the store. It waits for calls in progress, and is idempotent:
// later calls return nil. Other methods return ErrClosed afterwards.
//
// When the file system has less free space than Options.MemTableSize (and
// the free-space check is on), Close does not close Badger, which would crash
// the process with SIGBUS writing its memtable to a table; it returns
// ErrDiskFull, and the store stays as after a crash, locked until the process
// exits. Nothing committed is lost: the next Open replays Badger's log.
func (db *DB) Close() error {
	db.mu.Lock()
	defer db.mu.Unlock()
	if db.closed {
		return nil
	}
	db.closed = true
	if free, ok := db.lowOnSpace(); ok {
		// Badger's Close writes the memtable into a new table through a memory-mapped
		// file, which a full disk turns into SIGBUS. Every commit is in its log, so
		// leaving it as a crash would loses nothing: the next Open replays the log.
		return fmt.Errorf("%w: %s: %d bytes free: the store is left as after a crash (the next open replays its log; nothing is lost), and stays locked until the process exits",
			ErrDiskFull, db.dir, free)
	}
	if err := db.bdb.Close(); err != nil {
		return fmt.Errorf("store: close: %w", err)
	}
	return nil
}

// lowOnSpace reports whether a writable on-disk store's file system has less
// free space than one memtable, which Close would write into a table, and
// the bytes free.
func (db *DB) lowOnSpace() (int64, bool) {
	if db.dir == "" || db.opts.ReadOnly || db.opts.MinFreeBytes < 0 {
		return 0, false
	}
	free, err := freeBytes(db.dir)
	return free, err == nil && free < db.opts.MemTableSize
}

// enter marks the start of a call that uses bdb; leave must follow unless it
// returns an error.
func (db *DB) enter() error {
	db.mu.RLock()
	if db.closed {
		db.mu.RUnlock()
		return ErrClosed
	}
	return nil
}

func (db *DB) leave() { db.mu.RUnlock() }

// enterWrite is enter for a method that writes task's data: it also checks the task's name and
// refuses a read-only store (ErrReadOnly). The caller calls leave once it returned nil.
func (db *DB) enterWrite(task string) error {
	if err := validTask(task); err != nil {
		return err
	}
	if err := db.enter(); err != nil {
		return err
	}
	if db.opts.ReadOnly {
		db.leave()
		return ErrReadOnly
	}
	return nil
}

// StreamID returns the stream ID of (task, stream), assigning the next free ID
// of the task if the stream has none yet. IDs start at 1 and are never reused
// or changed. On a read-only DB, StreamID returns ErrReadOnly for a stream
// without an ID. Names are validated as described for ErrInvalidName.
func (db *DB) StreamID(task, stream string) (uint32, error) {
	if err := validTask(task); err != nil {
		return 0, err
	}
	if err := validStreamName(stream); err != nil {
		return 0, err
	}
	if err := db.enter(); err != nil {
		return 0, err
	}
	defer db.leave()

	key := appendStreamKey(nil, task, stream)
	lookup := func(txn *badger.Txn) (uint32, bool, error) {
		item, err := txn.Get(key)
		if errors.Is(err, badger.ErrKeyNotFound) {
			return 0, false, nil
		}
		if err != nil {
			return 0, false, err
		}
		var id uint32
		err = item.Value(func(v []byte) error {
			id, err = decodeU32(v)
			return err
		})
		return id, err == nil, err
	}
	var id uint32
	var ok bool
	err := db.bdb.View(func(txn *badger.Txn) (err error) {
		id, ok, err = lookup(txn)
		return err
	})
	if err != nil || ok {
		return id, wrapErr("stream id", err)
	}
	if db.opts.ReadOnly {
		return 0, fmt.Errorf("%w: task %q stream %q has no ID", ErrReadOnly, task, stream)
	}

	db.streamMu.Lock()
	defer db.streamMu.Unlock()
	err = db.update(func(txn *badger.Txn) (err error) {
		if id, ok, err = lookup(txn); err != nil || ok {
			return err // assigned while we waited for streamMu
		}
		taskKey := appendTaskKey(nil, task)
		id = 1
		item, err := txn.Get(taskKey)
		switch {
		case errors.Is(err, badger.ErrKeyNotFound):
		case err != nil:
			return err
		default:
			err = item.Value(func(v []byte) error {
				id, err = decodeU32(v)
				return err
			})
			if err != nil {
				return err
			}
		}
		if id == 0 || id == math.MaxUint32 {
			return fmt.Errorf("task %q: stream IDs exhausted", task)
		}
		if err := txn.Set(key, binary.BigEndian.AppendUint32(nil, id)); err != nil {
			return err
		}
		return txn.Set(taskKey, binary.BigEndian.AppendUint32(nil, id+1))
	})
	return id, wrapErr("assign stream id", err)
}

// Streams returns the streams of task that have an ID, in ID order.
func (db *DB) Streams(task string) ([]StreamInfo, error) {
	if err := validTask(task); err != nil {
		return nil, err
	}
	var out []StreamInfo
	prefix := appendTaskPrefix(nil, tableStream, task)
	err := db.iterate(prefix, nil, func(k []byte, item *badger.Item) (bool, error) {
		var id uint32
		err := item.Value(func(v []byte) (err error) {
			id, err = decodeU32(v)
			return err
		})
		if err != nil {
			return false, err
		}
		out = append(out, StreamInfo{ID: id, Name: string(k[len(prefix):])})
		return true, nil
	})
	slices.SortFunc(out, func(a, b StreamInfo) int { return cmp.Compare(a.ID, b.ID) })
	return out, wrapErr("streams", err)
}

// Tasks returns the tasks that have at least one stream, sorted bytewise.
func (db *DB) Tasks() ([]string, error) {
	var out []string
	err := db.iterate([]byte{tableTask}, nil, func(k []byte, _ *badger.Item) (bool, error) {
		out = append(out, string(k[1:]))
		return true, nil
	})
	return out, wrapErr("tasks", err)
}

// Get returns a copy of the value of name under (task, stream, key), and
// whether it exists.
func (db *DB) Get(task string, stream uint32, key, name []byte) (val []byte, ok bool, err error) {
	if err := validTask(task); err != nil {
		return nil, false, err
	}
	k := appendStateKey(make([]byte, 0, stateKeyLen(task, key, name)), task, stream, key, name)
	err = db.get(k, func(v []byte) error {
		val = append([]byte{}, v...) // non-nil even when empty
		ok = true
		return nil
	})
	return val, ok, wrapErr("get", err)
}

// Scan calls fn for each name of (task, stream, key) that starts with prefix
// and is strictly greater than after (nil after: from the first such name), in
// ascending bytewise order, until fn returns false. name and val are valid
// only during the call to fn; copy them to keep them. fn must not call other
// methods of db.
func (db *DB) Scan(task string, stream uint32, key, prefix, after []byte, fn func(name, val []byte) (more bool)) error {
	if err := validTask(task); err != nil {
		return err
	}
	base := appendStateKeyPrefix(nil, task, stream, key)
	scanPrefix := append(base[:len(base):len(base)], prefix...)
	seek, skip := scanPrefix, []byte(nil)
	if after != nil && bytes.Compare(after, prefix) >= 0 {
		seek = append(base[:len(base):len(base)], after...)
		skip = seek
	}
	err := db.iterate(scanPrefix, seek, func(k []byte, item *badger.Item) (bool, error) {
		if skip != nil && bytes.Equal(k, skip) {
			return true, nil
		}
		more := false
		err := item.Value(func(v []byte) error {
			more = fn(k[len(base):], v)
			return nil
		})
		return more, err
	})
	return wrapErr("scan", err)
}

// ScanKeys calls fn for every state entry of (task, stream) whose key starts
// with keyPrefix (nil: all keys), until fn returns false. Entries come ordered
// by key length, then key bytes, then name bytes. key, name and val are valid
// only during the call to fn. fn must not call other methods of db. ScanKeys
// is meant for inspection tools; it reads every key of the stream.
func (db *DB) ScanKeys(task string, stream uint32, keyPrefix []byte, fn func(key, name, val []byte) (more bool)) error {
	if err := validTask(task); err != nil {
		return err
	}
	prefix := appendStreamPrefix(nil, tableState, task, stream)
	err := db.iterateSeek(prefix, nil, func(k []byte, item *badger.Item) ([]byte, bool, error) {
		_, _, key, name, err := decodeStateKey(k)
		if err != nil {
			return nil, false, err
		}
		if !bytes.HasPrefix(key, keyPrefix) {
			// Skip the key's remaining names.
			return prefixEnd(k[:len(k)-len(name)]), true, nil
		}
		more := false
		err = item.Value(func(v []byte) error {
			more = fn(key, name, v)
			return nil
		})
		return nil, more, err
	})
	return wrapErr("scan keys", err)
}

// Position returns the committed position of (task, stream) and whether it has
// one.
func (db *DB) Position(task string, stream uint32) (Position, bool, error) {
	if err := validTask(task); err != nil {
		return Position{}, false, err
	}
	var p Position
	var ok bool
	err := db.get(appendPositionKey(nil, task, stream), func(v []byte) (err error) {
		p, err = decodePosition(v)
		ok = err == nil
		return err
	})
	return p, ok, wrapErr("position", err)
}

// Mark returns the applied mark of (task, stream, key) and whether it has one.
// A mark of NoneApplied (-1) means that no record offset of the key was
// applied. A mark below the stream's Position.Next may be older than the
// key's state (a checkpoint leaves it when the new one is below Next too:
// see the package documentation): it then says only that replay, which
// starts at Next, skips none of the key's records.
func (db *DB) Mark(task string, stream uint32, key []byte) (mark int64, ok bool, err error) {
	mark, _, ok, err = db.MarkInfo(task, stream, key)
	return mark, ok, err
}

// MarkInfo returns the applied mark of (task, stream, key), the state version
// stored with it (KeyWrites.StateVersion; 0 for a mark written by format 1)
// and whether the key has a mark. The state version is always the current
// one; the mark, as with Mark, may be older below the stream's Next.
func (db *DB) MarkInfo(task string, stream uint32, key []byte) (mark int64, stateVersion uint32, ok bool, err error) {
	if err := validTask(task); err != nil {
		return 0, 0, false, err
	}
	err = db.get(appendMarkKey(nil, task, stream, key), func(v []byte) (err error) {
		mark, stateVersion, err = decodeMark(v)
		ok = err == nil
		return err
	})
	return mark, stateVersion, ok, wrapErr("mark", err)
}

// Marks calls fn for every applied mark of (task, stream), in bytewise key
// order, until fn returns false (a mark below the stream's Next may be older
// than the key's state, as with Mark). key is valid only during the call to
// fn. fn must not call other methods of db.
func (db *DB) Marks(task string, stream uint32, fn func(key []byte, mark int64) (more bool)) error {
	if err := validTask(task); err != nil {
		return err
	}
	return wrapErr("marks", db.marks(task, stream, func(key []byte, mark int64, _ uint32) bool {
		return fn(key, mark)
	}))
}

// KeysWithVersionNot calls fn for every key of (task, stream) that has a mark
// whose state version is not v, with that version, in bytewise key order,
// until fn returns false. Every key with state has a mark (the host writes
// one with every state change, NoneApplied if need be), so this finds every
// key whose state a module of state version v has not written, unless its
// mark was dropped (DropMark). It reads every mark of the stream. key is
// valid only during the call to fn; fn must not call other methods of db
// (collect the keys, then migrate them).
func (db *DB) KeysWithVersionNot(task string, stream uint32, v uint32, fn func(key []byte, stateVersion uint32) (more bool)) error {
	if err := validTask(task); err != nil {
		return err
	}
	return wrapErr("keys with version", db.marks(task, stream, func(key []byte, _ int64, version uint32) bool {
		return version == v || fn(key, version)
	}))
}

// marks calls fn for every mark of (task, stream) until fn returns false.
func (db *DB) marks(task string, stream uint32, fn func(key []byte, mark int64, stateVersion uint32) bool) error {
	prefix := appendStreamPrefix(nil, tableMark, task, stream)
	return db.iterate(prefix, nil, func(k []byte, item *badger.Item) (bool, error) {
		var mark int64
		var version uint32
		err := item.Value(func(v []byte) (err error) {
			mark, version, err = decodeMark(v)
			return err
		})
		if err != nil {
			return false, err
		}
		return fn(k[len(prefix):], mark, version), nil
	})
}

// Keys calls fn for every distinct key of (task, stream) that has at least
// one state entry, until fn returns false. Keys come in the order of the
// state table: by length, then bytewise (so "b" comes before "aa"). With
// fromStart, Keys starts at the first key; otherwise it starts at the first
// key strictly after the key after in that order, so that a caller can page
// by passing the last key it received (after may be empty, which is a key).
// Keys seeks past the names of each key, so its cost grows with the number
// of keys it returns, not with the number of their names. key is valid only
// during the call to fn; fn must not call other methods of db.
func (db *DB) Keys(task string, stream uint32, after []byte, fromStart bool, fn func(key []byte) (more bool)) error {
	if err := validTask(task); err != nil {
		return err
	}
	prefix := appendStreamPrefix(nil, tableState, task, stream)
	var seek []byte
	if !fromStart {
		seek = prefixEnd(appendStateKeyPrefix(nil, task, stream, after))
		if seek == nil || !bytes.HasPrefix(seek, prefix) {
			return nil // nothing sorts after it in this stream
		}
	}
	err := db.iterateSeek(prefix, seek, func(k []byte, _ *badger.Item) ([]byte, bool, error) {
		_, _, key, name, err := decodeStateKey(k)
		if err != nil {
			return nil, false, err
		}
		if !fn(key) {
			return nil, false, nil
		}
		return prefixEnd(k[:len(k)-len(name)]), true, nil
	})
	return wrapErr("keys", err)
}

// get calls fn with the value of k if k exists.
func (db *DB) get(k []byte, fn func(v []byte) error) (err error) {
	if err := db.enter(); err != nil {
		return err
	}
	defer db.leave()
	defer db.recoverRead(&err)
	return db.bdb.View(func(txn *badger.Txn) error {
		item, err := txn.Get(k)
		if errors.Is(err, badger.ErrKeyNotFound) {
			return nil
		}
		if err != nil {
			return err
		}
		return item.Value(fn)
	})
}

// iterate calls fn for each key with prefix, from seek (nil: prefix), in
// order, until fn returns false or an error. k is valid only during fn.
func (db *DB) iterate(prefix, seek []byte, fn func(k []byte, item *badger.Item) (bool, error)) error {
	return db.iterateSeek(prefix, seek, func(k []byte, item *badger.Item) ([]byte, bool, error) {
		more, err := fn(k, item)
		return nil, more, err
	})
}

// iterateSeek is iterate where fn may also return a key to seek to next
// (nil: the next key).
func (db *DB) iterateSeek(prefix, seek []byte, fn func(k []byte, item *badger.Item) (next []byte, more bool, err error)) (err error) {
	if err := db.enter(); err != nil {
		return err
	}
	defer db.leave()
	defer db.recoverRead(&err)
	if seek == nil {
		seek = prefix
	}
	return db.bdb.View(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{Prefix: prefix})
		defer it.Close()
		for it.Seek(seek); it.ValidForPrefix(prefix); {
			item := it.Item()
			next, more, err := fn(item.Key(), item)
			if err != nil || !more {
				return err
			}
			if next != nil {
				it.Seek(next)
			} else {
				it.Next()
			}
		}
		return nil
	})
}

// recoverRead turns a panic of Badger's while reading (a table damaged after
// Open verified it) into ErrCorrupt naming the store. It must be deferred
// directly.
func (db *DB) recoverRead(err *error) {
	if r := recover(); r != nil {
		*err = corrupt(cmp.Or(db.dir, "in-memory store"), "damaged: reading it failed (%v)", firstLine(fmt.Sprint(r)))
	}
}

// wrapErr prefixes err with the operation, leaving sentinels of this package
// reachable with errors.Is. It returns nil for nil.
func wrapErr(op string, err error) error {
	if err == nil || errors.Is(err, ErrClosed) {
		return err
	}
	return fmt.Errorf("store: %s: %w", op, err)
}
