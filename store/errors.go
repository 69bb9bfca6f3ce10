package store

import (
	"errors"
	"fmt"
)

// Sentinel errors. Functions wrap them with context; test with [errors.Is].
var (
	// ErrClosed is returned when a method is called on a DB after Close.
	ErrClosed = errors.New("store: database is closed")

	// ErrLocked is returned by Open when another process, or another DB in this
	// process, holds the directory (a running host). The returned error names
	// the directory, or wraps Badger's own message.
	ErrLocked = errors.New("store: database is locked by another user")

	// ErrFormatTooNew is returned by Open when the store was written with a
	// newer FormatVersion than this package supports.
	ErrFormatTooNew = errors.New("store: on-disk format is newer than supported")

	// ErrNotStore is returned by Open when the directory holds a Badger
	// database that was not created by this package (it has data but no
	// format version).
	ErrNotStore = errors.New("store: not a wasmstream store")

	// ErrCorrupt is returned when a stored key or value cannot be decoded,
	// by DecodeSnapshot for a malformed encoded snapshot, and by Open when a
	// file of the store is damaged or missing (the error names the file) or
	// a store that had data (MarkerFile) opens empty. Open never returns a
	// partly readable store.
	ErrCorrupt = errors.New("store: corrupt")

	// ErrDiskFull is returned by Open (for writing) and Commit when the store's
	// file system has less than Options.MinFreeBytes free: writing on would
	// risk a crash (Badger writes through memory-mapped files, which a full
	// disk turns into SIGBUS). Nothing was written; free space and retry.
	ErrDiskFull = errors.New("store: disk full")

	// ErrReadOnly is returned when a write (Commit, Restore, DropStream, or
	// StreamID for a stream that has no ID yet) is attempted on a DB opened
	// with Options.ReadOnly.
	ErrReadOnly = errors.New("store: database is read-only")

	// ErrInvalidOptions is returned by Options.Validate and Open when an
	// option is out of range.
	ErrInvalidOptions = errors.New("store: invalid options")

	// ErrInvalidName is returned when a task name is empty or longer than
	// MaxTaskLen bytes, or a stream name is empty or longer than
	// MaxStreamNameLen bytes.
	ErrInvalidName = errors.New("store: invalid task or stream name")

	// ErrKeyTooLarge is returned by Commit (and Restore) when
	// len(task)+len(key)+len(name) of a write (a snapshot's name) exceeds
	// MaxStateKeyLen, or that of a timer operation (a snapshot's timer)
	// exceeds MaxTimerKeyLen.
	ErrKeyTooLarge = errors.New("store: key and name too large")

	// ErrInvalidCheckpoint is returned by Commit when a checkpoint is
	// malformed: stream ID 0, the same (stream, key) twice, a mark below -1
	// other than DropMark, a timer domain above MaxTimerDomain, or a position
	// with Next < 0 or Horizon < -1; and by Restore when a snapshot is
	// malformed (see DB.Restore).
	ErrInvalidCheckpoint = errors.New("store: invalid checkpoint")

	// ErrNoSuchVersion is returned by SetActiveModule when the task has no
	// module version of that number (never added, or pruned).
	ErrNoSuchVersion = errors.New("store: no such module version")

	// ErrNoSuchModule is returned by ModuleBytes when no module with that
	// hash is stored.
	ErrNoSuchModule = errors.New("store: no such module")

	// ErrTxnTooBig is returned by Commit (and Restore) when the writes of a
	// single (stream, key) do not fit in one Badger transaction, so they cannot be
	// committed atomically. Raise Options.MemTableSize (Badger's transaction
	// limit is 15% of it) or write less per key per checkpoint.
	ErrTxnTooBig = errors.New("store: writes of one key exceed the transaction limit")
)

// KeyError is the error Commit (and Restore) returns for a problem with one
// (stream, key) of a checkpoint (of the snapshots). Err is one of the sentinels above, possibly wrapping
// Badger's error.
type KeyError struct {
	Task   string
	Stream uint32
	Key    []byte
	Err    error
}

// Error implements error.
func (e *KeyError) Error() string {
	const show = 64
	if len(e.Key) > show {
		return fmt.Sprintf("store: task %q stream %d key %q... (%d bytes): %v",
			e.Task, e.Stream, e.Key[:show], len(e.Key), e.Err)
	}
	return fmt.Sprintf("store: task %q stream %d key %q: %v", e.Task, e.Stream, e.Key, e.Err)
}

// Unwrap returns e.Err.
func (e *KeyError) Unwrap() error { return e.Err }
