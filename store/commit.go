package store

import (
	"errors"
	"fmt"
	"math"
	"sort"
	"unsafe"

	"github.com/dgraph-io/badger/v4"
)

// DropMark, as KeyWrites.Mark, deletes the key's applied mark (and with it the
// key's state version) instead of setting it. Drop a mark only when it is
// below the stream's durable Position.Next, that is the Next of a checkpoint
// that has already been committed (not the one being committed): replay never
// reaches such offsets, so the mark is no longer needed. A key whose mark is
// dropped is not seen by DB.KeysWithVersionNot.
//
// DropMark is math.MinInt64, not -1: a mark of -1 is a real mark, NoneApplied.
const DropMark int64 = math.MinInt64

// NoneApplied, as KeyWrites.Mark, is a real mark that says no record offset of
// the key has been applied: the key's state was changed only by work that is
// not a record of the stream (a timer firing, a partition callback). It keeps
// the key's mark (and state version) next to its state without making replay
// skip any record.
const NoneApplied int64 = -1

// Checkpoint is everything one Commit writes for a task.
type Checkpoint struct {
	// Task names the task; see ErrInvalidName.
	Task string
	// Keys holds the dirty keys, at most one entry per (stream, key).
	Keys []KeyWrites
	// Positions holds new positions, at most one entry per stream. They are
	// written after every key, in the last transaction of the Commit.
	Positions []StreamPosition
	// Partial holds, for streams in Positions, earlier positions a split
	// Commit may write before its last transaction, so that a crash between
	// its transactions does not send replay back to the previous checkpoint:
	// with each transaction but the last, Commit writes, per stream, the
	// furthest of them whose Next is at most the First of every key of the
	// stream still to be written. Each stream's entries must be in increasing
	// order of Next, none above the stream's Positions entry; their Horizon
	// is ignored (the stream's new one is written), and Commit never lowers a
	// stored Next or Watermark with them. A checkpoint written in one
	// transaction ignores Partial.
	Partial []StreamPosition
	// Chain holds entries to append to the task's chain logs (chain.go). A checkpoint with
	// chain entries is written in one transaction, entries, keys and positions together, or
	// not at all: Commit returns an error wrapping ErrTxnTooBig, writing nothing, when it does
	// not fit in one.
	Chain []ChainEntry
	// Applied holds applied sets, at most one per stream, each of a stream in Positions
	// (StreamApplied). A stream with a position and no set keeps its stored set as it is: its
	// offsets stay applied, and readers ignore those below Next.
	Applied []StreamApplied
}

// StreamApplied is the applied set of one stream in a checkpoint.
type StreamApplied struct {
	Stream uint32
	// Bits is the stream's applied set as of this checkpoint: bit j of Bits[i] says offset
	// Position.Next + 64i + j, of the stream's entry in Checkpoint.Positions. It must hold every offset at or above
	// Next, and at most Position.Horizon, whose record's effects are in the state this
	// checkpoint commits (a host gives its completed offsets: every record it finished), and no
	// other; it spans at most MaxAppliedSpan offsets. Commit writes it in its last transaction,
	// with the stored set's offsets at or above Next added, and, when the checkpoint is one
	// transaction, leaves the mark entry of a key with MarkStored as it is when the key's new
	// mark is in the set (see "Applied sets" in the package documentation).
	Bits []uint64
}

