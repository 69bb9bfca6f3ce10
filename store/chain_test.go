package store

import (
	"errors"
	"fmt"
	"strings"
	"testing"
)

// chainEntries reads task's chain log output from offset 0.
func chainEntries(t *testing.T, db *DB, task, output string) map[uint64]string {
	t.Helper()
	got := map[uint64]string{}
	if err := db.ChainRead(task, output, 0, 0, func(off uint64, v []byte) bool {
		got[off] = string(v)
		return true
	}); err != nil {
		t.Fatalf("ChainRead: %v", err)
	}
	return got
}

// TestChainLog: chain entries commit with the checkpoint's keys, read back in order from an
// offset, survive a reopen with their head, and trimming keeps the last entry.
func TestChainLog(t *testing.T) {
	dir := t.TempDir()
	db := openTestDBAt(t, dir, Options{})
	s := mustStreamID(t, db, "up", "file:in/0")
	mustCommit(t, db, &Checkpoint{Task: "up",
		Keys:      []KeyWrites{{Stream: s, Key: []byte("a"), Mark: 0, Writes: []Write{set("n", "1")}}},
		Positions: []StreamPosition{{Stream: s, Position: Position{Next: 1, Horizon: 0, Watermark: -1}}},
		Chain:     []ChainEntry{{Output: "counts", Offset: 0, Value: []byte("e0")}, {Output: "counts", Offset: 1, Value: []byte("e1")}, {Output: "other", Offset: 0, Value: []byte("o0")}},
	})
	mustCommit(t, db, &Checkpoint{Task: "up", Chain: []ChainEntry{{Output: "counts", Offset: 2, Value: []byte("e2")}}})
	if got, want := fmt.Sprint(chainEntries(t, db, "up", "counts")), "map[0:e0 1:e1 2:e2]"; got != want {
		t.Fatalf("counts = %s, want %s", got, want)
	}
	var from1 []uint64
	if err := db.ChainRead("up", "counts", 1, 1, func(off uint64, _ []byte) bool { from1 = append(from1, off); return true }); err != nil || fmt.Sprint(from1) != "[1]" {
		t.Fatalf("ChainRead from 1, max 1 = %v, %v; want [1]", from1, err)
	}
	mustClose(t, db)
	db = openTestDBAt(t, dir, Options{})
	if h, err := db.ChainHead("up", "counts"); err != nil || h != 3 {
		t.Fatalf("ChainHead after reopen = %d, %v; want 3", h, err)
	}
	if h, err := db.ChainHead("up", "none"); err != nil || h != 0 {
		t.Fatalf("ChainHead of an empty log = %d, %v; want 0", h, err)
	}
	if n, err := db.ChainTrim("up", "counts", 0, 2); err != nil || n != 2 {
		t.Fatalf("ChainTrim below 2 = %d, %v; want 2", n, err)
	}
	if n, err := db.ChainTrim("up", "counts", 1, 100); err != nil || n != 0 {
		t.Fatalf("ChainTrim below 100 = %d, %v; want 0 (the last entry stays)", n, err)
	}
	if got, want := fmt.Sprint(chainEntries(t, db, "up", "counts")), "map[2:e2]"; got != want {
		t.Fatalf("counts after trim = %s, want %s", got, want)
	}
	if h, err := db.ChainHead("up", "counts"); err != nil || h != 3 {
		t.Fatalf("ChainHead after trim = %d, %v; want 3", h, err)
	}
	if got := fmt.Sprint(chainEntries(t, db, "up", "other")); got != "map[0:o0]" {
		t.Fatalf("other = %s", got)
	}
}

// TestChainCheckpointOneTxn: a checkpoint with chain entries that does not fit in one
// transaction is refused whole (nothing of it written), and offsets must increase.
func TestChainCheckpointOneTxn(t *testing.T) {
	db := openTestDB(t, Options{InMemory: true, MaxTxnEntries: 100})
	s := mustStreamID(t, db, "up", "file:in/0")
	cp := &Checkpoint{Task: "up", Positions: []StreamPosition{{Stream: s, Position: Position{Next: 200, Horizon: 199, Watermark: -1}}}}
	for i := range 200 {
		cp.Keys = append(cp.Keys, KeyWrites{Stream: s, Key: []byte(fmt.Sprint("k", i)), Mark: int64(i), First: int64(i), Writes: []Write{set("n", "1")}})
	}
	cp.Chain = []ChainEntry{{Output: "counts", Offset: 0, Value: []byte("x")}}
	err := db.Commit(cp)
	if !errors.Is(err, ErrTxnTooBig) || !strings.Contains(err.Error(), "one transaction") {
		t.Fatalf("Commit of a split checkpoint with chain entries = %v, want ErrTxnTooBig", err)
	}
	if _, ok, _ := db.Position("up", s); ok {
		t.Fatal("a position was written")
	}
	if got := chainEntries(t, db, "up", "counts"); len(got) != 0 {
		t.Fatalf("chain entries written: %v", got)
	}
	err = db.Commit(&Checkpoint{Task: "up", Chain: []ChainEntry{{Output: "c", Offset: 1}, {Output: "c", Offset: 1}}})
	if !errors.Is(err, ErrInvalidCheckpoint) {
		t.Fatalf("Commit with offsets not increasing = %v, want ErrInvalidCheckpoint", err)
	}
}
