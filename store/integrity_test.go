package store

import (
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// filledStore writes n keys into a new on-disk store, closes it and returns its directory.
func filledStore(t *testing.T, n int) (dir string, stream uint32) {
	t.Helper()
	dir = filepath.Join(t.TempDir(), "state")
	db := openTestDBAt(t, dir, Options{})
	stream = mustStreamID(t, db, "t", "s")
	cp := &Checkpoint{Task: "t", Positions: []StreamPosition{{stream, Position{Next: int64(n), Horizon: int64(n - 1)}}}}
	for i := range n {
		cp.Keys = append(cp.Keys, KeyWrites{Stream: stream, Key: fmt.Appendf(nil, "key%05d", i), Mark: int64(i),
			Writes: []Write{set("count", strings.Repeat("v", 40))}})
	}
	mustCommit(t, db, cp)
	mustClose(t, db)
	return dir, stream
}

func tableFiles(t *testing.T, dir string) []string {
	t.Helper()
	paths, _ := filepath.Glob(filepath.Join(dir, "*.sst"))
	if len(paths) == 0 {
		t.Fatal("no table files")
	}
	return paths
}

// wantCorrupt checks that both kinds of Open fail with ErrCorrupt naming want.
func wantCorrupt(t *testing.T, dir, want string) {
	t.Helper()
	for _, ro := range []bool{true, false} {
		db, err := Open(dir, Options{ReadOnly: ro})
		if err == nil {
			db.Close()
		}
		if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), want) {
			t.Errorf("Open(ReadOnly=%v) = %v, want ErrCorrupt naming %s", ro, err, want)
		}
	}
}

func TestOpenCorruptTable(t *testing.T) {
	dir, _ := filledStore(t, 2000)
	sst := tableFiles(t, dir)[0]
	b, err := os.ReadFile(sst)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 4 {
		b[len(b)/3+i] ^= 0x5a
	}
	if err := os.WriteFile(sst, b, 0o644); err != nil {
		t.Fatal(err)
	}
	wantCorrupt(t, dir, sst)
}

func TestOpenTruncatedTable(t *testing.T) {
	for _, keep := range []float64{0, 0.5, 0.99} {
		t.Run(fmt.Sprint(keep), func(t *testing.T) {
			dir, _ := filledStore(t, 2000)
			sst := tableFiles(t, dir)[0]
			st, err := os.Stat(sst)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.Truncate(sst, int64(float64(st.Size())*keep)); err != nil {
				t.Fatal(err)
			}
			wantCorrupt(t, dir, sst)
		})
	}
}

func TestOpenMissingTable(t *testing.T) {
	dir, _ := filledStore(t, 100)
	sst := tableFiles(t, dir)[0]
	if err := os.Remove(sst); err != nil {
		t.Fatal(err)
	}
	wantCorrupt(t, dir, sst)
}

func TestOpenLostManifest(t *testing.T) {
	dir, _ := filledStore(t, 100)
	manifest := filepath.Join(dir, "MANIFEST")
	if err := os.Remove(manifest); err != nil {
		t.Fatal(err)
	}
	wantCorrupt(t, dir, manifest)
	if len(tableFiles(t, dir)) == 0 {
		t.Error("the tables were deleted")
	}
}

// TestOpenMarkedButEmpty replaces a store's Badger files by an empty database: the marker
// says it had data, so Open refuses it instead of starting from nothing.
func TestOpenMarkedButEmpty(t *testing.T) {
	dir, _ := filledStore(t, 10)
	if _, err := os.Stat(filepath.Join(dir, MarkerFile)); err != nil {
		t.Fatalf("no marker after the first open: %v", err)
	}
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if e.Name() != MarkerFile {
			os.RemoveAll(filepath.Join(dir, e.Name()))
		}
	}
	wantCorrupt(t, dir, dir)
}

// TestOpenStoreDirectoryGone: the marker inside the directory goes with it, so a store whose
// whole directory was deleted, or emptied of every file, STORE-ID included, is known by the
// marker beside it and refused instead of being started afresh.
func TestOpenStoreDirectoryGone(t *testing.T) {
	t.Run("deleted", func(t *testing.T) {
		dir, _ := filledStore(t, 10)
		if err := os.RemoveAll(dir); err != nil {
			t.Fatal(err)
		}
		wantCorrupt(t, dir, dir)
		if _, err := os.Stat(dir); err == nil {
			t.Error("Open made the directory again")
		}
	})
	t.Run("emptied", func(t *testing.T) {
		dir, _ := filledStore(t, 10)
		entries, _ := os.ReadDir(dir)
		for _, e := range entries {
			os.RemoveAll(filepath.Join(dir, e.Name()))
		}
		wantCorrupt(t, dir, dir)
	})
}