// KeyWrites is the change of one (stream, key) in a checkpoint: its name
// writes, its timer operations and its new applied mark and state version,
// committed together atomically.
type KeyWrites struct {
	// Stream is a stream ID from DB.StreamID (never 0).
	Stream uint32
	// Key is the record key; any bytes, possibly empty.
	Key []byte
	// Mark is the key's new applied mark: the highest offset of this key
	// whose effects are in the state written by this checkpoint (≥ 0), or
	// NoneApplied (-1) if no record offset of the key was applied. DropMark
	// deletes the mark.
	Mark int64
	// StateVersion is the state-format version of the module that produced
	// the key's state (0: unknown or none), stored with the mark. Ignored
	// with DropMark.
	StateVersion uint32
	// MarkStored tells Commit that the store already holds a mark entry for
	// this (stream, key) with this StateVersion and a mark at most Mark (the
	// caller read it, or a checkpoint committed before this one wrote it).
	// Commit then leaves that entry as it is instead of writing Mark when the
	// checkpoint is written in one transaction and Mark is below the Next of
	// the position it commits for the key's stream: replay starts at that
	// Next or later, so no replayed record is at or below Mark, and the
	// stored mark, lower still, skips none either (see "Applied marks below
	// the position" in the package documentation). Ignored with DropMark.
	MarkStored bool
	// MarkUnchanged tells Commit that the store's mark entry for this (stream, key) is already
	// the one this KeyWrites would write: its mark is Mark and its state version StateVersion
	// (the caller read them, or a checkpoint committed before this one was given them), or,
	// with StateVersion, a lower mark that such a checkpoint left as it is (MarkStored) because
	// Mark was below the Next it committed. Commit then writes no mark entry for the key, in
	// every checkpoint, split or not (see "Unchanged marks" in the package documentation): a
	// key whose only changes since are timer firings, ticks or partition callbacks gets its
	// state and timer entries alone. Set it only with MarkStored's conditions met and Mark
	// equal to that checkpoint's or read one. Ignored with DropMark.
	MarkUnchanged bool
	// Writes are applied in order; a later write of the same name wins.
	Writes []Write
	// Timers are applied in order after Writes; a later operation on the same
	// timer name wins.
	Timers []TimerOp
	// First is the lowest offset of the key's records whose effects this
	// checkpoint adds to its state, or math.MaxInt64 if none (only timer
	// firings or ticks changed the key). Commit uses it only with
	// Checkpoint.Partial: replay must start at or below it until the key is
	// written. The zero value never lets a partial position pass offset 0.
	First int64
	// Whole says that Writes name every name the key has once they are
	// applied: the caller knows the key's whole state (a state cache entry
	// that read the key's persisted names in, all of whose names this
	// checkpoint writes). Commit ignores it; Snapshots, given the KeyWrites as
	// a KeyRef's Written, then reads none of the key's state entries, and the
	// snapshot's names are those KeySnapshot.Apply adds from Writes.
	Whole bool
}

// TimerOp sets or deletes one timer of a key. A timer is identified by
// (task, stream, key, name); setting a timer that exists replaces it.
type TimerOp struct {
	// Name names the timer within the key; any bytes, possibly empty.
	Name []byte
	// Delete removes the timer; deleting a timer that does not exist is not
	// an error. Domain, Due and Payload are then ignored.
	Delete bool
	// Domain is the timer's time domain, 0..MaxTimerDomain. The store keeps
	// one due index per domain and does not interpret it.
	Domain uint8
	// Due is when the timer is due, in the domain's unit; any int64,
	// negative times included.
	Due int64
	// Payload is returned with the timer; any bytes, possibly empty.
	Payload []byte
}

// Write sets or deletes one name of a key.
type Write struct {
	// Name is the name within the key's map; any bytes, possibly empty.
	Name []byte
	// Value is the new value; ignored if Delete.
	Value []byte
	// Delete removes Name.
	Delete bool
}

// StreamPosition is the new position of one stream in a checkpoint.
type StreamPosition struct {
	// Stream is a stream ID from DB.StreamID (never 0).
	Stream   uint32
	Position Position
}

// entryOverhead over-approximates Badger's per-entry transaction accounting
// (key + value + 2 meta bytes + 10 version bytes), so that the checkpoint
// splitter's estimate is never below Badger's.
const entryOverhead = 12

