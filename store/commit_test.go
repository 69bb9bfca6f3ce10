package store

import (
	"errors"
	"fmt"
	"maps"
	"strings"
	"testing"
)

// workload returns a deterministic series of checkpoints over three streams
// of task "t": sets, overwrites, deletes, empty keys and names, values of
// varied sizes, timers set, replaced and deleted, state versions, marks of
// NoneApplied, dropped marks and positions.
func workload(streams []uint32) []*Checkpoint {
	var cps []*Checkpoint
	for round := range 4 {
		cp := &Checkpoint{Task: "t"}
		for si, s := range streams {
			for k := range 60 {
				if (k+round)%3 == 0 {
					continue // not dirty this round
				}
				kw := KeyWrites{Stream: s, Key: []byte(fmt.Sprintf("key-%d", k)), Mark: int64(100*round + k)}
				if k == 0 {
					kw.Key = nil
				}
				nwrites := 1 + (k*7+round)%9 // up to 9 writes: some groups exceed tiny limits alone
				for w := range nwrites {
					name := fmt.Sprintf("n%d", w)
					if w == 0 && k%5 == 0 {
						name = ""
					}
					if (w+k+round)%4 == 0 && round > 0 {
						kw.Writes = append(kw.Writes, del(name))
						continue
					}
					value := strings.Repeat(string(rune('a'+si)), (k*w+round)%300)
					kw.Writes = append(kw.Writes, set(name, fmt.Sprintf("r%d:%s", round, value)))
				}
				// Timers: set, replace (same or other due and domain), delete,
				// delete a missing one, two operations on one name.
				if k%4 != 3 {
					kw.Timers = append(kw.Timers, setTimer("t0", uint8(k%2), int64((k*37+round*11)%50-25), fmt.Sprintf("r%d", round)))
				}
				if k%3 == 0 && round%2 == 1 {
					kw.Timers = append(kw.Timers, delTimer("t1"))
				} else {
					kw.Timers = append(kw.Timers, setTimer("t1", uint8(round%2), int64(k-round), strings.Repeat("p", (k*round)%200)))
				}
				if k%7 == 0 {
					kw.Timers = append(kw.Timers, setTimer("t2", 0, int64(round), "x"), delTimer("t2"))
				}
				kw.StateVersion = uint32(round)
				if round == 2 && k%10 == 2 {
					kw.Mark = NoneApplied
				}
				if round == 3 && k%10 == 1 {
					kw.Mark = DropMark
				}
				cp.Keys = append(cp.Keys, kw)
			}
			cp.Positions = append(cp.Positions, StreamPosition{s, Position{Next: int64(10 * round), Horizon: int64(10*round + 5), Resume: int64(round)}})
		}
		cps = append(cps, cp)
	}
	return cps
}

// TestSplitCommitEquivalence commits the same checkpoints as single
// transactions and split into many small ones, and checks that both stores
// end up byte-for-byte identical.
func TestSplitCommitEquivalence(t *testing.T) {
	run := func(opts Options) (dump map[string]string, txnsPerCommit []int) {
		db := openTestDB(t, opts)
		var streams []uint32
		for _, name := range []string{"file:a/0", "file:a/1", "kafka:b/0"} {
			streams = append(streams, mustStreamID(t, db, "t", name))
		}
		txns := 0
		db.opts.beforeTxn = func(int) error { txns++; return nil }
		for _, cp := range workload(streams) {
			txns = 0
			mustCommit(t, db, cp)
			txnsPerCommit = append(txnsPerCommit, txns)
		}
		return dumpDB(t, db), txnsPerCommit
	}
	whole, wholeTxns := run(Options{})
	split, splitTxns := run(Options{MaxTxnEntries: 5, MaxTxnBytes: 600})
	for i := range wholeTxns {
		if wholeTxns[i] != 1 {
			t.Errorf("checkpoint %d with default limits took %d transactions, want 1", i, wholeTxns[i])
		}
		if splitTxns[i] < 50 {
			t.Errorf("checkpoint %d with tiny limits took %d transactions, want many", i, splitTxns[i])
		}
	}
	if len(whole) < 300 {
		t.Fatalf("workload left only %d records; the test is too weak", len(whole))
	}
	if !maps.Equal(whole, split) {
		for k, v := range whole {
			if split[k] != v {
				t.Errorf("key %x: whole %q, split %q", k, v, split[k])
			}
		}
		for k := range split {
			if _, ok := whole[k]; !ok {
				t.Errorf("key %x only in the split store", k)
			}
		}
	}
}

