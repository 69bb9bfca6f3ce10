package store

import (
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// The commit locks (locks.go): Commits of disjoint streams in flight together, Commits of one
// stream one after the other, Restore, DropStream and MoveStream excluding every Commit, and the
// checkpoint number stored in the order Badger applies the Commits.

// escape bounds a wait that only a serialising store makes long: the wait itself ends on a
// condition, and on the code before concurrent commits it would never end.
const escape = 30 * time.Second

// errSerial is what a held commit's hook returns when the other commit never came.
var errSerial = errors.New("the other commit never reached its transaction while this one held its own: commits are serialised")

// keyCheckpoint is a one-transaction checkpoint of stream s setting key k's "v" to val, with a
// position.
func keyCheckpoint(s uint32, k, val string, next int64) *Checkpoint {
	return &Checkpoint{Task: "t",
		Keys:      []KeyWrites{{Stream: s, Key: []byte(k), Mark: next - 1, Writes: []Write{set("v", val)}}},
		Positions: []StreamPosition{{s, Position{Next: next, Horizon: next - 1}}}}
}

// Two commits of disjoint streams both reach the point where their transactions are handed to
// Badger before either is: the store's writer is no longer one Commit at a time. On the code
// before, the first commit held the store's commit lock there and the second never came (the
// first failed with errSerial after the escape).
func TestCommitsOfDisjointStreamsOverlap(t *testing.T) {
	db := openTestDB(t, Options{})
	s1, s2 := mustStreamID(t, db, "t", "a"), mustStreamID(t, db, "t", "b")
	var mu sync.Mutex
	arrived := 0
	both := make(chan struct{})
	db.opts.beforeTxn = func(int) error {
		mu.Lock()
		if arrived++; arrived == 2 {
			close(both)
		}
		mu.Unlock()
		select {
		case <-both:
			return nil
		case <-time.After(escape):
			return errSerial
		}
	}
	errs := make(chan error, 2)
	for i, s := range []uint32{s1, s2} {
		go func() { errs <- db.Commit(keyCheckpoint(s, "k", fmt.Sprint(i), 1)) }()
	}
	for range 2 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	db.opts.beforeTxn = nil
	if a, b := getString(t, db, "t", s1, "k", "v"), getString(t, db, "t", s2, "k", "v"); a != "0" || b != "1" {
		t.Errorf("values = %q, %q; want 0, 1", a, b)
	}
	if n, err := db.readCommitSeq(); err != nil || n != 2 {
		t.Errorf("checkpoint number = %d, %v; want 2", n, err)
	}
}

// A commit held before its last transaction while a commit of another stream is committed whole:
// the held one gets the later number, so the store holds the highest number committed and the
// journal, written after each commit, agrees with it at the next Open. A number taken at the
// start of Commit would leave the store at 1 below the journal's 2: a lost checkpoint reported.
func TestCheckpointNumberInHandOverOrder(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "state")
	db := openTestDBAt(t, dir, Options{})
	s1, s2 := mustStreamID(t, db, "t", "a"), mustStreamID(t, db, "t", "b")
	held, bDone := make(chan struct{}), make(chan struct{})
	var calls atomic.Int32
	db.opts.beforeTxn = func(int) error {
		if calls.Add(1) != 1 {
			return nil
		}
		close(held)
		select {
		case <-bDone:
			return nil
		case <-time.After(escape):
			return errSerial
		}
	}
	aErr := make(chan error, 1)
	go func() { aErr <- db.Commit(keyCheckpoint(s1, "k", "a", 5)) }()
	<-held
	mustCommit(t, db, keyCheckpoint(s2, "k", "b", 7))
	close(bDone)
	if err := <-aErr; err != nil {
		t.Fatal(err)
	}
	db.opts.beforeTxn = nil
	if n, err := db.readCommitSeq(); err != nil || n != 2 {
		t.Errorf("checkpoint number = %d, %v; want 2", n, err)
	}
	j, ok, err := readJournal(dir)
	if err != nil || !ok || j.seq != 2 {
		t.Errorf("journal = %+v, %v, %v; want checkpoint 2", j, ok, err)
	}
	mustClose(t, db)
	again := openTestDBAt(t, dir, Options{})
	if r, ok := again.Rollback(); ok {
		t.Errorf("Rollback() = %+v after two concurrent commits", r)
	}
	for s, want := range map[uint32]int64{s1: 5, s2: 7} {
		if p, ok, err := again.Position("t", s); err != nil || !ok || p.Next != want {
			t.Errorf("stream %d position = %+v, %v, %v; want Next %d", s, p, ok, err, want)
		}
	}
	mustCommit(t, again, keyCheckpoint(s1, "k", "c", 6))
	if n, err := again.readCommitSeq(); err != nil || n != 3 {
		t.Errorf("checkpoint number after reopen = %d, %v; want 3", n, err)
	}
}

