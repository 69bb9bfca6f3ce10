package store

import (
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"
	"testing"
)

// mustRestore restores snaps into stream s of task "t", failing the test on
// error.
func mustRestore(t testing.TB, db *DB, s uint32, snaps []KeySnapshot, pos *Position) {
	t.Helper()
	if err := db.Restore("t", s, snaps, pos); err != nil {
		t.Fatalf("Restore: %v", err)
	}
}

// allDueTimers returns every timer of stream s in both domains, as timerStrings.
func allDueTimers(t *testing.T, db *DB, s uint32) []string {
	t.Helper()
	var out []string
	for d := range MaxTimerDomain + 1 {
		got, _ := dueTimers(t, db, s, d, 1<<62, nil, 1<<30)
		out = append(out, got...)
	}
	slices.Sort(out)
	return out
}

// snapTimers returns the timers of snaps as timerStrings.
func snapTimers(snaps ...KeySnapshot) []string {
	var out []string
	for _, s := range snaps {
		for _, tm := range s.Timers {
			tm.Key = s.Key
			out = append(out, timerString(tm))
		}
	}
	slices.Sort(out)
	return out
}

// checkNow fails the test if the store is inconsistent.
func checkNow(t *testing.T, db *DB) {
	t.Helper()
	if err := checkDB(db); err != nil {
		t.Fatalf("store inconsistent: %v", err)
	}
}

func TestRestoreReplaces(t *testing.T) {
	db := openTestDB(t, Options{})
	s := mustStreamID(t, db, "t", "s")
	mustCommit(t, db, &Checkpoint{Task: "t", Keys: []KeyWrites{
		{Stream: s, Key: []byte("k"), Mark: 5, StateVersion: 1,
			Writes: []Write{set("a", "1"), set("b", "2"), set("c", "3")},
			Timers: []TimerOp{setTimer("x", 0, 100, "x"), setTimer("y", 1, 200, "y"), setTimer("z", 0, 300, "z")}},
		{Stream: s, Key: []byte("other"), Mark: 6, Writes: []Write{set("a", "o")},
			Timers: []TimerOp{setTimer("x", 0, 150, "o")}},
	}})
	// Walk the due indexes so that their floors are known (at the first
	// timers, due 100 and 200): the restored timers sort below them, and
	// DueTimers must still see them.
	if got := allDueTimers(t, db, s); len(got) != 4 {
		t.Fatalf("before: due timers %q", got)
	}
	other := mustSnapshot(t, db, s, "other")

	snap := KeySnapshot{Key: []byte("k"), Mark: NoneApplied,
		Names:  []Write{set("b", "new b"), set("d", "4")},
		Timers: []Timer{timer("k", "w", 1, -1, "w"), timer("k", "y", 0, 15, "y moved"), timer("k", "z", 0, 300, "z kept")}}
	fresh := KeySnapshot{Key: []byte("fresh"), Mark: 9, HasMark: true, StateVersion: 2,
		Names: []Write{set("f", "")}, Timers: []Timer{timer("fresh", "f", 0, -50, "")}}
	mustRestore(t, db, s, []KeySnapshot{snap, fresh}, nil)
	checkNow(t, db)

	for _, want := range []KeySnapshot{snap, fresh, other} {
		if got := mustSnapshot(t, db, s, string(want.Key)); snapString(got) != snapString(want) {
			t.Errorf("after Restore:\n got %s\nwant %s", snapString(got), snapString(want))
		}
	}
	if got, want := allDueTimers(t, db, s), snapTimers(snap, fresh, other); !slices.Equal(got, want) {
		t.Errorf("DueTimers after Restore = %q, want %q", got, want)
	}
	if got := getString(t, db, "t", s, "k", "a"); got != "<none>" {
		t.Errorf("name a not deleted: %q", got)
	}
	if _, ok, _ := db.Position("t", s); ok {
		t.Error("Restore without pos wrote a position")
	}

	// An empty snapshot deletes the key's whole state.
	mustRestore(t, db, s, []KeySnapshot{{Key: []byte("k"), Mark: NoneApplied}}, nil)
	checkNow(t, db)
	if got := mustSnapshot(t, db, s, "k"); len(got.Names)+len(got.Timers) != 0 || got.HasMark {
		t.Errorf("after empty snapshot: %s", snapString(got))
	}
	if got, want := allDueTimers(t, db, s), snapTimers(fresh, other); !slices.Equal(got, want) {
		t.Errorf("DueTimers after empty snapshot = %q, want %q", got, want)
	}
}