// Commit writes cp durably (fsynced only with Options.SyncWrites): as one
// atomic Badger transaction when it fits within Options.MaxTxnBytes and
// Options.MaxTxnEntries, otherwise as several transactions split between key
// groups, with the positions in the last one (see the package documentation
// for why that is crash-safe). Commit does not retain cp or any slice in it
// after it returns; the caller must not modify them during the call.
//
// Commit validates cp before writing anything: it returns an error wrapping
// ErrInvalidCheckpoint for a malformed checkpoint and a *KeyError wrapping
// ErrKeyTooLarge for a key and name too long. It returns a *KeyError wrapping
// ErrTxnTooBig when the writes of a single key do not fit in one Badger
// transaction, and ErrReadOnly on a read-only DB.
//
// If Commit fails after writing has started, some key groups may be committed
// and the positions are not: the store is in the same consistent state a
// crash would leave. Committing the same checkpoint again is harmless.
//
// Commits of disjoint streams run concurrently: each builds its transactions
// and hands them to Badger, whose write goroutine applies them in the order
// handed over (several at once when they queue). Commits that share a stream
// (in keys or positions; or append to the same task's chain logs) run one
// after the other, and Restore, DropStream and MoveStream exclude every
// Commit (locks.go). Each Commit's last transaction carries the next
// checkpoint number, handed to Badger in the order of the numbers, so the
// stored number is the highest committed.
func (db *DB) Commit(cp *Checkpoint) error {
	if err := validateCheckpoint(cp); err != nil {
		return err
	}
	if err := validateChain(cp); err != nil {
		return err
	}
	if err := db.enterWrite(cp.Task); err != nil {
		return err
	}
	defer db.leave()
	// Shared with other Commits, exclusive of Restore, DropStream and MoveStream; then the
	// streams this one writes, which no other Commit writes meanwhile (locks.go): the stored
	// applied sets mergeApplied reads are this Commit's to replace.
	db.writeMu.RLock()
	defer db.writeMu.RUnlock()
	streams := checkpointStreams(cp)
	db.streamLocks.lock(cp.Task, streams, db.opts.streamWait)
	defer db.streamLocks.unlock(cp.Task, streams)
	given := appliedByPosition(cp)
	applied, err := db.mergeApplied(cp, given)
	if err != nil {
		return err
	}
	oneTxn := db.fitsOneTxn(cp, applied)
	if len(cp.Chain) > 0 && !oneTxn {
		return fmt.Errorf("%w: task %q: a checkpoint with %d chain log entries must fit in one transaction", ErrTxnTooBig, cp.Task, len(cp.Chain))
	}
	// Before anything is written: lower the due floors below the timers this
	// commit sets; after it (deferred, so also on failure): tell DueTimers
	// that the due index changed.
	db.floors.lower(cp)
	defer db.floors.changed()

	w := txnWriter{db: db, txn: db.bdb.NewTransaction(true)}
	defer func() { w.txn.Discard() }()
	if oneTxn {
		// Every key and every position commit together: a key's mark below its stream's new
		// Next need not be written (KeyWrites.MarkStored).
		w.single, w.nexts, w.given = true, cp.Positions, given
		if len(cp.Positions) > 16 {
			w.nextOf = make(map[uint32]int, len(cp.Positions))
			for i, sp := range cp.Positions {
				w.nextOf[sp.Stream] = i
			}
		}
	}
	if len(cp.Positions) > 0 && !oneTxn {
		cur, err := db.raiseHorizons(cp)
		if err != nil {
			return err
		}
		if len(cp.Partial) > 0 {
			p := newPartialWriter(cp, cur)
			w.resEntries, w.resSize = p.reserve()
			w.atSplit = p.write
		}
	}
	for i := range cp.Keys {
		kw := &cp.Keys[i]
		entries, size := keyGroupSize(cp.Task, kw)
		if err := w.reserve(entries, size); err != nil {
			return err
		}
		if err := w.writeKey(cp.Task, kw); err != nil {
			return err
		}
		w.keys++
	}
	if len(cp.Positions) > 0 {
		posEntries, posSize := addCost(len(cp.Positions), len(cp.Positions)*(positionKeyLen(cp.Task)+positionValueMax+entryOverhead))(appliedCost(cp.Task, applied))
		if err := w.reserve(posEntries, posSize); err != nil {
			return err
		}
		// The applied sets with the positions: a key transaction of a split checkpoint wrote its
		// marks, and the keys it has not written still have the marks the stored set completes.
		if err := writeApplied(w.txn, w.alloc, cp.Task, applied); err != nil {
			return err
		}
		for _, sp := range cp.Positions {
			k := appendPositionKey(w.alloc(positionKeyLen(cp.Task)), cp.Task, sp.Stream)
			v := appendPosition(w.alloc(positionValueMax), sp.Position)
			if err := w.txn.Set(k, v); err != nil {
				return fmt.Errorf("store: commit: stream %d position: %w", sp.Stream, err)
			}
		}
	}
	if len(cp.Chain) > 0 {
		// In the same transaction as every key and position: fitsOneTxn checked it above.
		if err := w.writeChain(cp); err != nil {
			return err
		}
	}
	// The checkpoint's number goes in its last transaction (commitNumbered); then the journal
	// (journal.go).
	w.numbered = true
	if err := w.flush(); err != nil {
		return err
	}
	db.journalCommitted(w.seq)
	return nil
}

func positionKeyLen(task string) int { return taskPrefixOverhead + len(task) + streamPartLen }