// TestOpenAdoptsUnmarkedStore: a store written before the marker existed opens and gets one.
func TestOpenAdoptsUnmarkedStore(t *testing.T) {
	dir, s := filledStore(t, 10)
	if err := os.Remove(filepath.Join(dir, MarkerFile)); err != nil {
		t.Fatal(err)
	}
	db := openTestDBAt(t, dir, Options{})
	if got := getString(t, db, "t", s, "key00003", "count"); got == "" {
		t.Error("data lost")
	}
	mustClose(t, db)
	if _, err := os.Stat(filepath.Join(dir, MarkerFile)); err != nil {
		t.Errorf("marker not written: %v", err)
	}
}

// TestDiskFull: below MinFreeBytes, Open for writing and Commit return ErrDiskFull naming the
// directory, and the failed Commit wrote nothing.
func TestDiskFull(t *testing.T) {
	dir, s := filledStore(t, 10)
	free := int64(math.MaxInt64)
	defer func(f func(string) (int64, error)) { freeBytes = f }(freeBytes)
	freeBytes = func(string) (int64, error) { return free, nil }

	db := openTestDBAt(t, dir, Options{})
	free = 1 << 20
	err := db.Commit(&Checkpoint{Task: "t",
		Keys:      []KeyWrites{{Stream: s, Key: []byte("new"), Mark: 10, Writes: []Write{set("count", "1")}}},
		Positions: []StreamPosition{{s, Position{Next: 11, Horizon: 10}}},
	})
	if !errors.Is(err, ErrDiskFull) || !strings.Contains(err.Error(), dir) {
		t.Errorf("Commit on a full disk = %v, want ErrDiskFull naming %s", err, dir)
	}
	if p, _, _ := db.Position("t", s); p.Next != 10 {
		t.Errorf("position after the refused commit = %+v, want Next 10", p)
	}
	free = math.MaxInt64
	mustClose(t, db)
	free = 1 << 20

	if db, err := Open(dir, Options{}); !errors.Is(err, ErrDiskFull) {
		if err == nil {
			db.Close()
		}
		t.Errorf("Open on a full disk = %v, want ErrDiskFull", err)
	}
	r := openTestDBAt(t, dir, Options{ReadOnly: true}) // reading needs no space
	mustClose(t, r)
	db = openTestDBAt(t, dir, Options{MinFreeBytes: -1}) // the check is off
	mustClose(t, db)
}

// TestOpenManifestLostItsEnd cuts the MANIFEST inside its last record, which reads as the torn
// tail of a crash: the table it listed becomes one the MANIFEST does not list. Badger would
// delete it and open an empty store; Open moves it aside and refuses the marked store.
func TestOpenManifestLostItsEnd(t *testing.T) {
	dir, _ := filledStore(t, 100)
	sst := tableFiles(t, dir)[0]
	manifest := filepath.Join(dir, "MANIFEST")
	b, err := os.ReadFile(manifest)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(manifest, b[:len(b)-1], 0o644); err != nil {
		t.Fatal(err)
	}
	wantCorrupt(t, dir, MarkerFile)
	if kept, _ := filepath.Glob(filepath.Join(dir, orphanDir, "*", filepath.Base(sst))); len(kept) == 0 {
		t.Errorf("the unlisted table %s was not kept", filepath.Base(sst))
	}
}