func TestRestoreDuplicateKeyLastWins(t *testing.T) {
	db := openTestDB(t, Options{})
	s := mustStreamID(t, db, "t", "s")
	first := KeySnapshot{Key: []byte("k"), Mark: 1, HasMark: true, Names: []Write{set("a", "1")},
		Timers: []Timer{timer("k", "t", 0, 1, "first")}}
	last := KeySnapshot{Key: []byte("k"), Mark: 2, HasMark: true, Names: []Write{set("b", "2")},
		Timers: []Timer{timer("k", "t", 1, 2, "last")}}
	mustRestore(t, db, s, []KeySnapshot{first, {Key: []byte("j"), Mark: NoneApplied}, last}, nil)
	if got := mustSnapshot(t, db, s, "k"); snapString(got) != snapString(last) {
		t.Errorf("got %s, want %s", snapString(got), snapString(last))
	}
}

// restoreWorkload returns n snapshots of keys with two names, one or two
// timers and a mark, of generation gen (different generations differ in every
// part).
func restoreWorkload(n, gen int) []KeySnapshot {
	out := make([]KeySnapshot, n)
	for i := range out {
		key := fmt.Sprintf("key-%03d", i)
		s := KeySnapshot{Key: []byte(key), Mark: int64(gen*1000 + i), HasMark: true, StateVersion: uint32(gen),
			Names: []Write{set("a", fmt.Sprint(gen)), set(fmt.Sprintf("n%d", gen), "v")},
			Timers: []Timer{timer(key, "t", uint8(gen%2), int64(gen*10-i), "p"),
				timer(key, fmt.Sprintf("t%d", gen), 0, int64(i), "")}}
		if (i+gen)%3 == 0 {
			s.HasMark, s.Mark, s.StateVersion = false, NoneApplied, 0
			s.Timers = s.Timers[:1]
		}
		out[i] = s
	}
	return out
}

// streamDump returns the Badger entries of stream s of task "t" in the
// position, mark, state, timer and due tables.
func streamDump(t *testing.T, db *DB, s uint32) map[string]string {
	t.Helper()
	out := map[string]string{}
	for k, v := range dumpDB(t, db) {
		for _, tag := range []byte{tablePosition, tableMark, tableState, tableTimer, tableDue} {
			if strings.HasPrefix(k, string(appendStreamPrefix(nil, tag, "t", s))) {
				out[k] = v
			}
		}
	}
	return out
}

