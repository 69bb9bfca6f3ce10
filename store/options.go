package store

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"

	"github.com/dgraph-io/badger/v4"
	"github.com/dgraph-io/badger/v4/options"
)

// Defaults for the zero values of Options.
const (
	// DefaultMaxTxnBytes is the default Options.MaxTxnBytes.
	DefaultMaxTxnBytes = 4 << 20
	// DefaultMaxTxnEntries is the default Options.MaxTxnEntries.
	DefaultMaxTxnEntries = 40_000
	// DefaultMemTableSize is the default Options.MemTableSize.
	DefaultMemTableSize = 32 << 20
	// DefaultBlockCacheSize is the default Options.BlockCacheSize.
	DefaultBlockCacheSize = 32 << 20

	// MinMinFreeBytes is the least default Options.MinFreeBytes.
	MinMinFreeBytes = 64 << 20

	minMemTableSize = 1 << 20
)

// Options configure Open. The zero value is a durable on-disk store with
// defaults suited to a small host.
type Options struct {
	// InMemory keeps everything in memory and nothing on disk (for tests).
	// Open's dir must then be "". Default false.
	InMemory bool

	// ReadOnly opens an existing store for reading only, sharing it with other
	// read-only users but not with a writer (a running host). Commit returns
	// ErrReadOnly. Default false.
	ReadOnly bool

	// SyncWrites fsyncs every commit. Default false: a commit survives the
	// process being killed but not a power loss or kernel crash.
	SyncWrites bool

	// Logger receives Badger's messages: errors at slog.LevelError, warnings at
	// slog.LevelWarn and its informational chatter at slog.LevelDebug, each
	// with the attribute component=badger. Default nil: Badger's errors go to
	// slog.Default() and everything else is discarded.
	Logger *slog.Logger

	// MaxTxnBytes bounds the estimated bytes in one Badger transaction of a
	// Commit; a checkpoint over it is split between key groups (see the package
	// doc). 0 means DefaultMaxTxnBytes. It is lowered to 90% of Badger's own
	// limit (15% of MemTableSize) if above it.
	MaxTxnBytes int

	// MaxTxnEntries bounds the number of entries (sets and deletes) in one
	// Badger transaction of a Commit, like MaxTxnBytes. 0 means
	// DefaultMaxTxnEntries; lowered to 90% of Badger's limit if above it.
	MaxTxnEntries int

	// MemTableSize is the size of one Badger memtable in bytes, at least 1 MiB.
	// Badger keeps up to three in memory and limits a transaction to 15% of
	// one. 0 means DefaultMemTableSize (32 MiB; Badger's own default is 64 MiB
	// with five memtables).
	MemTableSize int64

	// BlockCacheSize is the size of Badger's block cache in bytes. 0 means
	// DefaultBlockCacheSize (32 MiB; Badger's own default is 256 MiB).
	BlockCacheSize int64

	// MinFreeBytes is the free space the store's file system must keep: Open
	// for writing and every transaction of Commit return ErrDiskFull below it.
	// 0 means max(MinMinFreeBytes, 2×MemTableSize), room for one more memtable
	// log; a negative value turns the check off.
	MinFreeBytes int64

	// beforeTxn, if set, is called before each Badger transaction of a Commit
	// is committed, with its index in the checkpoint (0, 1, ...); a non-nil
	// result aborts the Commit there, as a crash would. Tests only.
	beforeTxn func(i int) error
	// streamWait, if set, is called when a Commit must wait for a stream another Commit is
	// writing (locks.go), before it waits. Tests only.
	streamWait func()
}