// TestOpenKeepsNewestUnlistedTables: every Open that finds tables the MANIFEST does not list (a
// kill while Badger wrote one) moves them into a set of their own, and only the newest
// keepOrphanGens sets stay, so that a host killed again and again does not fill its disk.
func TestOpenKeepsNewestUnlistedTables(t *testing.T) {
	dir, stream := filledStore(t, 100)
	table, err := os.ReadFile(tableFiles(t, dir)[0])
	if err != nil {
		t.Fatal(err)
	}
	const opens = keepOrphanGens + 3
	for i := 1; i <= opens; i++ {
		// A whole table under a name the MANIFEST does not list, as a kill leaves one.
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("%06d.sst", 9000+i)), table, 0o644); err != nil {
			t.Fatal(err)
		}
		db, err := Open(dir, Options{ReadOnly: i%2 == 0})
		if err != nil {
			t.Fatalf("open %d: %v", i, err)
		}
		if got := getString(t, db, "t", stream, "key00042", "count"); got != strings.Repeat("v", 40) {
			t.Errorf("open %d: key00042 = %q, want its value", i, got)
		}
		mustClose(t, db)
	}
	gens, err := os.ReadDir(filepath.Join(dir, orphanDir))
	if err != nil {
		t.Fatal(err)
	}
	if len(gens) != keepOrphanGens {
		t.Fatalf("%d sets of moved tables after %d opens, want the newest %d", len(gens), opens, keepOrphanGens)
	}
	for j, g := range gens { // sorted by name, that is by time
		want := fmt.Sprintf("%06d.sst", 9000+opens-keepOrphanGens+1+j)
		if _, err := os.Stat(filepath.Join(dir, orphanDir, g.Name(), want)); err != nil {
			t.Errorf("set %d (%s) does not hold %s: %v", j, g.Name(), want, err)
		}
	}
}

// TestCloseOnFullDisk: with less than a memtable free, Close leaves Badger open (its flush
// would die of SIGBUS) and says so.
func TestCloseOnFullDisk(t *testing.T) {
	dir, _ := filledStore(t, 10)
	defer func(f func(string) (int64, error)) { freeBytes = f }(freeBytes)
	db, err := Open(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	freeBytes = func(string) (int64, error) { return 1 << 20, nil }
	if err := db.Close(); !errors.Is(err, ErrDiskFull) || !strings.Contains(err.Error(), dir) {
		t.Errorf("Close on a full disk = %v, want ErrDiskFull naming %s", err, dir)
	}
	if err := db.Close(); err != nil {
		t.Errorf("second Close = %v, want nil", err)
	}
}

// TestOpenCorruptTableAnywhere flips 4 bytes at 32 places across a table, header to footer:
// each time Open fails with ErrCorrupt naming the table, and never panics.
func TestOpenCorruptTableAnywhere(t *testing.T) {
	dir, _ := filledStore(t, 2000)
	sst := tableFiles(t, dir)[0]
	orig, err := os.ReadFile(sst)
	if err != nil {
		t.Fatal(err)
	}
	const places = 32
	for k := range places {
		at := min(len(orig)*k/places, len(orig)-4)
		if k == places-1 {
			at = len(orig) - 4
		}
		b := append([]byte(nil), orig...)
		for i := range 4 {
			b[at+i] ^= 0x5a
		}
		if err := os.WriteFile(sst, b, 0o644); err != nil {
			t.Fatal(err)
		}
		db, err := Open(dir, Options{ReadOnly: true})
		if err == nil {
			db.Close()
		}
		if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), sst) {
			t.Errorf("4 bytes flipped at %d of %d: Open = %v, want ErrCorrupt naming the table", at, len(orig), err)
		}
	}
}

// A SIGKILL between Badger creating a log file (a memtable's write-ahead log or
// a value log) and sizing it leaves the file empty. Badger then refuses to open
// the store ("Create a new file") although nothing is lost: the file never held
// a byte. Open removes such files, for both kinds of open.
func TestOpenEmptyLogFileLeftByCrash(t *testing.T) {
	// Badger's names: a memtable's log is %05d.mem, a value log %06d.vlog.
	for _, ext := range []string{"00099.mem", "000099.vlog"} {
		for _, ro := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/read-only=%v", ext, ro), func(t *testing.T) {
				dir, stream := filledStore(t, 100)
				empty := filepath.Join(dir, ext)
				if err := os.WriteFile(empty, nil, 0o644); err != nil {
					t.Fatal(err)
				}
				db, err := Open(dir, Options{ReadOnly: ro})
				if err != nil {
					t.Fatalf("Open with an empty %s file: %v", ext, err)
				}
				defer db.Close()
				if got := getString(t, db, "t", stream, "key00042", "count"); got != strings.Repeat("v", 40) {
					t.Errorf("key00042 = %q after the reopen, want its value", got)
				}
				if _, err := os.Stat(empty); !errors.Is(err, fs.ErrNotExist) && !ro {
					t.Errorf("the empty %s is still there (stat: %v)", empty, err)
				}
			})
		}
	}
}