// TestRestoreSplit restores over existing state in small transactions and
// compares with one big transaction; a Restore interrupted after some
// transactions and run again gives the same store, and so does a second run
// (idempotence).
func TestRestoreSplit(t *testing.T) {
	const keys = 60
	pos := &Position{Next: 500, Horizon: 520, Resume: 7, Watermark: 9}
	prepare := func(t *testing.T, opts Options) (*DB, uint32) {
		db := openTestDB(t, opts)
		s := mustStreamID(t, db, "t", "s")
		mustRestore(t, db, s, restoreWorkload(keys, 1), &Position{Next: 100, Horizon: 110, Watermark: -1})
		return db, s
	}
	ref, rs := prepare(t, Options{})
	txns := 0
	ref.opts.beforeTxn = func(int) error { txns++; return nil }
	mustRestore(t, ref, rs, restoreWorkload(keys, 2), pos)
	if txns != 1 {
		t.Fatalf("reference Restore took %d transactions, want 1", txns)
	}
	want := streamDump(t, ref, rs)
	for i, s := range restoreWorkload(keys, 2) {
		if got := mustSnapshot(t, ref, rs, string(s.Key)); snapString(got) != snapString(s) {
			t.Fatalf("key %d: got %s, want %s", i, snapString(got), snapString(s))
		}
	}

	t.Run("split", func(t *testing.T) {
		db, s := prepare(t, Options{MaxTxnEntries: 25})
		var nexts []int64
		db.opts.beforeTxn = func(int) error {
			p, _, err := db.Position("t", s)
			if err != nil {
				return err
			}
			if p.Horizon != pos.Horizon {
				t.Errorf("before a key transaction: horizon %d, want %d raised first", p.Horizon, pos.Horizon)
			}
			nexts = append(nexts, p.Next)
			return nil
		}
		mustRestore(t, db, s, restoreWorkload(keys, 2), pos)
		if len(nexts) < 5 {
			t.Fatalf("Restore took %d transactions, want several", len(nexts))
		}
		for i, n := range nexts {
			if n != 100 {
				t.Errorf("before transaction %d: Next %d, want the old position until the last commits", i, n)
			}
		}
		if got := streamDump(t, db, s); !maps.Equal(got, want) {
			t.Errorf("split Restore differs from the single-transaction one (%d vs %d entries)", len(got), len(want))
		}
		checkNow(t, db)
	})

	t.Run("interrupted then rerun", func(t *testing.T) {
		db, s := prepare(t, Options{MaxTxnEntries: 25})
		crash := errors.New("crash")
		db.opts.beforeTxn = func(i int) error {
			if i == 3 {
				return crash
			}
			return nil
		}
		if err := db.Restore("t", s, restoreWorkload(keys, 2), pos); !errors.Is(err, crash) {
			t.Fatalf("Restore = %v, want the crash", err)
		}
		checkNow(t, db)
		if p, _, _ := db.Position("t", s); p.Next != 100 {
			t.Errorf("after the crash: position %+v, want the old Next", p)
		}
		db.opts.beforeTxn = nil
		mustRestore(t, db, s, restoreWorkload(keys, 2), pos)
		if got := streamDump(t, db, s); !maps.Equal(got, want) {
			t.Error("rerun Restore differs from the uninterrupted one")
		}
	})

	t.Run("idempotent", func(t *testing.T) {
		db, s := prepare(t, Options{})
		for range 2 {
			mustRestore(t, db, s, restoreWorkload(keys, 2), pos)
			if got := streamDump(t, db, s); !maps.Equal(got, want) {
				t.Error("Restore differs from the reference")
			}
			checkNow(t, db)
		}
		if got, want := allDueTimers(t, db, s), snapTimers(restoreWorkload(keys, 2)...); !slices.Equal(got, want) {
			t.Errorf("DueTimers = %d timers, want %d", len(got), len(want))
		}
	})
}

func TestRestorePositionOnly(t *testing.T) {
	db := openTestDB(t, Options{})
	s := mustStreamID(t, db, "t", "s")
	want := Position{Next: 3, Horizon: 2, Resume: 1, Watermark: -1}
	mustRestore(t, db, s, nil, &want)
	if got, ok, err := db.Position("t", s); err != nil || !ok || got != want {
		t.Errorf("Position = %+v, %v, %v; want %+v", got, ok, err, want)
	}
}