// keyGroupSize estimates the entries and bytes of one key group in a Badger
// transaction, never below Badger's own accounting.
func keyGroupSize(task string, kw *KeyWrites) (entries, size int) {
	entries, size = MarkCost(task, kw.Key)
	for i := range kw.Writes {
		wr := &kw.Writes[i]
		n := 0
		if !wr.Delete {
			n = len(wr.Value)
		}
		e, b := StateWriteCost(task, kw.Key, wr.Name, n)
		entries, size = entries+e, size+b
	}
	// A timer operation writes at most three entries: the timer, its new
	// due-index entry and the deletion of its old one (a delete writes the
	// last two only). Both due-index keys have the same length.
	for i := range kw.Timers {
		op := &kw.Timers[i]
		n := 0
		if !op.Delete {
			n = len(op.Payload)
		}
		e, b := TimerOpCost(task, kw.Key, op.Name, n)
		entries, size = entries+e, size+b
	}
	return entries, size
}

// KeyLimits returns what the writes of one (stream, key) may cost in one
// checkpoint, in the estimate of StateWriteCost, TimerOpCost and MarkCost,
// for Commit to write them in one transaction: Options.MaxTxnEntries and
// Options.MaxTxnBytes as clamped by Open. Commit fails with ErrTxnTooBig only
// for a key whose writes are over Badger's own limit, which is above these.
func (db *DB) KeyLimits() (entries, bytes int) { return db.opts.MaxTxnEntries, db.opts.MaxTxnBytes }

// StateWriteCost is the estimated cost, in entries and bytes, of one state
// write (valueLen 0 for a delete) of key in a checkpoint of task: the
// estimate Commit splits transactions by, never below Badger's accounting.
func StateWriteCost(task string, key, name []byte, valueLen int) (entries, bytes int) {
	return 1, stateKeyLen(task, key, name) + entryOverhead + valueCost(valueLen)
}

// TimerOpCost is the estimated cost of one timer operation (payloadLen 0 for
// a delete), like StateWriteCost.
func TimerOpCost(task string, key, name []byte, payloadLen int) (entries, bytes int) {
	return 3, timerKeyLen(task, key, name) + entryOverhead + valueCost(timerValueOverhead+payloadLen) +
		2*(dueKeyLen(task, key, name)+entryOverhead)
}

// valueLogMin is a length from which a value goes to Badger's value log whatever the options
// (Badger refuses a value threshold above 1 MiB): in a transaction it then costs a value pointer
// (valuePointerLen), not its length.
const (
	valueLogMin     = 1 << 20
	valuePointerLen = 12
)

// valueCost is what a value of n bytes costs a Badger transaction, never below Badger's account.
func valueCost(n int) int {
	if n >= valueLogMin {
		return valuePointerLen
	}
	return n
}

// MarkCost is the estimated cost of the mark every key group writes, like
// StateWriteCost.
func MarkCost(task string, key []byte) (entries, bytes int) {
	return 1, markKeyLen(task, key) + markValueLen + entryOverhead
}

