package store

import (
	"fmt"
	"math"
	"testing"

	"github.com/dgraph-io/badger/v4"
)

// entriesAfter counts, per table tag, the Badger entries written by the store's write
// transactions committed after version after (sets and deletes alike), and how many such
// transactions there were: every entry of one transaction has its commit's version, and no
// compaction runs in a test this small to fold versions away.
func entriesAfter(t *testing.T, db *DB, after uint64) (counts map[byte]int, txns int) {
	t.Helper()
	counts = map[byte]int{}
	versions := map[uint64]bool{}
	err := db.bdb.View(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{AllVersions: true})
		defer it.Close()
		for it.Rewind(); it.Valid(); it.Next() {
			if v := it.Item().Version(); v > after {
				counts[it.Item().Key()[0]]++
				versions[v] = true
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return counts, len(versions)
}

// TestCommitSkipsUnchangedMarks: a key whose mark and state version are those its stored mark
// entry holds (KeyWrites.MarkUnchanged: a window's timer fired, no record came) gets no mark
// entry, in a checkpoint of one transaction and in a split one, without a position for its
// stream (where the rule of marks below Next does not apply). The timers-only checkpoint of n
// keys writes their state and timer entries and no mark, where it wrote n marks before; a key
// whose state version changed and a key never written before get theirs.
func TestCommitSkipsUnchangedMarks(t *testing.T) {
	const n = 40
	for _, split := range []bool{false, true} {
		t.Run(fmt.Sprintf("split=%v", split), func(t *testing.T) {
			opts := Options{}
			if split {
				opts.MaxTxnEntries = 24
			}
			db := openTestDB(t, opts)
			s := mustStreamID(t, db, "t", "s")
			cp := counterCheckpoint(s, n, 0, n, 1, false)
			for i := range cp.Keys {
				cp.Keys[i].Timers = []TimerOp{{Name: []byte("w"), Due: 100, Payload: []byte("p")}}
			}
			mustCommit(t, db, cp)
			before := db.bdb.MaxVersion()

			// The timers fire: each key's window result written, its timer deleted; no record
			// came, so the marks and versions are the stored ones and no position changes.
			fire := &Checkpoint{Task: "t"}
			for i := range n {
				fire.Keys = append(fire.Keys, KeyWrites{Stream: s, Key: []byte(fmt.Sprint(i)), Mark: int64(i), StateVersion: 1,
					MarkStored: true, MarkUnchanged: true, First: math.MaxInt64,
					Writes: []Write{set("fired", "1")}, Timers: []TimerOp{{Name: []byte("w"), Delete: true}}})
			}
			// A key a module of version 2 changed (its mark entry must carry 2), and a key
			// with no mark yet (a partition callback wrote it: NoneApplied, written once).
			fire.Keys[0].StateVersion, fire.Keys[0].MarkStored, fire.Keys[0].MarkUnchanged = 2, false, false
			fire.Keys = append(fire.Keys, KeyWrites{Stream: s, Key: []byte("new"), Mark: NoneApplied, StateVersion: 1,
				First: math.MaxInt64, Writes: []Write{set("fired", "1")}})
			mustCommit(t, db, fire)

			counts, txns := entriesAfter(t, db, before)
			if split && txns < 2 {
				t.Fatalf("the checkpoint took %d transaction, want several", txns)
			}
			// Per fired key: its state entry, its timer and due-index deletes.
			if counts[tableMark] != 2 || counts[tableState] != n+1 || counts[tableTimer] != n || counts[tableDue] != n {
				t.Errorf("timers-only checkpoint wrote %v, want 2 marks (the changed version's, the new key's), %d state entries, %d timer and %d due-index deletes",
					counts, n+1, n, n)
			}
			for i := range n {
				want := uint32(1)
				if i == 0 {
					want = 2
				}
				mark, v, ok, err := db.MarkInfo("t", s, []byte(fmt.Sprint(i)))
				if err != nil || !ok || mark != int64(i) || v != want {
					t.Fatalf("key %d: mark %d version %d ok %v err %v; want mark %d version %d", i, mark, v, ok, err, i, want)
				}
			}
			if mark, v, ok, err := db.MarkInfo("t", s, []byte("new")); err != nil || !ok || mark != NoneApplied || v != 1 {
				t.Errorf("key new: mark %d version %d ok %v err %v; want NoneApplied, version 1", mark, v, ok, err)
			}
			var stale int
			if err := db.KeysWithVersionNot("t", s, 2, func([]byte, uint32) bool { stale++; return true }); err != nil {
				t.Fatal(err)
			}
			if stale != n { // keys 1..n-1 and new
				t.Errorf("a migration to version 2 finds %d keys, want %d", stale, n)
			}
		})
	}
}