func TestRestoreValidation(t *testing.T) {
	long := strings.Repeat("x", MaxStateKeyLen)
	for _, tc := range []struct {
		name   string
		stream uint32
		snap   KeySnapshot
		pos    *Position
		want   error
	}{
		{"stream 0", 0, KeySnapshot{}, nil, ErrInvalidCheckpoint},
		{"mark below -1", 1, KeySnapshot{Mark: -2, HasMark: true}, nil, ErrInvalidCheckpoint},
		{"names out of order", 1, KeySnapshot{Names: []Write{set("b", ""), set("a", "")}}, nil, ErrInvalidCheckpoint},
		{"name twice", 1, KeySnapshot{Names: []Write{set("a", ""), set("a", "")}}, nil, ErrInvalidCheckpoint},
		{"delete set", 1, KeySnapshot{Names: []Write{del("a")}}, nil, ErrInvalidCheckpoint},
		{"timer twice", 1, KeySnapshot{Timers: []Timer{timer("", "b", 0, 0, ""), timer("", "a", 0, 0, ""), timer("", "b", 0, 0, "")}}, nil, ErrInvalidCheckpoint},
		{"timer domain", 1, KeySnapshot{Timers: []Timer{timer("", "a", 2, 0, "")}}, nil, ErrInvalidCheckpoint},
		{"name too long", 1, KeySnapshot{Names: []Write{set(long, "")}}, nil, ErrKeyTooLarge},
		{"timer name too long", 1, KeySnapshot{Timers: []Timer{timer("", long, 0, 0, "")}}, nil, ErrKeyTooLarge},
		{"position", 1, KeySnapshot{}, &Position{Next: -1}, ErrInvalidCheckpoint},
	} {
		t.Run(tc.name, func(t *testing.T) {
			db := openTestDB(t, Options{})
			mustStreamID(t, db, "t", "s")
			before := dumpDB(t, db)
			err := db.Restore("t", tc.stream, []KeySnapshot{{Key: []byte("ok"), Mark: 1, HasMark: true}, tc.snap}, tc.pos)
			if !errors.Is(err, tc.want) {
				t.Errorf("Restore = %v, want %v", err, tc.want)
			}
			if !maps.Equal(dumpDB(t, db), before) {
				t.Error("a rejected Restore wrote something")
			}
		})
	}
	db := openTestDB(t, Options{})
	if err := db.Restore("", 1, nil, nil); !errors.Is(err, ErrInvalidName) {
		t.Errorf("Restore with empty task: %v", err)
	}
	if err := db.DropStream("", 1); !errors.Is(err, ErrInvalidName) {
		t.Errorf("DropStream with empty task: %v", err)
	}
	mustClose(t, db)
	if err := db.Restore("t", 1, nil, nil); !errors.Is(err, ErrClosed) {
		t.Errorf("Restore after Close: %v", err)
	}
	if err := db.DropStream("t", 1); !errors.Is(err, ErrClosed) {
		t.Errorf("DropStream after Close: %v", err)
	}
	if _, err := db.Snapshot("t", 1, nil); !errors.Is(err, ErrClosed) {
		t.Errorf("Snapshot after Close: %v", err)
	}
}

func TestDropStream(t *testing.T) {
	for _, tc := range []struct {
		name    string
		opts    Options
		minTxns int
	}{
		{"one transaction", Options{}, 1},
		{"split", Options{MaxTxnEntries: 30}, 10},
	} {
		t.Run(tc.name, func(t *testing.T) {
			db := openTestDB(t, tc.opts)
			s := mustStreamID(t, db, "t", "s")
			s2 := mustStreamID(t, db, "t", "s2")
			mustRestore(t, db, s, restoreWorkload(100, 1), &Position{Next: 10, Horizon: 9, Watermark: -1})
			mustRestore(t, db, s2, restoreWorkload(10, 2), &Position{Next: 20, Horizon: 19, Watermark: -1})
			// Another task whose stream has the same ID and a task whose name
			// has "t" as a prefix.
			for _, task := range []string{"u", "tt"} {
				id := mustStreamID(t, db, task, "s")
				if err := db.Restore(task, id, restoreWorkload(10, 3), &Position{Next: 30, Horizon: 29, Watermark: -1}); err != nil {
					t.Fatal(err)
				}
			}
			allDueTimers(t, db, s) // learn the floors
			before, dropped := dumpDB(t, db), streamDump(t, db, s)
			if len(dropped) < 500 {
				t.Fatalf("stream has only %d entries", len(dropped))
			}

			txns := 0
			db.opts.beforeTxn = func(int) error { txns++; return nil }
			if err := db.DropStream("t", s); err != nil {
				t.Fatalf("DropStream: %v", err)
			}
			db.opts.beforeTxn = nil
			if txns < tc.minTxns {
				t.Errorf("DropStream took %d transactions, want at least %d", txns, tc.minTxns)
			}
			checkNow(t, db)
			if got := streamDump(t, db, s); len(got) != 0 {
				t.Errorf("%d entries of the dropped stream left", len(got))
			}
			after := dumpDB(t, db)
			for k, v := range before {
				if _, ok := dropped[k]; ok {
					continue
				}
				if w, ok := after[k]; !ok || w != v {
					t.Errorf("entry %x of another stream changed or vanished", k)
				}
			}
			if len(after) != len(before)-len(dropped) {
				t.Errorf("%d entries after drop, want %d", len(after), len(before)-len(dropped))
			}
			if id := mustStreamID(t, db, "t", "s"); id != s {
				t.Errorf("stream ID after drop %d, want %d", id, s)
			}
			if got := allDueTimers(t, db, s); len(got) != 0 {
				t.Errorf("DueTimers after drop: %q", got)
			}
			if n, err := db.TimerCount("t", s); err != nil || n != 0 {
				t.Errorf("TimerCount = %d, %v", n, err)
			}
			if _, ok, _ := db.Position("t", s); ok {
				t.Error("position survived")
			}
			// The stream can be restored again, and its timers are found.
			snaps := restoreWorkload(5, 4)
			mustRestore(t, db, s, snaps, &Position{Next: 1, Horizon: 0, Watermark: -1})
			if got, want := allDueTimers(t, db, s), snapTimers(snaps...); !slices.Equal(got, want) {
				t.Errorf("DueTimers after drop and restore = %q, want %q", got, want)
			}
			// Dropping an empty or unknown stream is not an error.
			if err := db.DropStream("t", 99); err != nil {
				t.Errorf("DropStream of an unknown stream: %v", err)
			}
		})
	}
}

