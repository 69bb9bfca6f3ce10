package store

import (
	"fmt"
	"testing"

	"github.com/dgraph-io/badger/v4"
)

// lastCommitEntries counts, per table tag, the Badger entries the store's last write
// transaction wrote: every entry of one transaction has its commit's version, and no
// compaction runs in a test this small to fold versions away.
func lastCommitEntries(t *testing.T, db *DB) map[byte]int {
	t.Helper()
	var last uint64
	counts := map[uint64]map[byte]int{}
	err := db.bdb.View(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{AllVersions: true})
		defer it.Close()
		for it.Rewind(); it.Valid(); it.Next() {
			item := it.Item()
			v := item.Version()
			if counts[v] == nil {
				counts[v] = map[byte]int{}
			}
			counts[v][item.Key()[0]]++
			last = max(last, v)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return counts[last]
}

// counterCheckpoint is a counter's checkpoint over keys 0..n-1 of stream s: each key's count,
// its mark (the offset of its last record, i), its state version, and the stream's position.
func counterCheckpoint(s uint32, n int, round int, next int64, version uint32, stored bool) *Checkpoint {
	cp := &Checkpoint{Task: "t", Positions: []StreamPosition{{s, Position{Next: next, Horizon: next - 1}}}}
	for i := range n {
		cp.Keys = append(cp.Keys, KeyWrites{Stream: s, Key: []byte(fmt.Sprint(i)), Mark: int64(round*n + i),
			StateVersion: version, MarkStored: stored, First: int64(round*n + i),
			Writes: []Write{set("n", fmt.Sprint(round+1))}})
	}
	return cp
}

// TestCommitKeepsMarksBelowNext: a checkpoint in one transaction leaves the stored mark entry of
// a key that has one with its state version (MarkStored) when the key's new mark is below the
// Next it commits for the key's stream: a counter's checkpoint writes 1 entry per key instead of
// 2. The kept marks are stale but below Next, every key keeps a mark with its version (a
// migration finds them all), and a mark at or above Next, or of a stream without a new
// position, is written.
func TestCommitKeepsMarksBelowNext(t *testing.T) {
	const n = 100
	db := openTestDB(t, Options{})
	s := mustStreamID(t, db, "t", "s")
	other := mustStreamID(t, db, "t", "other")

	mustCommit(t, db, counterCheckpoint(s, n, 0, n, 1, false))
	first := lastCommitEntries(t, db)
	if first[tableMark] != n || first[tableState] != n {
		t.Fatalf("first checkpoint wrote %d marks and %d state entries, want %d each", first[tableMark], first[tableState], n)
	}

	mustCommit(t, db, counterCheckpoint(s, n, 1, 2*n, 1, true))
	second := lastCommitEntries(t, db)
	total := 0
	for _, c := range second {
		total += c
	}
	// n state entries, the position and the checkpoint number.
	if second[tableMark] != 0 || second[tableState] != n || total != n+2 {
		t.Errorf("second checkpoint wrote %v (%d entries), want %d state entries, no mark, %d in all", second, total, n, n+2)
	}
	for i := range n {
		mark, v, ok, err := db.MarkInfo("t", s, []byte(fmt.Sprint(i)))
		if err != nil || !ok || mark != int64(i) || v != 1 {
			t.Fatalf("key %d: mark %d version %d ok %v err %v; want the first checkpoint's mark %d, version 1", i, mark, v, ok, err, i)
		}
		if got := getString(t, db, "t", s, fmt.Sprint(i), "n"); got != "2" {
			t.Fatalf("key %d: n = %q, want 2", i, got)
		}
	}
	var stale int
	if err := db.KeysWithVersionNot("t", s, 2, func([]byte, uint32) bool { stale++; return true }); err != nil {
		t.Fatal(err)
	}
	if stale != n {
		t.Errorf("a migration to version 2 finds %d keys, want all %d", stale, n)
	}

	// Key "0" had records at and beyond the new Next (its mark 3n+5 ≥ Next 3n): its mark is
	// written. Stream other's key has no new position in this checkpoint: written too.
	cp := counterCheckpoint(s, n, 2, 3*n, 1, true)
	cp.Keys[0].Mark = 3*n + 5
	cp.Keys = append(cp.Keys, KeyWrites{Stream: other, Key: []byte("x"), Mark: 7, StateVersion: 1, MarkStored: true,
		Writes: []Write{set("n", "1")}})
	mustCommit(t, db, cp)
	if got := lastCommitEntries(t, db)[tableMark]; got != 2 {
		t.Errorf("third checkpoint wrote %d marks, want 2 (key 0's above Next, stream other's without a position)", got)
	}
	for _, c := range []struct {
		stream uint32
		key    string
		want   int64
	}{{s, "0", 3*n + 5}, {s, "1", 1}, {other, "x", 7}} {
		if mark, ok, err := db.Mark("t", c.stream, []byte(c.key)); err != nil || !ok || mark != c.want {
			t.Errorf("stream %d key %s: mark %d ok %v err %v, want %d", c.stream, c.key, mark, ok, err, c.want)
		}
	}
}

// TestSplitCommitWritesMarks: a checkpoint split over several transactions writes every mark,
// MarkStored or not: a key transaction commits before the positions, so a crash between them
// leaves the old Next, and replay from there must find each written key's new mark. The test
// fails each transaction in turn and checks that every key with new state has its new mark.
func TestSplitCommitWritesMarks(t *testing.T) {
	const n = 12
	for k := 0; ; k++ {
		dir := t.TempDir()
		db := openTestDBAt(t, dir, Options{MaxTxnEntries: 8})
		s := mustStreamID(t, db, "t", "s")
		mustCommit(t, db, counterCheckpoint(s, n, 0, n, 1, false))
		finished := commitCrashingAt(t, db, k, counterCheckpoint(s, n, 1, 2*n, 1, true))
		mustClose(t, db)

		db = openTestDBAt(t, dir, Options{ReadOnly: true})
		pos, _, err := db.Position("t", s)
		if err != nil {
			t.Fatal(err)
		}
		written := 0
		for i := range n {
			key := fmt.Sprint(i)
			mark, _, err := db.Mark("t", s, []byte(key))
			if err != nil {
				t.Fatal(err)
			}
			switch got := getString(t, db, "t", s, key, "n"); got {
			case "2":
				written++
				// Replay starts at pos.Next: a record of the key there, at or below n+i, was
				// applied and must be skipped.
				if mark != int64(n+i) && pos.Next <= int64(n+i) {
					t.Errorf("k=%d key %d: new state, mark %d, Next %d: replay would apply record %d again", k, i, mark, pos.Next, n+i)
				}
			case "1":
				if mark != int64(i) {
					t.Errorf("k=%d key %d: old state, mark %d, want %d", k, i, mark, i)
				}
			default:
				t.Fatalf("k=%d key %d: n = %q", k, i, got)
			}
		}
		mustClose(t, db)
		if finished {
			if written != n || pos.Next != 2*n {
				t.Errorf("finished: %d keys written, Next %d", written, pos.Next)
			}
			if k < 2 {
				t.Fatalf("the checkpoint took %d transactions, want several", k)
			}
			return
		}
	}
}