// Commits that share a stream — in their keys, in a position only, or by appending to the
// task's chain logs — still run one after the other: the second waits for the first, whose
// transaction is held, and never reaches its own meanwhile; the later one's writes win.
func TestCommitsOfOneStreamWaitForEachOther(t *testing.T) {
	for _, tc := range []struct {
		name   string
		second func(s1, s2 uint32) *Checkpoint
	}{
		{"same key", func(s1, _ uint32) *Checkpoint { return keyCheckpoint(s1, "k", "b", 2) }},
		{"position only", func(s1, s2 uint32) *Checkpoint {
			cp := keyCheckpoint(s2, "k", "b", 2)
			cp.Positions = append(cp.Positions, StreamPosition{s1, Position{Next: 3, Horizon: 2}})
			return cp
		}},
		{"chain", func(_, s2 uint32) *Checkpoint {
			cp := keyCheckpoint(s2, "k", "b", 2)
			cp.Chain = []ChainEntry{{Output: "out", Offset: 1, Value: []byte("b")}}
			return cp
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			db := openTestDB(t, Options{})
			s1, s2 := mustStreamID(t, db, "t", "a"), mustStreamID(t, db, "t", "b")
			first := keyCheckpoint(s1, "k", "a", 1)
			first.Chain = []ChainEntry{{Output: "out", Offset: 0, Value: []byte("a")}}
			held, release := make(chan struct{}), make(chan struct{})
			overlap, waits := make(chan struct{}, 1), make(chan struct{}, 1)
			var calls atomic.Int32
			var inFirst atomic.Bool
			db.opts.beforeTxn = func(int) error {
				if calls.Add(1) == 1 {
					inFirst.Store(true)
					close(held)
					<-release
					inFirst.Store(false)
					return nil
				}
				if inFirst.Load() {
					overlap <- struct{}{}
				}
				return nil
			}
			db.opts.streamWait = func() { waits <- struct{}{} }
			errs := make(chan error, 2)
			var releaseOnce sync.Once
			letGo := func() { releaseOnce.Do(func() { close(release) }) }
			defer letGo() // before the store's cleanup closes it, also after a failure
			go func() { errs <- db.Commit(first) }()
			<-held
			go func() { errs <- db.Commit(tc.second(s1, s2)) }()
			select {
			case <-waits:
			case <-overlap:
				t.Fatal("the second commit reached its transaction while the first held its own")
			}
			letGo()
			for range 2 {
				if err := <-errs; err != nil {
					t.Fatal(err)
				}
			}
			db.opts.beforeTxn, db.opts.streamWait = nil, nil
			if len(overlap) > 0 {
				t.Error("the second commit reached its transaction while the first held its own")
			}
			if n, err := db.readCommitSeq(); err != nil || n != 2 {
				t.Errorf("checkpoint number = %d, %v; want 2", n, err)
			}
			if want := map[string]string{"same key": "b"}[tc.name]; want != "" {
				if got := getString(t, db, "t", s1, "k", "v"); got != want {
					t.Errorf("value = %q, want the second commit's %q", got, want)
				}
			}
		})
	}
}

// Restore, DropStream and MoveStream wait for a commit in progress, of another stream too: they
// read their stream through a read transaction of their own and count on no writer. The test
// holds a commit's transaction, starts the operation, sees it wait for the store's write lock
// (a writer waiting makes TryRLock fail) without finishing, then lets the commit go.
func TestRestoreMoveDropWaitForCommits(t *testing.T) {
	for _, op := range []string{"restore", "drop", "move"} {
		t.Run(op, func(t *testing.T) {
			db := openTestDB(t, Options{})
			s1, s2 := mustStreamID(t, db, "t", "a"), mustStreamID(t, db, "t", "b")
			mustCommit(t, db, keyCheckpoint(s2, "old", "x", 1))
			held, release := make(chan struct{}), make(chan struct{})
			var calls atomic.Int32
			db.opts.beforeTxn = func(int) error {
				if calls.Add(1) == 1 { // the commit's; the operation's own go through
					close(held)
					<-release
				}
				return nil
			}
			var releaseOnce sync.Once
			letGo := func() { releaseOnce.Do(func() { close(release) }) }
			defer letGo() // before the store's cleanup closes it, also after a failure
			cErr := make(chan error, 1)
			go func() { cErr <- db.Commit(keyCheckpoint(s1, "k", "a", 1)) }()
			<-held
			done := make(chan error, 1)
			go func() {
				switch op {
				case "restore":
					done <- db.Restore("t", s2, []KeySnapshot{{Key: []byte("r"), Names: []Write{set("v", "y")}}}, &Position{Next: 9, Horizon: 8})
				case "drop":
					done <- db.DropStream("t", s2)
				case "move":
					_, err := db.MoveStream("t", s2, "aside", mustStreamID(t, db, "aside", "b"))
					done <- err
				}
			}()
			// Until the operation waits for the write lock (a reader can no longer take it).
			tick := time.NewTicker(time.Millisecond)
			for db.writeMu.TryRLock() {
				db.writeMu.RUnlock()
				select {
				case err := <-done:
					t.Fatalf("%s finished (%v) while a commit was writing", op, err)
				case <-tick.C:
				}
			}
			tick.Stop()
			letGo()
			if err := <-cErr; err != nil {
				t.Fatal(err)
			}
			if err := <-done; err != nil {
				t.Fatal(err)
			}
			db.opts.beforeTxn = nil
			if got := getString(t, db, "t", s1, "k", "v"); got != "a" {
				t.Errorf("committed value = %q, want a", got)
			}
			want := map[string]string{"restore": "x", "drop": "<none>", "move": "<none>"}[op]
			if got := getString(t, db, "t", s2, "old", "v"); got != want {
				t.Errorf("stream b's old key after %s = %q, want %q", op, got, want)
			}
		})
	}
}