// TestCrashBetweenTxns stops a split checkpoint after k transactions, for
// every k, as a crash would, and checks the invariant: every key's state
// matches its mark (all old or all new) and the positions are old until the
// last transaction has committed.
func TestCrashBetweenTxns(t *testing.T) {
	const nkeys = 20
	old := func(s uint32) *Checkpoint {
		cp := &Checkpoint{Task: "t", Positions: []StreamPosition{{s, Position{Next: 10, Horizon: 15, Resume: 1}}}}
		for i := range nkeys {
			cp.Keys = append(cp.Keys, KeyWrites{Stream: s, Key: []byte(fmt.Sprint(i)), Mark: int64(100 + i),
				Writes: []Write{set("v", fmt.Sprint("old-", i)), set("x", "old")},
				Timers: []TimerOp{setTimer("a", 0, int64(100+i), "old"), setTimer("b", 0, 50, "old")}})
		}
		return cp
	}
	next := func(s uint32) *Checkpoint {
		cp := &Checkpoint{Task: "t", Positions: []StreamPosition{{s, Position{Next: 20, Horizon: 25, Resume: 2}}}}
		for i := range nkeys {
			cp.Keys = append(cp.Keys, KeyWrites{Stream: s, Key: []byte(fmt.Sprint(i)), Mark: int64(200 + i),
				Writes: []Write{set("v", fmt.Sprint("new-", i)), set("w", "new"), del("x")},
				Timers: []TimerOp{setTimer("a", 1, int64(-i), "new"), delTimer("b"), setTimer("c", 0, 60, "new")}})
		}
		return cp
	}
	opts := Options{MaxTxnEntries: 30} // two key groups of 13 estimated entries per transaction

	prevNew := -1
	for k := 0; ; k++ {
		dir := t.TempDir()
		db := openTestDBAt(t, dir, opts)
		s := mustStreamID(t, db, "t", "s")
		mustCommit(t, db, old(s))
		finished := commitCrashingAt(t, db, k, next(s))
		mustClose(t, db)

		db = openTestDBAt(t, dir, Options{ReadOnly: true})
		newKeys := 0
		for i := range nkeys {
			key := fmt.Sprint(i)
			v, x, w := getString(t, db, "t", s, key, "v"), getString(t, db, "t", s, key, "x"), getString(t, db, "t", s, key, "w")
			mark, ok, err := db.Mark("t", s, []byte(key))
			if err != nil || !ok {
				t.Fatalf("k=%d key %s: Mark = %d, %v, %v", k, key, mark, ok, err)
			}
			ta, tb, tc := timerOf(t, db, s, key, "a"), timerOf(t, db, s, key, "b"), timerOf(t, db, s, key, "c")
			switch {
			case v == "old-"+key && x == "old" && w == "<none>" && mark == int64(100+i) &&
				ta == fmt.Sprintf("%s/a@0:%d=old", key, 100+i) && tb == key+"/b@0:50=old" && tc == "<none>":
			case v == "new-"+key && x == "<none>" && w == "new" && mark == int64(200+i) &&
				ta == fmt.Sprintf("%s/a@1:%d=new", key, -i) && tb == "<none>" && tc == key+"/c@0:60=new":
				newKeys++
			default:
				t.Errorf("k=%d key %s: inconsistent: v=%q x=%q w=%q mark=%d timers %s %s %s", k, key, v, x, w, mark, ta, tb, tc)
			}
		}
		// The due index agrees with the timers (checkDB checks every entry
		// at cleanup): by 60, domain 0 holds b (50) of each old key and c
		// (60) of each new one; then a (100+i) of the old keys, the first of
		// which is key newKeys (key groups are committed in order).
		due, next := dueTimers(t, db, s, 0, 60, nil, 1000)
		wantDue := "-"
		if newKeys < nkeys {
			wantDue = fmt.Sprint(100 + newKeys)
		}
		if len(due) != nkeys || next != wantDue {
			t.Errorf("k=%d: %d timers due in domain 0 by 60, next %s; want %d, next %s", k, len(due), next, nkeys, wantDue)
		}
		pos, _, err := db.Position("t", s)
		if err != nil {
			t.Fatal(err)
		}
		wantNext := int64(10)
		if finished {
			wantNext = 20
		}
		if pos.Next != wantNext {
			t.Errorf("k=%d: Position.Next = %d, want %d (finished=%v)", k, pos.Next, wantNext, finished)
		}
		// A key with its new mark (up to 219) is replayed with mark checks only up to the durable
		// horizon: the new horizon must be durable before any key transaction commits.
		if newKeys > 0 && pos.Horizon != 25 {
			t.Errorf("k=%d: %d keys committed with new marks but the durable horizon is %d, want 25", k, newKeys, pos.Horizon)
		}
		if newKeys < prevNew {
			t.Errorf("k=%d: %d new keys, fewer than %d after fewer transactions", k, newKeys, prevNew)
		}
		if k == 0 && newKeys != 0 {
			t.Errorf("k=0: %d new keys before any transaction committed", newKeys)
		}
		prevNew = newKeys
		mustClose(t, db)
		if finished {
			if newKeys != nkeys {
				t.Errorf("finished commit left %d of %d keys new", newKeys, nkeys)
			}
			if k < 7 {
				t.Errorf("checkpoint took %d transactions, want at least 7 with these limits", k+1)
			}
			break
		}
		if k > 100 {
			t.Fatal("Commit never finished")
		}
	}
}

