package store

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// copyDir copies a store's directory as it is, like a kill of the process that has it open:
// the kernel keeps what Badger wrote, fsynced or not. (cp keeps Badger's sparse, preallocated
// logs sparse.)
func copyDir(t *testing.T, from, to string) {
	t.Helper()
	if out, err := exec.Command("cp", "-r", "--sparse=always", from, to).CombinedOutput(); err != nil {
		t.Fatalf("cp: %v: %s", err, out)
	}
}

// Damage in the middle of Badger's write-ahead log after a kill: Badger's replay stops at the
// damaged entry and drops every later checkpoint without a word. The journal tells, and says
// where the store resumes; the next open is quiet again.
func TestJournalDetectsCheckpointsLostToDamagedLog(t *testing.T) {
	for _, ro := range []bool{false, true} {
		t.Run(fmt.Sprintf("read-only=%v", ro), func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "state")
			db := openTestDBAt(t, dir, Options{})
			stream := mustStreamID(t, db, "t", "file:in/0")
			for i := 1; i <= 5; i++ {
				mustCommit(t, db, &Checkpoint{Task: "t",
					Keys: []KeyWrites{{Stream: stream, Key: []byte("k"), Mark: int64(i),
						Writes: []Write{set("v", fmt.Sprintf("MARKER-%d-%s", i, strings.Repeat("x", 64)))}}},
					Positions: []StreamPosition{{stream, Position{Next: int64(i + 1), Horizon: int64(i)}}}})
			}
			killed := filepath.Join(t.TempDir(), "state")
			copyDir(t, dir, killed)

			// Flip a byte of the third checkpoint's value in the memtable's log.
			logs, _ := filepath.Glob(filepath.Join(killed, "*.mem"))
			damaged := false
			for _, l := range logs {
				b, err := os.ReadFile(l)
				if err != nil {
					t.Fatal(err)
				}
				if i := bytes.Index(b, []byte("MARKER-3-")); i >= 0 {
					f, err := os.OpenFile(l, os.O_WRONLY, 0)
					if err == nil {
						_, err = f.WriteAt([]byte{b[i+9] ^ 0xff}, int64(i+9))
						err = errors.Join(err, f.Close())
					}
					if err != nil {
						t.Fatal(err)
					}
					damaged = true
				}
			}
			if !damaged {
				t.Fatalf("the third checkpoint's value is in none of %v", logs)
			}

			var logged bytes.Buffer
			got, err := Open(killed, Options{ReadOnly: ro, Logger: slog.New(slog.NewTextHandler(&logged, nil))})
			if err != nil {
				t.Fatalf("Open of the damaged store: %v", err)
			}
			r, ok := got.Rollback()
			if !ok || r.Stored != 2 || r.Journaled != 5 || r.Lost() != 3 {
				t.Errorf("Rollback() = %+v, %v; want checkpoint 2 stored, 5 journaled", r, ok)
			}
			if time.Since(r.JournaledAt) > time.Hour || r.JournaledAt.After(time.Now()) {
				t.Errorf("JournaledAt = %v, want the time of the last commit", r.JournaledAt)
			}
			if v := getString(t, got, "t", stream, "k", "v"); !strings.HasPrefix(v, "MARKER-2-") {
				t.Errorf("value after the damage = %.10q, want the second checkpoint's", v)
			}
			for _, want := range []string{"lost its last 3 committed checkpoints", "holds checkpoint 2", "checkpoint 5 was committed", "t file:in/0 at 3"} {
				if !strings.Contains(logged.String(), want) {
					t.Errorf("the log does not say %q:\n%s", want, logged.String())
				}
			}
			mustClose(t, got)

			// A writable open resumed from checkpoint 2 and rewrote the journal: quiet from
			// then on. A read-only open changed nothing and tells again.
			again, err := Open(killed, Options{ReadOnly: ro})
			if err != nil {
				t.Fatal(err)
			}
			defer again.Close()
			if _, ok := again.Rollback(); ok == !ro {
				t.Errorf("second open (read-only=%v): Rollback reported = %v", ro, ok)
			}
		})
	}
}

// A kill between Badger's commit and the journal's rename leaves the journal one behind: that
// is no loss, and Open says nothing.
func TestJournalBehindStoreIsQuiet(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "state")
	db := openTestDBAt(t, dir, Options{})
	stream := mustStreamID(t, db, "t", "s")
	for i := 1; i <= 3; i++ {
		mustCommit(t, db, &Checkpoint{Task: "t", Positions: []StreamPosition{{stream, Position{Next: int64(i), Horizon: int64(i - 1)}}}})
	}
	mustClose(t, db)
	if err := writeJournal(dir, 2, time.Now()); err != nil {
		t.Fatal(err)
	}
	again := openTestDBAt(t, dir, Options{})
	if r, ok := again.Rollback(); ok {
		t.Errorf("Rollback() = %+v after a journal one behind", r)
	}
	j, ok, err := readJournal(dir)
	if err != nil || !ok || j.seq != 3 {
		t.Errorf("journal after the open = %+v, %v, %v; want checkpoint 3", j, ok, err)
	}
}

// A journal that is not one is damage too, named as such.
func TestJournalGarbled(t *testing.T) {
	dir, _ := filledStore(t, 3)
	if err := os.WriteFile(filepath.Join(dir, JournalFile), []byte("garbage\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	wantCorrupt(t, dir, JournalFile)
}