// Many goroutines commit their own streams at once (state, timers set and deleted, positions),
// while another reads due timers and counts, and one restores and drops a stream of its own:
// every checkpoint is durable and numbered after a reopen, and the store is consistent (checkDB
// at cleanup). It is for the race detector (the store's tests run under -race in CI) as much as
// for the figures.
func TestConcurrentCommitsDurable(t *testing.T) {
	const writers, commits, keys = 4, 20, 30
	dir := filepath.Join(t.TempDir(), "state")
	db := openTestDBAt(t, dir, Options{})
	streams := make([]uint32, writers)
	for i := range streams {
		streams[i] = mustStreamID(t, db, "t", fmt.Sprintf("s%d", i))
	}
	other := mustStreamID(t, db, "t", "other")
	var wg sync.WaitGroup
	errs := make(chan error, writers+2)
	stop := make(chan struct{})
	for w, s := range streams {
		wg.Go(func() {
			for c := range commits {
				cp := &Checkpoint{Task: "t", Positions: []StreamPosition{{s, Position{Next: int64(c+1) * keys, Horizon: int64(c+1)*keys - 1}}}}
				for k := range keys {
					kw := KeyWrites{Stream: s, Key: fmt.Appendf(nil, "k%d", k), Mark: int64(c*keys + k),
						Writes: []Write{set("v", fmt.Sprintf("%d-%d", w, c))}}
					if k%3 == 0 {
						kw.Timers = []TimerOp{{Name: []byte("t"), Due: int64(c*keys + k), Delete: c%2 == 1}}
					}
					cp.Keys = append(cp.Keys, kw)
				}
				if err := db.Commit(cp); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	var readers sync.WaitGroup
	readers.Go(func() {
		for {
			select {
			case <-stop:
				return
			default:
			}
			for _, s := range streams {
				if _, _, err := db.DueTimers("t", s, 0, 1<<40, nil, 100, func(Timer) bool { return true }); err != nil {
					errs <- err
					return
				}
				if _, err := db.PendingTimers("t", s); err != nil {
					errs <- err
					return
				}
			}
		}
	})
	wg.Go(func() {
		for i := range 5 {
			snap := []KeySnapshot{{Key: []byte("r"), Names: []Write{set("v", "y")}}}
			if err := db.Restore("t", other, snap, &Position{Next: int64(i + 1), Horizon: int64(i)}); err != nil {
				errs <- err
				return
			}
			if err := db.DropStream("t", other); err != nil {
				errs <- err
				return
			}
		}
	})
	wg.Wait()
	close(stop)
	readers.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	for _, s := range streams {
		want := int64(keys / 3)
		if n, err := db.PendingTimers("t", s); err != nil || n != 0 && n != want {
			t.Errorf("stream %d: PendingTimers = %d, %v", s, n, err)
		}
	}
	mustClose(t, db)

	again := openTestDBAt(t, dir, Options{})
	if r, ok := again.Rollback(); ok {
		t.Errorf("Rollback() = %+v", r)
	}
	if n, err := again.readCommitSeq(); err != nil || n != writers*commits {
		t.Errorf("checkpoint number = %d, %v; want %d", n, err, writers*commits)
	}
	for w, s := range streams {
		if p, ok, err := again.Position("t", s); err != nil || !ok || p.Next != commits*keys {
			t.Errorf("stream %d position = %+v, %v, %v; want Next %d", s, p, ok, err, commits*keys)
		}
		for k := range keys {
			if got, want := getString(t, again, "t", s, fmt.Sprintf("k%d", k), "v"), fmt.Sprintf("%d-%d", w, commits-1); got != want {
				t.Fatalf("stream %d key k%d = %q, want %q", s, k, got, want)
			}
		}
		// The last commit (odd) deleted every timer.
		if n, err := again.TimerCount("t", s); err != nil || n != 0 {
			t.Errorf("stream %d: %d timers, %v; want 0", s, n, err)
		}
	}
}