// TestCrashBetweenTxnsAdvancesPosition stops a split checkpoint with partial positions after k
// transactions, for every k, and checks that the stored position moved forward with the keys
// written (a restart does not go back to the previous checkpoint) but never past a record of a
// key still old: replaying from the stored Next with the marks applies every record exactly once.
func TestCrashBetweenTxnsAdvancesPosition(t *testing.T) {
	const nkeys = 20
	// Key i's records since the last checkpoint are lines 100+i and 200+i; the last checkpoint
	// stopped at line 100 (byte 1000), the new one at line 220 (byte 2200).
	cp := func(s uint32) *Checkpoint {
		cp := &Checkpoint{Task: "t", Positions: []StreamPosition{{s, Position{Next: 220, Horizon: 230, Resume: 2200, Watermark: 7}}}}
		for i := range nkeys {
			cp.Keys = append(cp.Keys, KeyWrites{Stream: s, Key: []byte(fmt.Sprint(i)), Mark: int64(200 + i), First: int64(100 + i),
				Writes: []Write{set("v", "new"), set("w", "new")}})
			cp.Partial = append(cp.Partial, StreamPosition{s, Position{Next: int64(100 + i), Resume: int64(1000 + 10*i), Watermark: 5}})
		}
		return cp
	}
	opts := Options{MaxTxnEntries: 10} // three key groups of 3 entries and a position per transaction

	prevNext := int64(100)
	for k := 0; ; k++ {
		dir := t.TempDir()
		db := openTestDBAt(t, dir, opts)
		s := mustStreamID(t, db, "t", "s")
		mustCommit(t, db, &Checkpoint{Task: "t", Positions: []StreamPosition{{s, Position{Next: 100, Horizon: 110, Resume: 1000, Watermark: 6}}}})
		finished := commitCrashingAt(t, db, k, cp(s))
		mustClose(t, db)

		db = openTestDBAt(t, dir, Options{ReadOnly: true})
		pos, _, err := db.Position("t", s)
		if err != nil {
			t.Fatal(err)
		}
		newKeys := 0
		for i := range nkeys {
			key := fmt.Sprint(i)
			mark, ok, err := db.Mark("t", s, []byte(key))
			if err != nil {
				t.Fatal(err)
			}
			if ok {
				newKeys++
				if mark != int64(200+i) || getString(t, db, "t", s, key, "w") != "new" {
					t.Errorf("k=%d key %s: mark %d, w=%q", k, key, mark, getString(t, db, "t", s, key, "w"))
				}
			} else if pos.Next > int64(100+i) {
				t.Errorf("k=%d: Next %d passed line %d of key %s, which is not written: replay would lose it", k, pos.Next, 100+i, key)
			}
		}
		switch {
		case finished:
			if pos != (Position{Next: 220, Horizon: 230, Resume: 2200, Watermark: 7}) {
				t.Errorf("finished: position %+v", pos)
			}
		case newKeys < nkeys && pos.Next != int64(100+newKeys):
			// Keys are written in order, so the first old key is newKeys: replay starts at its line.
			t.Errorf("k=%d: %d keys written, Next %d; want %d", k, newKeys, pos.Next, 100+newKeys)
		case pos.Resume != 1000+10*(pos.Next-100) || pos.Horizon != 230 || pos.Watermark != 6:
			t.Errorf("k=%d: position %+v: Resume does not match Next, horizon not the new one or watermark lowered", k, pos)
		}
		if pos.Next < prevNext {
			t.Errorf("k=%d: Next %d went back from %d", k, pos.Next, prevNext)
		}
		prevNext = pos.Next
		mustClose(t, db)
		if finished {
			if k < 5 {
				t.Errorf("checkpoint took %d transactions, want at least 5 with these limits", k+1)
			}
			break
		}
		if k > 100 {
			t.Fatal("Commit never finished")
		}
	}
}