// validateCheckpoint checks everything Commit can check before writing.
func validateCheckpoint(cp *Checkpoint) error {
	invalid := func(format string, args ...any) error {
		return fmt.Errorf("%w: task %q: "+format, append([]any{ErrInvalidCheckpoint, cp.Task}, args...)...)
	}
	// seen shares the keys' bytes (no copy per key): cp is not modified during Commit, and the
	// map does not outlive this call.
	type streamKey struct {
		stream uint32
		key    string
	}
	var seen map[streamKey]struct{}
	if len(cp.Keys) > 1 {
		seen = make(map[streamKey]struct{}, len(cp.Keys))
	}
	for i := range cp.Keys {
		kw := &cp.Keys[i]
		keyErr := func(err error) error {
			return &KeyError{Task: cp.Task, Stream: kw.Stream, Key: kw.Key, Err: err}
		}
		switch {
		case kw.Stream == 0:
			return keyErr(fmt.Errorf("%w: stream ID 0", ErrInvalidCheckpoint))
		case kw.Mark < NoneApplied && kw.Mark != DropMark:
			return keyErr(fmt.Errorf("%w: mark %d (want ≥ -1 or DropMark)", ErrInvalidCheckpoint, kw.Mark))
		case markKeyLen(cp.Task, kw.Key) > maxBadgerKey:
			return keyErr(fmt.Errorf("%w: key of %d bytes", ErrKeyTooLarge, len(kw.Key)))
		}
		for j := range kw.Writes {
			if n := len(cp.Task) + len(kw.Key) + len(kw.Writes[j].Name); n > MaxStateKeyLen {
				return keyErr(fmt.Errorf("%w: task, key and name of %d bytes > %d", ErrKeyTooLarge, n, MaxStateKeyLen))
			}
		}
		for j := range kw.Timers {
			op := &kw.Timers[j]
			if n := len(cp.Task) + len(kw.Key) + len(op.Name); n > MaxTimerKeyLen {
				return keyErr(fmt.Errorf("%w: task, key and timer name of %d bytes > %d", ErrKeyTooLarge, n, MaxTimerKeyLen))
			}
			if !op.Delete && op.Domain > MaxTimerDomain {
				return keyErr(fmt.Errorf("%w: timer %q: domain %d > %d", ErrInvalidCheckpoint, op.Name, op.Domain, MaxTimerDomain))
			}
		}
		if seen != nil {
			sk := streamKey{kw.Stream, unsafe.String(unsafe.SliceData(kw.Key), len(kw.Key))}
			if _, dup := seen[sk]; dup {
				return keyErr(fmt.Errorf("%w: key appears twice", ErrInvalidCheckpoint))
			}
			seen[sk] = struct{}{}
		}
	}
	for i, sp := range cp.Positions {
		switch {
		case sp.Stream == 0:
			return invalid("position of stream ID 0")
		case sp.Position.Next < 0 || sp.Position.Horizon < -1:
			return invalid("stream %d: position %+v out of range", sp.Stream, sp.Position)
		}
		for _, prev := range cp.Positions[:i] {
			if prev.Stream == sp.Stream {
				return invalid("stream %d: two positions", sp.Stream)
			}
		}
	}
	for i, sa := range cp.Applied {
		var pos *Position
		for j := range cp.Positions {
			if cp.Positions[j].Stream == sa.Stream {
				pos = &cp.Positions[j].Position
			}
		}
		set := AppliedSet{Base: 0, Bits: sa.Bits}
		if pos != nil {
			set.Base = pos.Next
		}
		if pos == nil {
			return invalid("stream %d: an applied set without a position", sa.Stream)
		}
		if why := set.invalidFor(pos.Horizon); why != "" {
			return invalid("stream %d: %s", sa.Stream, why)
		}
		for _, prev := range cp.Applied[:i] {
			if prev.Stream == sa.Stream {
				return invalid("stream %d: two applied sets", sa.Stream)
			}
		}
	}
	last := map[uint32]int64{}
	for _, sp := range cp.Partial {
		var final *Position
		for i := range cp.Positions {
			if cp.Positions[i].Stream == sp.Stream {
				final = &cp.Positions[i].Position
			}
		}
		prev, seen := last[sp.Stream]
		switch {
		case final == nil:
			return invalid("stream %d: a partial position without a position", sp.Stream)
		case sp.Position.Next < 0 || sp.Position.Next > final.Next:
			return invalid("stream %d: partial position %+v out of range (position Next %d)", sp.Stream, sp.Position, final.Next)
		case seen && sp.Position.Next <= prev:
			return invalid("stream %d: partial positions not in increasing order of Next", sp.Stream)
		}
		last[sp.Stream] = sp.Position.Next
	}
	return nil
}

// txnWriter fills Badger transactions for one Commit, starting a new one
// between key groups when the current one is full.
type txnWriter struct {
	db      *DB
	txn     *badger.Txn
	entries int // estimated entries in txn
	size    int // estimated bytes in txn
	index   int // transactions committed so far
	arena   []byte

	// beforeSplit, if set, is called once, before the first transaction is
	// committed by reserve to make room, that is before a key transaction of
	// a write that turned out to need several (Restore raises horizons there).
	beforeSplit func() error
	// timerDelta is how many timers each stream of the current transaction gains (or loses,
	// if negative); flush applies it to the counts of PendingTimers once the transaction is
	// committed.
	timerDelta map[uint32]int64
	timerTask  string
	// atSplit, if set, is called before each transaction reserve commits to
	// make room, with the transaction and the number of key groups written so
	// far (the first keys of the write); it may add up to resEntries entries
	// of resSize bytes, which reserve keeps free in every transaction.
	atSplit             func(txn *badger.Txn, keys int) error
	keys                int // key groups written so far
	resEntries, resSize int

	// single says the write is one transaction holding every key and the positions nexts
	// (Commit of a checkpoint that fits): writeKey then leaves a stored mark below its stream's
	// new Next as it is (KeyWrites.MarkStored).
	single bool
	nexts  []StreamPosition
	nextOf map[uint32]int // index in nexts by stream, once there are many
	given  [][]uint64     // the applied set of each of nexts (Checkpoint.Applied), or nil

	// numbered says the next flush commits a Commit's last transaction, with the checkpoint
	// number (commitNumbered), which it sets in seq.
	numbered bool
	seq      uint64
}

