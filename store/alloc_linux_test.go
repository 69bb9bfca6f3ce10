package store

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// TestMemtableLogsAllocated checks the write gate's second half: once the store has opened and
// after every commit, each memtable log has a block for every byte, so that Badger's writes into
// it through its memory map never need a new block (on a full disk that is SIGBUS).
func TestMemtableLogsAllocated(t *testing.T) {
	dir := t.TempDir()
	db := openTestDBAt(t, dir, Options{MemTableSize: 1 << 20})
	s := mustStreamID(t, db, "t", "s")
	check := func(when string) {
		t.Helper()
		ents, err := os.ReadDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, e := range ents {
			if !strings.HasSuffix(e.Name(), memLogSuffix) {
				continue
			}
			n++
			var st syscall.Stat_t
			if err := syscall.Stat(filepath.Join(dir, e.Name()), &st); err != nil {
				t.Fatal(err)
			}
			if st.Blocks*512 < st.Size {
				t.Errorf("%s: %s has %d of %d bytes allocated", when, e.Name(), st.Blocks*512, st.Size)
			}
		}
		if n == 0 {
			t.Fatalf("%s: no memtable log in %s", when, dir)
		}
	}
	check("after Open")
	// Enough commits to fill several 1 MiB memtables: each new log is allocated too.
	val := strings.Repeat("v", 4<<10)
	for i := range 600 {
		mustCommit(t, db, &Checkpoint{Task: "t", Keys: []KeyWrites{{Stream: s, Key: []byte(fmt.Sprint("k", i)), Mark: 1, Writes: []Write{set("n", val)}}}})
	}
	check("after 600 commits")
}