func TestCommitKeyTooBigForOneTxn(t *testing.T) {
	// Badger limits a transaction to 15% of a memtable: about 154 KiB here.
	db := openTestDB(t, Options{MemTableSize: 1 << 20})
	s := mustStreamID(t, db, "t", "s")
	big := KeyWrites{Stream: s, Key: []byte("big"), Mark: 1}
	for i := range 200 {
		big.Writes = append(big.Writes, set(fmt.Sprint(i), strings.Repeat("x", 1024)))
	}
	// A group over the store's own limit but within Badger's is committed in
	// a transaction of its own.
	fits := KeyWrites{Stream: s, Key: []byte("fits"), Mark: 1, Writes: big.Writes[:100]}
	mustCommit(t, db, &Checkpoint{Task: "t", Keys: []KeyWrites{
		{Stream: s, Key: []byte("small"), Mark: 1, Writes: []Write{set("n", "v")}}, fits,
	}})
	if got := getString(t, db, "t", s, "fits", "99"); len(got) != 1024 {
		t.Errorf("value of the large group = %d bytes, want 1024", len(got))
	}

	err := db.Commit(&Checkpoint{Task: "t", Keys: []KeyWrites{big}})
	var ke *KeyError
	if !errors.Is(err, ErrTxnTooBig) || !errors.As(err, &ke) || string(ke.Key) != "big" || ke.Stream != s {
		t.Fatalf("Commit of an oversized key group: error = %v, want *KeyError for key big wrapping ErrTxnTooBig", err)
	}
	if got := getString(t, db, "t", s, "big", "0"); got != "<none>" {
		t.Errorf("oversized group partly written: Get = %q", got)
	}
}

func TestCommitValidation(t *testing.T) {
	db := openTestDB(t, Options{InMemory: true})
	s := mustStreamID(t, db, "t", "s")
	good := KeyWrites{Stream: s, Key: []byte("good"), Mark: 1, Writes: []Write{set("n", "v")}}
	tooLong := make([]byte, MaxStateKeyLen-len("t")) // plus a 1-byte name: one over
	tests := []struct {
		name    string
		cp      Checkpoint
		want    error
		wantKey bool // a *KeyError
	}{
		{name: "stream 0", cp: Checkpoint{Keys: []KeyWrites{good, {Stream: 0, Key: []byte("k")}}}, want: ErrInvalidCheckpoint, wantKey: true},
		{name: "mark -2", cp: Checkpoint{Keys: []KeyWrites{good, {Stream: s, Key: []byte("k"), Mark: -2}}}, want: ErrInvalidCheckpoint, wantKey: true},
		{name: "mark just above DropMark", cp: Checkpoint{Keys: []KeyWrites{good, {Stream: s, Key: []byte("k"), Mark: DropMark + 1}}}, want: ErrInvalidCheckpoint, wantKey: true},
		{name: "duplicate key", cp: Checkpoint{Keys: []KeyWrites{good, {Stream: s, Key: []byte("k")}, {Stream: s, Key: []byte("k")}}}, want: ErrInvalidCheckpoint, wantKey: true},
		{name: "duplicate empty key", cp: Checkpoint{Keys: []KeyWrites{good, {Stream: s, Key: nil}, {Stream: s, Key: []byte{}}}}, want: ErrInvalidCheckpoint, wantKey: true},
		{name: "key and name too long", cp: Checkpoint{Keys: []KeyWrites{good, {Stream: s, Key: tooLong, Writes: []Write{set("n", "")}}}}, want: ErrKeyTooLarge, wantKey: true},
		{name: "position stream 0", cp: Checkpoint{Keys: []KeyWrites{good}, Positions: []StreamPosition{{0, Position{}}}}, want: ErrInvalidCheckpoint},
		{name: "negative next", cp: Checkpoint{Keys: []KeyWrites{good}, Positions: []StreamPosition{{s, Position{Next: -1}}}}, want: ErrInvalidCheckpoint},
		{name: "horizon below -1", cp: Checkpoint{Keys: []KeyWrites{good}, Positions: []StreamPosition{{s, Position{Horizon: -2}}}}, want: ErrInvalidCheckpoint},
		{name: "two positions of a stream", cp: Checkpoint{Keys: []KeyWrites{good}, Positions: []StreamPosition{{s, Position{}}, {s, Position{}}}}, want: ErrInvalidCheckpoint},
		{name: "partial position without a position", cp: Checkpoint{Keys: []KeyWrites{good}, Partial: []StreamPosition{{s, Position{}}}}, want: ErrInvalidCheckpoint},
		{name: "partial position past the position", cp: Checkpoint{Keys: []KeyWrites{good}, Positions: []StreamPosition{{s, Position{Next: 5}}}, Partial: []StreamPosition{{s, Position{Next: 6}}}}, want: ErrInvalidCheckpoint},
		{name: "partial positions out of order", cp: Checkpoint{Keys: []KeyWrites{good}, Positions: []StreamPosition{{s, Position{Next: 5}}}, Partial: []StreamPosition{{s, Position{Next: 3}}, {s, Position{Next: 3}}}}, want: ErrInvalidCheckpoint},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.cp.Task = "t"
			err := db.Commit(&tt.cp)
			if !errors.Is(err, tt.want) {
				t.Fatalf("Commit error = %v, want %v", err, tt.want)
			}
			var ke *KeyError
			if errors.As(err, &ke) != tt.wantKey {
				t.Errorf("Commit error %v: *KeyError = %v, want %v", err, ke != nil, tt.wantKey)
			}
			if got := getString(t, db, "t", s, "good", "n"); got != "<none>" {
				t.Errorf("invalid checkpoint was partly written: Get(good) = %q", got)
			}
		})
	}
	// Exactly at the limit is accepted.
	atLimit := tooLong[1:]
	mustCommit(t, db, &Checkpoint{Task: "t", Keys: []KeyWrites{{Stream: s, Key: atLimit, Mark: 1, Writes: []Write{set("n", "v")}}}})
	if v, ok, err := db.Get("t", s, atLimit, []byte("n")); err != nil || !ok || string(v) != "v" {
		t.Errorf("Get at the key limit = %q, %v, %v", v, ok, err)
	}
}