// Validate reports every out-of-range option at once, each wrapping
// ErrInvalidOptions.
func (o Options) Validate() error {
	var errs []error
	bad := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("%w: "+format, append([]any{ErrInvalidOptions}, args...)...))
	}
	if o.InMemory && o.ReadOnly {
		bad("InMemory and ReadOnly are exclusive")
	}
	if o.MaxTxnBytes < 0 {
		bad("MaxTxnBytes %d < 0", o.MaxTxnBytes)
	}
	if o.MaxTxnEntries < 0 {
		bad("MaxTxnEntries %d < 0", o.MaxTxnEntries)
	}
	if o.MemTableSize != 0 && o.MemTableSize < minMemTableSize {
		bad("MemTableSize %d < %d", o.MemTableSize, minMemTableSize)
	}
	if o.BlockCacheSize < 0 {
		bad("BlockCacheSize %d < 0", o.BlockCacheSize)
	}
	return errors.Join(errs...)
}

// withDefaults returns o with zero values replaced by defaults.
func (o Options) withDefaults() Options {
	if o.MaxTxnBytes == 0 {
		o.MaxTxnBytes = DefaultMaxTxnBytes
	}
	if o.MaxTxnEntries == 0 {
		o.MaxTxnEntries = DefaultMaxTxnEntries
	}
	if o.MemTableSize == 0 {
		o.MemTableSize = DefaultMemTableSize
	}
	if o.BlockCacheSize == 0 {
		o.BlockCacheSize = DefaultBlockCacheSize
	}
	if o.MinFreeBytes == 0 {
		o.MinFreeBytes = max(MinMinFreeBytes, 2*o.MemTableSize)
	}
	return o
}

// badgerOptions translates o (with defaults applied) for Badger.
func (o Options) badgerOptions(dir string) badger.Options {
	bo := badger.DefaultOptions(dir)
	if o.InMemory {
		bo = badger.DefaultOptions("").WithInMemory(true)
	}
	// Badger's transaction limit is 15% of a memtable; the value threshold
	// (values at least this big go to the value log) must stay below it.
	valueThreshold := min(int64(1<<20), o.MemTableSize*15/100/2)
	var logger badger.Logger = badgerLogger{l: o.Logger}
	if o.Logger == nil {
		logger = badgerLogger{l: slog.Default(), errorsOnly: true}
	}
	return bo.
		WithReadOnly(o.ReadOnly).
		WithSyncWrites(o.SyncWrites).
		WithLogger(logger).
		WithMemTableSize(o.MemTableSize).
		WithNumMemtables(3).
		WithBlockCacheSize(o.BlockCacheSize).
		WithValueThreshold(valueThreshold).
		WithNumCompactors(2).
		WithMetricsEnabled(false).
		// Open verifies every table's checksums itself (checkFiles); value log
		// entries are verified as they are read.
		WithChecksumVerificationMode(options.NoVerification).
		WithVerifyValueChecksum(true).
		// Commits only write and StreamID is serialised by DB, so Badger's
		// read-write conflict detection would be pure overhead.
		WithDetectConflicts(false)
}

// logger returns o.Logger, or slog.Default() if it is nil.
func (o Options) logger() *slog.Logger {
	if o.Logger == nil {
		return slog.Default()
	}
	return o.Logger
}

// badgerLogger adapts a *slog.Logger to badger.Logger.
type badgerLogger struct {
	l          *slog.Logger
	errorsOnly bool // drop everything below slog.LevelError
}

func (b badgerLogger) log(level slog.Level, format string, args []any) {
	ctx := context.Background()
	if (b.errorsOnly && level < slog.LevelError) || !b.l.Enabled(ctx, level) {
		return
	}
	b.l.Log(ctx, level, strings.TrimSpace(fmt.Sprintf(format, args...)), "component", "badger")
}

func (b badgerLogger) Errorf(f string, a ...any)   { b.log(slog.LevelError, f, a) }
func (b badgerLogger) Warningf(f string, a ...any) { b.log(slog.LevelWarn, f, a) }
func (b badgerLogger) Infof(f string, a ...any)    { b.log(slog.LevelDebug, f, a) }
func (b badgerLogger) Debugf(f string, a ...any)   { b.log(slog.LevelDebug, f, a) }