// appliedByPosition returns the applied set given for each of cp.Positions (nil: none), or nil
// if cp gives none.
func appliedByPosition(cp *Checkpoint) [][]uint64 {
	if len(cp.Applied) == 0 {
		return nil
	}
	given := make([][]uint64, len(cp.Positions))
	for _, sa := range cp.Applied {
		for i := range cp.Positions {
			if cp.Positions[i].Stream == sa.Stream {
				given[i] = sa.Bits
				if given[i] == nil {
					given[i] = []uint64{} // an empty set, given
				}
			}
		}
	}
	return given
}

// keepMark reports whether writeKey may leave kw's stored mark entry as it is: the store holds
// one with kw's state version (MarkStored), and this transaction commits a position for kw's
// stream whose Next is above kw's new mark. Replay then starts at that Next or later, beyond
// both the new mark and the stored one (at most the new one): neither skips a record replay
// can see.
//
// Or the position comes with an applied set (StreamPosition.Applied) that holds the new mark:
// the set then holds every offset of the key at or above Next that the state committed here
// includes, replay skips them by the set, and the stored mark, lower, skips none it must not.
func (w *txnWriter) keepMark(kw *KeyWrites) bool {
	if !w.single || !kw.MarkStored || kw.Mark == DropMark {
		return false
	}
	i, ok := -1, false
	if w.nextOf != nil {
		i, ok = w.nextOf[kw.Stream]
	} else {
		for j := range w.nexts {
			if w.nexts[j].Stream == kw.Stream {
				i, ok = j, true
				break
			}
		}
	}
	if !ok {
		return false
	}
	next := w.nexts[i].Position.Next
	if kw.Mark < next {
		return true
	}
	return w.given != nil && AppliedSet{Base: next, Bits: w.given[i]}.Has(kw.Mark)
}

// reserve makes room for a key group of the given estimated size, committing
// the current transaction first if the group does not fit and the transaction
// is not empty. A group larger than the limits gets a transaction of its own.
func (w *txnWriter) reserve(entries, size int) error {
	o := &w.db.opts
	if w.entries > 0 && (w.entries+entries+w.resEntries > o.MaxTxnEntries || w.size+size+w.resSize > o.MaxTxnBytes) {
		if w.single {
			// Keys written so far may have left their marks below positions this transaction
			// was to carry: it must not commit without them. fitsOneTxn and reserve add the same
			// estimates, so this does not happen.
			return fmt.Errorf("store: commit: a checkpoint estimated to fit in one transaction needs more (%d entries, %d bytes)", w.entries+entries, w.size+size)
		}
		if split := w.beforeSplit; split != nil {
			w.beforeSplit = nil
			if err := split(); err != nil {
				return err
			}
		}
		if at := w.atSplit; at != nil {
			if err := at(w.txn, w.keys); err != nil {
				return err
			}
		}
		if err := w.flush(); err != nil {
			return err
		}
		w.txn = w.db.bdb.NewTransaction(true)
	}
	w.entries += entries
	w.size += size
	return nil
}

// flush commits the current transaction.
func (w *txnWriter) flush() error {
	if hook := w.db.opts.beforeTxn; hook != nil {
		if err := hook(w.index); err != nil {
			return err
		}
	}
	var err error
	if w.numbered {
		w.seq, err = w.db.commitNumbered(w.txn)
	} else {
		err = w.db.commitTxn(w.txn)
	}
	if err != nil {
		return fmt.Errorf("store: commit transaction %d: %w", w.index, err)
	}
	if len(w.timerDelta) > 0 {
		w.db.timerCounts.add(w.timerTask, w.timerDelta)
		clear(w.timerDelta)
	}
	w.index++
	w.entries, w.size = 0, 0
	w.arena = nil // the committed transaction no longer references it
	return nil
}