// The costs the host bounds a key's writes with (StateWriteCost, TimerOpCost, MarkCost within
// KeyLimits) are never below Badger's: a key group that fills KeyLimits commits. Values from 1 MiB
// go to the value log and cost a pointer, so a key may hold several of them in one commit.
func TestKeyLimitsFitOneTransaction(t *testing.T) {
	db := openTestDB(t, Options{})
	s := mustStreamID(t, db, "t", "s")
	maxEntries, maxBytes := db.KeyLimits()
	for _, tc := range []struct {
		name   string
		value  int
		most   int // writes at most (the value log's are cheap to the transaction, not to the disk)
		timers bool
	}{
		{"small values", 100, maxEntries, false},
		{"timers", 100, maxEntries, true},
		{"just under the value log", 1<<20 - 1, maxEntries, false},
		{"value log", 1 << 20, 8, false},
	} {
		kw := KeyWrites{Stream: s, Key: []byte(tc.name), Mark: 1}
		entries, bytes := MarkCost("t", kw.Key)
		val := []byte(strings.Repeat("v", tc.value))
		for i := 0; i < tc.most; i++ {
			name := []byte(fmt.Sprint(i))
			e, b := StateWriteCost("t", kw.Key, name, len(val))
			if tc.timers {
				e, b = TimerOpCost("t", kw.Key, name, len(val))
			}
			if entries+e > maxEntries || bytes+b > maxBytes {
				break
			}
			entries, bytes = entries+e, bytes+b
			if tc.timers {
				kw.Timers = append(kw.Timers, TimerOp{Name: name, Due: int64(i), Payload: val})
			} else {
				kw.Writes = append(kw.Writes, Write{Name: name, Value: val})
			}
		}
		if err := db.Commit(&Checkpoint{Task: "t", Keys: []KeyWrites{kw}}); err != nil {
			t.Errorf("%s: %d writes, %d timers within KeyLimits: %v", tc.name, len(kw.Writes), len(kw.Timers), err)
		}
		if tc.value == 1<<20 && len(kw.Writes) < tc.most {
			t.Errorf("values of 1 MiB: only %d fit KeyLimits, want them to cost a pointer", len(kw.Writes))
		}
	}
}
