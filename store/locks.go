package store

import (
	"encoding/binary"
	"slices"
	"sync"
	"time"

	"github.com/dgraph-io/badger/v4"
)

// The write locks. Everything a Commit writes is keyed by its task and its streams (state,
// marks, timers and their due index, positions), except the checkpoint number and the chain
// logs. So Commits of disjoint streams need not exclude each other, and they do not:
//
//   - writeMu: a Commit holds it shared; Restore, DropStream, MoveStream and PendingTimers's
//     count hold it exclusively (they read a stream through a read transaction of their own and
//     count on no writer at all), and DueTimers raises a floor only when it gets it exclusively
//     at once (raiseFloor).
//   - streamLocks: under writeMu shared, a Commit takes every (task, stream) it names, in keys,
//     positions or partial positions, all at once (none while one is busy, so no order between
//     Commits is needed), and (task, 0), which no stream has, when it appends to the task's
//     chain logs. Two Commits of one stream therefore still run one after the other, each
//     reading (a replaced timer's old due entry, a split checkpoint's stored positions) what the
//     one before committed.
//   - seqMu: the checkpoint number. The last transaction of a Commit gets the next number and is
//     handed to Badger's write goroutine under it (commitNumbered), so that Badger applies the
//     numbers in increasing order: its commit timestamps follow the order of the hand-over, and a
//     crash leaves a prefix of its writes. The stored number is thus never lower than a committed
//     one, and the hand-over is the only part of two Commits' last transactions that is serial.
//   - journalMu: the journal file, written after the commit with the highest number committed so
//     far, never a lower one after a higher one.
//
// Order: db.mu (shared), writeMu, streamLocks, seqMu, journalMu; dueFloors.mu, timerCounts.mu
// and allocMu are leaves.

// streamLocks is the set of (task, stream) pairs that Commits in progress are writing.
type streamLocks struct {
	mu   sync.Mutex
	cond sync.Cond // signalled when pairs are released
	busy map[taskStream]struct{}
}

// chainStream is the pseudo-stream a Commit locks for its task's chain logs: no stream has ID 0.
const chainStream uint32 = 0

// lock waits until none of task's streams is busy, then marks them all busy. wait, if not nil, is
// called (under l.mu) before the first wait.
func (l *streamLocks) lock(task string, streams []uint32, wait func()) {
	if len(streams) == 0 {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.busy == nil {
		l.busy = map[taskStream]struct{}{}
		l.cond.L = &l.mu
	}
	for l.anyBusy(task, streams) {
		if wait != nil {
			wait()
			wait = nil
		}
		l.cond.Wait()
	}
	for _, s := range streams {
		l.busy[taskStream{task, s}] = struct{}{}
	}
}

func (l *streamLocks) anyBusy(task string, streams []uint32) bool {
	for _, s := range streams {
		if _, ok := l.busy[taskStream{task, s}]; ok {
			return true
		}
	}
	return false
}

// unlock releases what lock took.
func (l *streamLocks) unlock(task string, streams []uint32) {
	if len(streams) == 0 {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, s := range streams {
		delete(l.busy, taskStream{task, s})
	}
	l.cond.Broadcast()
}

// checkpointStreams returns the streams cp writes, sorted, without duplicates; with chainStream
// when it appends to chain logs.
func checkpointStreams(cp *Checkpoint) []uint32 {
	var out []uint32
	last := uint32(0)
	add := func(s uint32) {
		if s != last || len(out) == 0 {
			out = append(out, s)
			last = s
		}
	}
	for i := range cp.Keys {
		add(cp.Keys[i].Stream)
	}
	for i := range cp.Positions {
		add(cp.Positions[i].Stream)
	}
	// Partial streams are Positions streams (validateCheckpoint).
	if len(cp.Chain) > 0 {
		add(chainStream)
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// commitNumbered commits txn, the last transaction of a Commit, through the write gate with the
// next checkpoint number in it, and returns the number. The number is set and the transaction
// handed to Badger under seqMu; Commit waits for Badger to apply it outside.
func (db *DB) commitNumbered(txn *badger.Txn) (uint64, error) {
	if err := db.checkSpace(); err != nil {
		return 0, err
	}
	done := make(chan error, 1)
	db.seqMu.Lock()
	n := db.seq + 1
	// Not reserved: one small entry within the headroom the limits keep below Badger's.
	if err := txn.Set(commitSeqKey, binary.BigEndian.AppendUint64(make([]byte, 0, 8), n)); err != nil {
		db.seqMu.Unlock()
		return 0, err
	}
	txn.CommitWith(func(err error) { done <- err })
	db.seq = n
	db.seqMu.Unlock()
	err := <-done
	if err != nil {
		db.seqMu.Lock()
		if db.seq == n {
			db.seq = n - 1 // no later number was handed out: the next Commit takes n again
		}
		db.seqMu.Unlock()
	}
	db.allocateLogs()
	return n, err
}

// journalCommitted records checkpoint n in the journal, unless a later one is already there.
func (db *DB) journalCommitted(n uint64) {
	if db.dir == "" {
		return
	}
	db.journalMu.Lock()
	defer db.journalMu.Unlock()
	if n <= db.journaled {
		return
	}
	if err := writeJournal(db.dir, n, time.Now()); err != nil {
		// The checkpoint is committed; a journal behind the store is what a kill
		// leaves too, and the next commit or Open rewrites it.
		db.opts.logger().Warn("store: write "+JournalFile, "err", err)
		return
	}
	db.journaled = n
}