// writeKey adds one key group to the current transaction.
func (w *txnWriter) writeKey(task string, kw *KeyWrites) error {
	fail := func(err error) error {
		if errors.Is(err, badger.ErrTxnTooBig) {
			err = fmt.Errorf("%w: %w", ErrTxnTooBig, err)
		}
		return &KeyError{Task: task, Stream: kw.Stream, Key: kw.Key, Err: err}
	}
	prefix := appendStateKeyPrefix(w.alloc(stateKeyLen(task, kw.Key, nil)), task, kw.Stream, kw.Key)
	for i := range kw.Writes {
		wr := &kw.Writes[i]
		k := append(w.alloc(len(prefix)+len(wr.Name)), prefix...)
		k = append(k, wr.Name...)
		var err error
		if wr.Delete {
			err = w.txn.Delete(k)
		} else {
			err = w.txn.Set(k, wr.Value)
		}
		if err != nil {
			return fail(err)
		}
	}
	for i := range kw.Timers {
		if err := w.writeTimer(task, kw, &kw.Timers[i]); err != nil {
			return fail(err)
		}
	}
	if (kw.MarkUnchanged && kw.Mark != DropMark) || w.keepMark(kw) {
		return nil
	}
	mk := appendMarkKey(w.alloc(markKeyLen(task, kw.Key)), task, kw.Stream, kw.Key)
	var err error
	if kw.Mark == DropMark {
		err = w.txn.Delete(mk)
	} else {
		err = w.txn.Set(mk, appendMarkValue(w.alloc(markValueLen), kw.Mark, kw.StateVersion))
	}
	if err != nil {
		return fail(err)
	}
	return nil
}

// countTimer records that the current transaction adds (d = 1) or deletes (d = -1) a timer
// of stream.
func (w *txnWriter) countTimer(task string, stream uint32, d int64) {
	if w.timerDelta == nil {
		w.timerDelta = map[uint32]int64{}
	}
	w.timerTask = task
	w.timerDelta[stream] += d
}

// writeTimer adds one timer operation to the current transaction. It reads
// the timer's current value in the transaction (which sees the operations
// before it in the same transaction) to delete the timer's old due-index
// entry, so that the index never holds an entry for a replaced or deleted
// timer.
func (w *txnWriter) writeTimer(task string, kw *KeyWrites, op *TimerOp) error {
	tk := appendTimerKey(w.alloc(timerKeyLen(task, kw.Key, op.Name)), task, kw.Stream, kw.Key, op.Name)
	var oldDue []byte // the old due-index key, if the timer exists
	item, err := w.txn.Get(tk)
	switch {
	case errors.Is(err, badger.ErrKeyNotFound):
	case err != nil:
		return err
	default:
		err = item.Value(func(v []byte) error {
			domain, due, _, err := decodeTimerValue(v)
			if err != nil {
				return err
			}
			oldDue = appendDueKey(w.alloc(dueKeyLen(task, kw.Key, op.Name)), task, kw.Stream, domain, due, kw.Key, op.Name)
			return nil
		})
		if err != nil {
			return err
		}
	}
	if op.Delete {
		if oldDue == nil {
			return nil
		}
		if err := w.txn.Delete(oldDue); err != nil {
			return err
		}
		if err := w.txn.Delete(tk); err != nil {
			return err
		}
		w.countTimer(task, kw.Stream, -1)
		return nil
	}
	if oldDue == nil {
		w.countTimer(task, kw.Stream, 1)
	}
	newDue := appendDueKey(w.alloc(dueKeyLen(task, kw.Key, op.Name)), task, kw.Stream, op.Domain, op.Due, kw.Key, op.Name)
	if oldDue != nil && string(oldDue) != string(newDue) {
		if err := w.txn.Delete(oldDue); err != nil {
			return err
		}
	}
	v := appendTimerValue(w.alloc(timerValueOverhead+len(op.Payload)), op.Domain, op.Due, op.Payload)
	if err := w.txn.Set(tk, v); err != nil {
		return err
	}
	return w.txn.Set(newDue, []byte{})
}

// alloc returns an empty slice with capacity n carved from an arena, so that
// the many small keys of a transaction share a few allocations. Badger keeps
// references to keys and values until the transaction commits.
func (w *txnWriter) alloc(n int) []byte {
	const chunk = 64 << 10
	if cap(w.arena)-len(w.arena) < n {
		if n > chunk/4 {
			return make([]byte, 0, n)
		}
		w.arena = make([]byte, 0, chunk)
	}
	l := len(w.arena)
	w.arena = w.arena[:l+n]
	return w.arena[l : l : l+n]
}