func TestRestoreReadOnly(t *testing.T) {
	dir := t.TempDir()
	db := openTestDBAt(t, dir, Options{})
	mustClose(t, db)
	ro := openTestDBAt(t, dir, Options{ReadOnly: true})
	if err := ro.Restore("t", 1, nil, nil); !errors.Is(err, ErrReadOnly) {
		t.Errorf("Restore on read-only: %v", err)
	}
	if err := ro.DropStream("t", 1); !errors.Is(err, ErrReadOnly) {
		t.Errorf("DropStream on read-only: %v", err)
	}
}

// TestRestoreConcurrent restores timers due ever earlier while DueTimers
// walks the index and Snapshot reads a key: DueTimers must end up finding
// every timer (Restore lowers the floors), and every snapshot must be one
// restored state, never a mix.
func TestRestoreConcurrent(t *testing.T) {
	db := openTestDB(t, Options{})
	s := mustStreamID(t, db, "t", "s")
	const n = 200
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := range n {
			v := fmt.Sprint(i)
			snaps := []KeySnapshot{
				{Key: fmt.Appendf(nil, "k%d", i), Mark: NoneApplied, Timers: []Timer{timer("", "n", 0, int64(n-i), "")}},
				{Key: []byte("hot"), Mark: int64(i), HasMark: true, Names: []Write{set("a", v), set("b", v)},
					Timers: []Timer{timer("hot", "t", 0, int64(2*n-i), v)}},
			}
			if err := db.Restore("t", s, snaps, nil); err != nil {
				t.Error(err)
				return
			}
		}
	}()
	reads := 0
	for running := true; running; reads++ {
		select {
		case <-done:
			running = false
		default:
		}
		if _, _, err := db.DueTimers("t", s, 0, math.MaxInt64, nil, 5, func(Timer) bool { return true }); err != nil {
			t.Fatal(err)
		}
		snap, err := db.Snapshot("t", s, []byte("hot"))
		if err != nil {
			t.Fatal(err)
		}
		if !snap.HasMark {
			continue // before the first Restore
		}
		v := fmt.Sprint(snap.Mark)
		want := KeySnapshot{Key: []byte("hot"), Mark: snap.Mark, HasMark: true, Names: []Write{set("a", v), set("b", v)},
			Timers: []Timer{timer("hot", "t", 0, 2*n-snap.Mark, v)}}
		if snapString(snap) != snapString(want) {
			t.Fatalf("inconsistent snapshot %s", snapString(snap))
		}
	}
	got, _ := dueTimers(t, db, s, 0, math.MaxInt64, nil, 2*n)
	if len(got) != n+1 || got[0] != fmt.Sprintf("k%d/n@0:1=", n-1) {
		t.Errorf("after %d concurrent reads: DueTimers = %d timers, first %q; want %d, first k%d", reads, len(got), got[0], n+1, n-1)
	}
}