// fitsOneTxn reports whether cp is written in a single transaction.
func (db *DB) fitsOneTxn(cp *Checkpoint, applied []appliedWrite) bool {
	entries, size := len(cp.Positions), len(cp.Positions)*(positionKeyLen(cp.Task)+positionValueMax+entryOverhead)
	entries, size = addCost(entries, size)(chainSize(cp))
	entries, size = addCost(entries, size)(appliedCost(cp.Task, applied))
	for i := range cp.Keys {
		e, s := keyGroupSize(cp.Task, &cp.Keys[i])
		entries, size = entries+e, size+s
	}
	return entries <= db.opts.MaxTxnEntries && size <= db.opts.MaxTxnBytes
}

// raiseHorizons commits, before the key transactions of a split checkpoint, each stream's new
// Horizon with its durable Next, Resume and Watermark unchanged. A key transaction may commit a
// mark above the durable horizon; should the process die before the positions commit, replay must
// still check the marks of every offset a committed key may include, and it checks those up to
// the durable horizon. Raising a horizon early is always safe: it only makes replay check more
// marks. It returns the streams' positions as stored now.
func (db *DB) raiseHorizons(cp *Checkpoint) (map[uint32]Position, error) {
	txn := db.bdb.NewTransaction(true)
	defer txn.Discard()
	stored := make(map[uint32]Position, len(cp.Positions))
	for _, sp := range cp.Positions {
		cur, ok, err := txnPosition(txn, cp.Task, sp.Stream)
		if err != nil {
			return nil, fmt.Errorf("store: commit: stream %d position: %w", sp.Stream, err)
		}
		if !ok {
			cur = Position{Horizon: -1, Watermark: -1}
		}
		if sp.Position.Horizon > cur.Horizon {
			cur.Horizon = sp.Position.Horizon
			if err := txn.Set(appendPositionKey(nil, cp.Task, sp.Stream), appendPosition(nil, cur)); err != nil {
				return nil, fmt.Errorf("store: commit: stream %d position: %w", sp.Stream, err)
			}
		}
		stored[sp.Stream] = cur
	}
	if err := db.commitTxn(txn); err != nil {
		return nil, fmt.Errorf("store: commit: %w", err)
	}
	return stored, nil
}

// partialWriter advances the positions of a split checkpoint with its key transactions
// (Checkpoint.Partial): before each transaction but the last commits, it adds to it, per stream,
// the furthest partial position that every key still to be written allows.
type partialWriter struct {
	cp      *Checkpoint
	streams map[uint32]*partialStream
}

type partialStream struct {
	cands  []Position // the stream's Partial entries, by increasing Next
	stored Position   // as stored: raised horizon, then each partial position written
	bound  int64      // scratch: the lowest First of the keys still to be written
}

func newPartialWriter(cp *Checkpoint, stored map[uint32]Position) *partialWriter {
	p := &partialWriter{cp: cp, streams: map[uint32]*partialStream{}}
	for _, sp := range cp.Partial {
		ps := p.streams[sp.Stream]
		if ps == nil {
			ps = &partialStream{stored: stored[sp.Stream]}
			p.streams[sp.Stream] = ps
		}
		ps.cands = append(ps.cands, sp.Position)
	}
	return p
}

// reserve returns the entries and bytes one transaction needs for the partial positions.
func (p *partialWriter) reserve() (entries, size int) {
	n := len(p.streams)
	return n, n * (positionKeyLen(p.cp.Task) + positionValueMax + entryOverhead)
}

// write adds to txn the positions that hold once the first keys of the checkpoint are committed.
func (p *partialWriter) write(txn *badger.Txn, keys int) error {
	for _, ps := range p.streams {
		ps.bound = math.MaxInt64
	}
	for i := keys; i < len(p.cp.Keys); i++ {
		kw := &p.cp.Keys[i]
		if ps := p.streams[kw.Stream]; ps != nil {
			ps.bound = min(ps.bound, kw.First)
		}
	}
	for s, ps := range p.streams {
		// The furthest candidate at or below the bound.
		j := sort.Search(len(ps.cands), func(j int) bool { return ps.cands[j].Next > ps.bound }) - 1
		if j < 0 || ps.cands[j].Next <= ps.stored.Next {
			continue
		}
		pos := ps.cands[j]
		pos.Horizon = ps.stored.Horizon
		pos.Watermark = max(pos.Watermark, ps.stored.Watermark)
		if err := txn.Set(appendPositionKey(nil, p.cp.Task, s), appendPosition(nil, pos)); err != nil {
			return fmt.Errorf("store: commit: stream %d position: %w", s, err)
		}
		ps.stored = pos
	}
	return nil
}
