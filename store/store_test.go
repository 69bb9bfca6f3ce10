package store

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"math"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/dgraph-io/badger/v4"
)

func TestCommitGetDelete(t *testing.T) {
	db := openTestDB(t, Options{})
	s := mustStreamID(t, db, "wc", "file:in/0")
	mustCommit(t, db, &Checkpoint{Task: "wc", Keys: []KeyWrites{
		{Stream: s, Key: []byte("a"), Mark: 3, Writes: []Write{set("count", "1"), set("sum", "10"), set("", "empty name")}},
		{Stream: s, Key: []byte("ab"), Mark: 4, Writes: []Write{set("count", "2")}},
		{Stream: s, Key: []byte{}, Mark: 5, Writes: []Write{set("count", "empty key"), set("x", "")}},
		{Stream: s, Key: []byte("last"), Mark: 6, Writes: []Write{set("n", "first"), set("n", "second")}},
	}})
	mustCommit(t, db, &Checkpoint{Task: "wc", Keys: []KeyWrites{
		{Stream: s, Key: []byte("a"), Mark: 7, Writes: []Write{del("sum"), set("count", "3")}},
		{Stream: s, Key: []byte("ab"), Mark: 8, Writes: []Write{del("missing")}},
	}})

	tests := []struct {
		key, name, want string
	}{
		{"a", "count", "3"},
		{"a", "sum", "<none>"},
		{"a", "", "empty name"},
		{"ab", "count", "2"},
		{"ab", "missing", "<none>"},
		{"", "count", "empty key"},
		{"", "x", ""},
		{"last", "n", "second"},
		{"abc", "count", "<none>"},
	}
	for _, tt := range tests {
		if got := getString(t, db, "wc", s, tt.key, tt.name); got != tt.want {
			t.Errorf("Get(%q, %q) = %q, want %q", tt.key, tt.name, got, tt.want)
		}
	}
	// An empty value is present and non-nil.
	if v, ok, err := db.Get("wc", s, nil, []byte("x")); err != nil || !ok || v == nil || len(v) != 0 {
		t.Errorf("Get of empty value = %q, %v, %v; want non-nil empty, true, nil", v, ok, err)
	}
	// Get returns a copy: modifying it does not change the store.
	v, _, _ := db.Get("wc", s, []byte("a"), []byte("count"))
	v[0] = 'X'
	if got := getString(t, db, "wc", s, "a", "count"); got != "3" {
		t.Errorf("after modifying Get's result, Get = %q, want 3", got)
	}
	// Other streams and tasks see nothing.
	s2 := mustStreamID(t, db, "wc", "file:in/1")
	if got := getString(t, db, "wc", s2, "a", "count"); got != "<none>" {
		t.Errorf("other stream: Get = %q, want <none>", got)
	}
	if got := getString(t, db, "other", s, "a", "count"); got != "<none>" {
		t.Errorf("other task: Get = %q, want <none>", got)
	}
}

func TestScan(t *testing.T) {
	db := openTestDB(t, Options{})
	s := mustStreamID(t, db, "t", "s")
	names := []string{"", "a", "a\x00", "ab", "abc", "b", "ba", "b\xff", "c"} // bytewise order
	var writes []Write
	for _, n := range names {
		writes = append(writes, set(n, "v"+n))
	}
	mustCommit(t, db, &Checkpoint{Task: "t", Keys: []KeyWrites{
		{Stream: s, Key: []byte("k"), Mark: 1, Writes: writes},
		// Neighbouring keys must not leak into the scan of "k".
		{Stream: s, Key: []byte("k\x00"), Mark: 1, Writes: []Write{set("a", "leak")}},
		{Stream: s, Key: []byte("kk"), Mark: 1, Writes: []Write{set("a", "leak")}},
		{Stream: s, Key: []byte(""), Mark: 1, Writes: []Write{set("ka", "leak")}},
	}})

	tests := []struct {
		name          string
		prefix, after []byte
		limit         int // stop after this many (0: all)
		want          []string
	}{
		{name: "all", want: names},
		{name: "prefix a", prefix: []byte("a"), want: []string{"a", "a\x00", "ab", "abc"}},
		{name: "prefix ab", prefix: []byte("ab"), want: []string{"ab", "abc"}},
		{name: "prefix none", prefix: []byte("z"), want: nil},
		{name: "after empty name", after: []byte{}, want: names[1:]},
		{name: "after a", after: []byte("a"), want: names[2:]},
		{name: "after absent name", after: []byte("aa"), want: []string{"ab", "abc", "b", "ba", "b\xff", "c"}},
		{name: "after last", after: []byte("c"), want: nil},
		{name: "prefix a after a", prefix: []byte("a"), after: []byte("a"), want: []string{"a\x00", "ab", "abc"}},
		{name: "prefix b after a (after below prefix)", prefix: []byte("b"), after: []byte("a"), want: []string{"b", "ba", "b\xff"}},
		{name: "prefix a after b (after beyond prefix)", prefix: []byte("a"), after: []byte("b"), want: nil},
		{name: "limit 2", limit: 2, want: names[:2]},
		{name: "prefix a limit 1", prefix: []byte("a"), limit: 1, want: []string{"a"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got []string
			err := db.Scan("t", s, []byte("k"), tt.prefix, tt.after, func(name, val []byte) bool {
				if string(val) != "v"+string(name) {
					t.Errorf("name %q has value %q", name, val)
				}
				got = append(got, string(name))
				return tt.limit == 0 || len(got) < tt.limit
			})
			if err != nil {
				t.Fatalf("Scan: %v", err)
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("Scan = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestScanKeys(t *testing.T) {
	db := openTestDB(t, Options{})
	s := mustStreamID(t, db, "t", "s")
	other := mustStreamID(t, db, "t", "other")
	keys := []string{"", "a", "ab", "abc", "b", "ba"}
	var kws []KeyWrites
	for _, k := range keys {
		kws = append(kws, KeyWrites{Stream: s, Key: []byte(k), Mark: 1, Writes: []Write{set("n1", k+"1"), set("n2", k+"2")}})
	}
	kws = append(kws, KeyWrites{Stream: other, Key: []byte("a"), Mark: 1, Writes: []Write{set("n1", "leak")}})
	mustCommit(t, db, &Checkpoint{Task: "t", Keys: kws})

	tests := []struct {
		name   string
		prefix []byte
		limit  int
		want   []string // key/name=value; order is key length, key, name
	}{
		{name: "all", want: []string{"/n1=1", "/n2=2", "a/n1=a1", "a/n2=a2", "b/n1=b1", "b/n2=b2",
			"ab/n1=ab1", "ab/n2=ab2", "ba/n1=ba1", "ba/n2=ba2", "abc/n1=abc1", "abc/n2=abc2"}},
		{name: "prefix a", prefix: []byte("a"), want: []string{"a/n1=a1", "a/n2=a2", "ab/n1=ab1", "ab/n2=ab2", "abc/n1=abc1", "abc/n2=abc2"}},
		{name: "prefix b", prefix: []byte("b"), want: []string{"b/n1=b1", "b/n2=b2", "ba/n1=ba1", "ba/n2=ba2"}},
		{name: "prefix z", prefix: []byte("z"), want: nil},
		{name: "limit 3", limit: 3, want: []string{"/n1=1", "/n2=2", "a/n1=a1"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got []string
			err := db.ScanKeys("t", s, tt.prefix, func(key, name, val []byte) bool {
				got = append(got, fmt.Sprintf("%s/%s=%s", key, name, val))
				return tt.limit == 0 || len(got) < tt.limit
			})
			if err != nil {
				t.Fatalf("ScanKeys: %v", err)
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("ScanKeys = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestMarks(t *testing.T) {
	db := openTestDB(t, Options{})
	s := mustStreamID(t, db, "t", "s")
	mustCommit(t, db, &Checkpoint{Task: "t", Keys: []KeyWrites{
		{Stream: s, Key: []byte("a"), Mark: 10},
		{Stream: s, Key: []byte("ab"), Mark: 0},
		{Stream: s, Key: []byte{}, Mark: 1 << 40},
		{Stream: s, Key: []byte("gone"), Mark: 3},
	}})
	mustCommit(t, db, &Checkpoint{Task: "t", Keys: []KeyWrites{
		{Stream: s, Key: []byte("a"), Mark: 12},
		{Stream: s, Key: []byte("gone"), Mark: DropMark},
		{Stream: s, Key: []byte("never"), Mark: DropMark}, // dropping an absent mark is fine
	}})
	tests := []struct {
		key  string
		want int64
		ok   bool
	}{
		{"a", 12, true},
		{"ab", 0, true},
		{"", 1 << 40, true},
		{"gone", 0, false},
		{"never", 0, false},
		{"abc", 0, false},
	}
	for _, tt := range tests {
		got, ok, err := db.Mark("t", s, []byte(tt.key))
		if err != nil || got != tt.want || ok != tt.ok {
			t.Errorf("Mark(%q) = %d, %v, %v; want %d, %v, nil", tt.key, got, ok, err, tt.want, tt.ok)
		}
	}
	var got []string
	err := db.Marks("t", s, func(key []byte, mark int64) bool {
		got = append(got, fmt.Sprintf("%s=%d", key, mark))
		return true
	})
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"=1099511627776", "a=12", "ab=0"}; !slices.Equal(got, want) {
		t.Errorf("Marks = %q, want %q", got, want)
	}
}

func TestPositions(t *testing.T) {
	db := openTestDB(t, Options{})
	s1 := mustStreamID(t, db, "t", "kafka:orders/0")
	s2 := mustStreamID(t, db, "t", "kafka:orders/1")
	if _, ok, err := db.Position("t", s1); ok || err != nil {
		t.Fatalf("Position before commit = _, %v, %v; want false, nil", ok, err)
	}
	p1 := Position{Next: 0, Horizon: -1, Resume: 0}
	p2 := Position{Next: 1 << 50, Horizon: 1<<50 + 7, Resume: -5}
	mustCommit(t, db, &Checkpoint{Task: "t", Positions: []StreamPosition{{s1, p1}, {s2, p2}}})
	for _, tt := range []struct {
		s    uint32
		want Position
	}{{s1, p1}, {s2, p2}} {
		got, ok, err := db.Position("t", tt.s)
		if err != nil || !ok || got != tt.want {
			t.Errorf("Position(%d) = %+v, %v, %v; want %+v, true, nil", tt.s, got, ok, err, tt.want)
		}
	}
	p1b := Position{Next: 5, Horizon: 9, Resume: 123}
	mustCommit(t, db, &Checkpoint{Task: "t", Positions: []StreamPosition{{s1, p1b}}})
	if got, _, _ := db.Position("t", s1); got != p1b {
		t.Errorf("Position after update = %+v, want %+v", got, p1b)
	}
	if got, _, _ := db.Position("t", s2); got != p2 {
		t.Errorf("untouched Position = %+v, want %+v", got, p2)
	}
}

func TestStreamIDsStableAcrossReopen(t *testing.T) {
	dir := t.TempDir()
	db := openTestDBAt(t, dir, Options{})
	ids := map[[2]string]uint32{}
	for _, ts := range [][2]string{
		{"wc", "file:in/0"}, {"wc", "file:in/1"}, {"agg", "kafka:orders/3"}, {"wc", "kafka:orders/3"}, {"agg", "file:in/0"},
	} {
		ids[ts] = mustStreamID(t, db, ts[0], ts[1])
	}
	want := map[[2]string]uint32{
		{"wc", "file:in/0"}: 1, {"wc", "file:in/1"}: 2, {"wc", "kafka:orders/3"}: 3,
		{"agg", "kafka:orders/3"}: 1, {"agg", "file:in/0"}: 2,
	}
	for ts, id := range want {
		if ids[ts] != id {
			t.Errorf("first StreamID%v = %d, want %d (monotonic per task from 1)", ts, ids[ts], id)
		}
	}
	if again := mustStreamID(t, db, "wc", "file:in/1"); again != 2 {
		t.Errorf("repeated StreamID = %d, want 2", again)
	}
	mustClose(t, db)

	db = openTestDBAt(t, dir, Options{})
	for ts, id := range want {
		if got := mustStreamID(t, db, ts[0], ts[1]); got != id {
			t.Errorf("after reopen StreamID%v = %d, want %d", ts, got, id)
		}
	}
	if got := mustStreamID(t, db, "wc", "file:in/2"); got != 4 {
		t.Errorf("new stream after reopen = %d, want 4", got)
	}
	streams, err := db.Streams("wc")
	if err != nil {
		t.Fatal(err)
	}
	wantStreams := []StreamInfo{{1, "file:in/0"}, {2, "file:in/1"}, {3, "kafka:orders/3"}, {4, "file:in/2"}}
	if !slices.Equal(streams, wantStreams) {
		t.Errorf("Streams = %v, want %v", streams, wantStreams)
	}
	tasks, err := db.Tasks()
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"agg", "wc"}; !slices.Equal(tasks, want) {
		t.Errorf("Tasks = %q, want %q", tasks, want)
	}
	if s, err := db.Streams("nosuch"); err != nil || len(s) != 0 {
		t.Errorf("Streams(nosuch) = %v, %v; want empty", s, err)
	}
}

func TestStreamIDConcurrent(t *testing.T) {
	db := openTestDB(t, Options{})
	const n = 8
	got := make(chan uint32, 2*n)
	errs := make(chan error, 2*n)
	for i := range 2 * n {
		go func() {
			id, err := db.StreamID("t", fmt.Sprintf("s/%d", i%n)) // each name twice
			errs <- err
			got <- id
		}()
	}
	seen := map[uint32]int{}
	for range 2 * n {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
		seen[<-got]++
	}
	if len(seen) != n {
		t.Errorf("%d distinct IDs for %d names: %v", len(seen), n, seen)
	}
	for id, c := range seen {
		if id < 1 || id > n || c != 2 {
			t.Errorf("ID %d returned %d times; want IDs 1..%d each twice", id, c, n)
		}
	}
}

func TestDataSurvivesReopen(t *testing.T) {
	dir := t.TempDir()
	db := openTestDBAt(t, dir, Options{SyncWrites: true})
	s := mustStreamID(t, db, "t", "s")
	mustCommit(t, db, &Checkpoint{Task: "t",
		Keys:      []KeyWrites{{Stream: s, Key: []byte("k"), Mark: 4, Writes: []Write{set("n", "v")}}},
		Positions: []StreamPosition{{s, Position{Next: 3, Horizon: 4, Resume: 99}}},
	})
	mustClose(t, db)
	db = openTestDBAt(t, dir, Options{})
	if got := getString(t, db, "t", s, "k", "n"); got != "v" {
		t.Errorf("after reopen Get = %q, want v", got)
	}
	if m, ok, _ := db.Mark("t", s, []byte("k")); !ok || m != 4 {
		t.Errorf("after reopen Mark = %d, %v; want 4, true", m, ok)
	}
	if p, ok, _ := db.Position("t", s); !ok || p != (Position{Next: 3, Horizon: 4, Resume: 99}) {
		t.Errorf("after reopen Position = %+v, %v", p, ok)
	}
}

func TestFormatVersion(t *testing.T) {
	dir := t.TempDir()
	db := openTestDBAt(t, dir, Options{})
	mustClose(t, db)

	// Rewrite the version as a newer one, with Badger directly.
	bdb, err := badger.Open(badger.DefaultOptions(dir).WithLogger(nil))
	if err != nil {
		t.Fatal(err)
	}
	var version uint32
	err = bdb.Update(func(txn *badger.Txn) error {
		item, err := txn.Get(versionKey)
		if err != nil {
			return err
		}
		if err := item.Value(func(v []byte) error { version = binary.BigEndian.Uint32(v); return nil }); err != nil {
			return err
		}
		return txn.Set(versionKey, binary.BigEndian.AppendUint32(nil, FormatVersion+1))
	})
	if closeErr := bdb.Close(); err == nil {
		err = closeErr
	}
	if err != nil {
		t.Fatal(err)
	}
	if version != FormatVersion {
		t.Errorf("stored version = %d, want FormatVersion %d", version, FormatVersion)
	}
	for _, ro := range []bool{false, true} {
		if db, err := Open(dir, Options{ReadOnly: ro}); !errors.Is(err, ErrFormatTooNew) {
			if err == nil {
				db.Close()
			}
			t.Errorf("Open(ReadOnly=%v) of a newer format: error = %v, want ErrFormatTooNew", ro, err)
		}
	}
}

func TestOpenNotStore(t *testing.T) {
	dir := t.TempDir()
	bdb, err := badger.Open(badger.DefaultOptions(dir).WithLogger(nil))
	if err != nil {
		t.Fatal(err)
	}
	err = bdb.Update(func(txn *badger.Txn) error { return txn.Set([]byte("foreign"), []byte("x")) })
	if closeErr := bdb.Close(); err == nil {
		err = closeErr
	}
	if err != nil {
		t.Fatal(err)
	}
	if db, err := Open(dir, Options{}); !errors.Is(err, ErrNotStore) {
		if err == nil {
			db.Close()
		}
		t.Errorf("Open of a foreign Badger DB: error = %v, want ErrNotStore", err)
	}
}

func TestReadOnly(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "state") // Open creates it
	db := openTestDBAt(t, dir, Options{})
	s := mustStreamID(t, db, "t", "s")
	mustCommit(t, db, &Checkpoint{Task: "t",
		Keys:      []KeyWrites{{Stream: s, Key: []byte("k"), Mark: 1, Writes: []Write{set("n", "v")}}},
		Positions: []StreamPosition{{s, Position{Next: 2, Horizon: 1}}},
	})

	// While the writer has it open, a reader is refused with ErrLocked, and
	// so is a second writer.
	for _, ro := range []bool{true, false} {
		if db2, err := Open(dir, Options{ReadOnly: ro}); !errors.Is(err, ErrLocked) {
			if err == nil {
				db2.Close()
			}
			t.Errorf("Open(ReadOnly=%v) while open: error = %v, want ErrLocked", ro, err)
		}
	}
	mustClose(t, db)

	// Two readers may share a closed store.
	r1 := openTestDBAt(t, dir, Options{ReadOnly: true})
	r2 := openTestDBAt(t, dir, Options{ReadOnly: true})
	for _, r := range []*DB{r1, r2} {
		if got := getString(t, r, "t", s, "k", "n"); got != "v" {
			t.Errorf("read-only Get = %q, want v", got)
		}
		if p, ok, err := r.Position("t", s); err != nil || !ok || p.Next != 2 {
			t.Errorf("read-only Position = %+v, %v, %v", p, ok, err)
		}
		if id, err := r.StreamID("t", "s"); err != nil || id != s {
			t.Errorf("read-only StreamID of an existing stream = %d, %v; want %d, nil", id, err, s)
		}
	}
	if err := r1.Commit(&Checkpoint{Task: "t", Positions: []StreamPosition{{s, Position{}}}}); !errors.Is(err, ErrReadOnly) {
		t.Errorf("read-only Commit error = %v, want ErrReadOnly", err)
	}
	if _, err := r1.StreamID("t", "new"); !errors.Is(err, ErrReadOnly) {
		t.Errorf("read-only StreamID of a new stream: error = %v, want ErrReadOnly", err)
	}
	// A writer is refused while readers hold it.
	if db2, err := Open(dir, Options{}); !errors.Is(err, ErrLocked) {
		if err == nil {
			db2.Close()
		}
		t.Errorf("Open for writing while readers hold it: error = %v, want ErrLocked", err)
	}

	if _, err := Open(filepath.Join(t.TempDir(), "missing"), Options{ReadOnly: true}); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("read-only Open of a missing dir: error = %v, want fs.ErrNotExist", err)
	}
}

func TestClosed(t *testing.T) {
	db := openTestDB(t, Options{InMemory: true})
	s := mustStreamID(t, db, "t", "s")
	mustClose(t, db)
	if err := db.Close(); err != nil {
		t.Errorf("second Close = %v, want nil", err)
	}
	calls := map[string]error{
		"Get":      func() error { _, _, err := db.Get("t", s, nil, nil); return err }(),
		"Scan":     db.Scan("t", s, nil, nil, nil, func(_, _ []byte) bool { return true }),
		"ScanKeys": db.ScanKeys("t", s, nil, func(_, _, _ []byte) bool { return true }),
		"Marks":    db.Marks("t", s, func([]byte, int64) bool { return true }),
		"Mark":     func() error { _, _, err := db.Mark("t", s, nil); return err }(),
		"Position": func() error { _, _, err := db.Position("t", s); return err }(),
		"StreamID": func() error { _, err := db.StreamID("t", "s"); return err }(),
		"Streams":  func() error { _, err := db.Streams("t"); return err }(),
		"Tasks":    func() error { _, err := db.Tasks(); return err }(),
		"Commit":   db.Commit(&Checkpoint{Task: "t"}),
	}
	for name, err := range calls {
		if !errors.Is(err, ErrClosed) {
			t.Errorf("%s after Close: error = %v, want ErrClosed", name, err)
		}
	}
}

func TestInvalidNames(t *testing.T) {
	db := openTestDB(t, Options{InMemory: true})
	long := strings.Repeat("x", MaxTaskLen+1)
	tests := []struct {
		name string
		call func() error
	}{
		{"StreamID empty task", func() error { _, err := db.StreamID("", "s"); return err }},
		{"StreamID long task", func() error { _, err := db.StreamID(long, "s"); return err }},
		{"StreamID empty stream", func() error { _, err := db.StreamID("t", ""); return err }},
		{"StreamID long stream", func() error {
			_, err := db.StreamID("t", strings.Repeat("s", MaxStreamNameLen+1))
			return err
		}},
		{"Get empty task", func() error { _, _, err := db.Get("", 1, nil, nil); return err }},
		{"Commit empty task", func() error { return db.Commit(&Checkpoint{}) }},
		{"Streams long task", func() error { _, err := db.Streams(long); return err }},
	}
	for _, tt := range tests {
		if err := tt.call(); !errors.Is(err, ErrInvalidName) {
			t.Errorf("%s: error = %v, want ErrInvalidName", tt.name, err)
		}
	}
	// The limits themselves are accepted.
	if _, err := db.StreamID(long[1:], strings.Repeat("s", MaxStreamNameLen)); err != nil {
		t.Errorf("StreamID at the name limits: %v", err)
	}
}

func TestOptionsValidate(t *testing.T) {
	tests := []struct {
		name  string
		opts  Options
		nerrs int
	}{
		{name: "zero", opts: Options{}, nerrs: 0},
		{name: "in memory read-only", opts: Options{InMemory: true, ReadOnly: true}, nerrs: 1},
		{name: "all bad", opts: Options{InMemory: true, ReadOnly: true, MaxTxnBytes: -1, MaxTxnEntries: -1,
			MemTableSize: 1000, BlockCacheSize: -1}, nerrs: 5},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.opts.Validate()
			var n int
			if err != nil {
				n = len(err.(interface{ Unwrap() []error }).Unwrap())
				if !errors.Is(err, ErrInvalidOptions) {
					t.Errorf("error %v does not wrap ErrInvalidOptions", err)
				}
			}
			if n != tt.nerrs {
				t.Errorf("Validate reported %d problems (%v), want %d", n, err, tt.nerrs)
			}
		})
	}
	if _, err := Open("", Options{}); !errors.Is(err, ErrInvalidOptions) {
		t.Errorf("Open with no dir and not InMemory: error = %v, want ErrInvalidOptions", err)
	}
	if _, err := Open(t.TempDir(), Options{InMemory: true}); !errors.Is(err, ErrInvalidOptions) {
		t.Errorf("Open with a dir and InMemory: error = %v, want ErrInvalidOptions", err)
	}
}

func TestLogger(t *testing.T) {
	var buf bytes.Buffer
	logger := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	db := openTestDB(t, Options{Logger: logger})
	mustStreamID(t, db, "t", "s")
	mustClose(t, db)
	// Badger reports its lifecycle at Info, which the adapter lowers to Debug.
	if !strings.Contains(buf.String(), "component=badger") || !strings.Contains(buf.String(), "level=DEBUG") {
		t.Errorf("Badger's messages were not forwarded at debug level:\n%s", buf.String())
	}
	if strings.Contains(buf.String(), "level=INFO") {
		t.Errorf("Badger chatter logged at info level:\n%s", buf.String())
	}
}

func TestBadgerLoggerLevels(t *testing.T) {
	tests := []struct {
		name       string
		errorsOnly bool
		want       string // levels logged for Errorf, Warningf, Infof, Debugf
	}{
		{name: "given logger", want: "ERROR WARN DEBUG DEBUG"},
		{name: "default: errors only", errorsOnly: true, want: "ERROR"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var buf bytes.Buffer
			l := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{
				Level: slog.LevelDebug,
				ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
					if a.Key == slog.TimeKey || a.Key == slog.MessageKey || a.Key == "component" {
						return slog.Attr{}
					}
					return a
				},
			}))
			bl := badgerLogger{l: l, errorsOnly: tt.errorsOnly}
			bl.Errorf("e %d\n", 1)
			bl.Warningf("w")
			bl.Infof("i")
			bl.Debugf("d")
			got := strings.Join(strings.Fields(strings.ReplaceAll(buf.String(), "level=", "")), " ")
			if got != tt.want {
				t.Errorf("levels = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestMarkNoneAppliedAndStateVersions(t *testing.T) {
	db := openTestDB(t, Options{})
	s := mustStreamID(t, db, "t", "s")
	mustCommit(t, db, &Checkpoint{Task: "t", Keys: []KeyWrites{
		{Stream: s, Key: []byte("timer-only"), Mark: NoneApplied, StateVersion: 2, Writes: []Write{set("n", "v")}},
		{Stream: s, Key: []byte("v1"), Mark: 7, StateVersion: 1},
		{Stream: s, Key: []byte("v2"), Mark: 8, StateVersion: 2},
		{Stream: s, Key: []byte("v0"), Mark: 9},
		{Stream: s, Key: []byte("max"), Mark: 10, StateVersion: math.MaxUint32},
		{Stream: s, Key: []byte("dropped"), Mark: DropMark, StateVersion: 5}, // the version goes with the mark
	}})
	tests := []struct {
		key     string
		mark    int64
		version uint32
		ok      bool
	}{
		{"timer-only", -1, 2, true},
		{"v1", 7, 1, true},
		{"v2", 8, 2, true},
		{"v0", 9, 0, true},
		{"max", 10, math.MaxUint32, true},
		{"dropped", 0, 0, false},
	}
	for _, tt := range tests {
		mark, version, ok, err := db.MarkInfo("t", s, []byte(tt.key))
		if err != nil || mark != tt.mark || version != tt.version || ok != tt.ok {
			t.Errorf("MarkInfo(%q) = %d, %d, %v, %v; want %d, %d, %v, nil", tt.key, mark, version, ok, err, tt.mark, tt.version, tt.ok)
		}
		if m, ok, err := db.Mark("t", s, []byte(tt.key)); err != nil || m != tt.mark || ok != tt.ok {
			t.Errorf("Mark(%q) = %d, %v, %v; want %d, %v", tt.key, m, ok, err, tt.mark, tt.ok)
		}
	}
	versionsNot := func(v uint32, stopAfter int) []string {
		var got []string
		err := db.KeysWithVersionNot("t", s, v, func(key []byte, version uint32) bool {
			got = append(got, fmt.Sprintf("%s=%d", key, version))
			return stopAfter == 0 || len(got) < stopAfter
		})
		if err != nil {
			t.Fatalf("KeysWithVersionNot(%d): %v", v, err)
		}
		return got
	}
	if got, want := versionsNot(2, 0), []string{"max=4294967295", "v0=0", "v1=1"}; !slices.Equal(got, want) {
		t.Errorf("KeysWithVersionNot(2) = %q, want %q", got, want)
	}
	if got, want := versionsNot(0, 0), []string{"max=4294967295", "timer-only=2", "v1=1", "v2=2"}; !slices.Equal(got, want) {
		t.Errorf("KeysWithVersionNot(0) = %q, want %q", got, want)
	}
	if got, want := versionsNot(0, 2), []string{"max=4294967295", "timer-only=2"}; !slices.Equal(got, want) {
		t.Errorf("KeysWithVersionNot(0) stopped after 2 = %q, want %q", got, want)
	}
	// A mark of -1 makes replay skip nothing but still carries the version;
	// a later record offset replaces it.
	mustCommit(t, db, &Checkpoint{Task: "t", Keys: []KeyWrites{{Stream: s, Key: []byte("timer-only"), Mark: 0, StateVersion: 3}}})
	if mark, version, ok, err := db.MarkInfo("t", s, []byte("timer-only")); err != nil || !ok || mark != 0 || version != 3 {
		t.Errorf("MarkInfo after a record = %d, %d, %v, %v; want 0, 3", mark, version, ok, err)
	}
}

// rawBadger opens the store in dir with Badger directly and calls fn in one
// read-write transaction, for tests that write what an older version wrote.
func rawBadger(t *testing.T, dir string, fn func(txn *badger.Txn) error) {
	t.Helper()
	bdb, err := badger.Open(badger.DefaultOptions(dir).WithLogger(nil))
	if err != nil {
		t.Fatal(err)
	}
	err = bdb.Update(fn)
	if closeErr := bdb.Close(); err == nil {
		err = closeErr
	}
	if err != nil {
		t.Fatal(err)
	}
}

// storedFormat returns the format version stored in db.
func storedFormat(t *testing.T, db *DB) uint32 {
	t.Helper()
	var version uint32
	err := db.bdb.View(func(txn *badger.Txn) error {
		item, err := txn.Get(versionKey)
		if err != nil {
			return err
		}
		return item.Value(func(v []byte) (err error) { version, err = decodeU32(v); return err })
	})
	if err != nil {
		t.Fatal(err)
	}
	return version
}

// TestFormatUpgradeFrom1 writes a store as format 1 did (version 1, 8-byte
// marks) and checks that it reads as is, read-only, and is upgraded in place
// by a read-write Open.
func TestFormatUpgradeFrom1(t *testing.T) {
	dir := t.TempDir()
	db := openTestDBAt(t, dir, Options{})
	s := mustStreamID(t, db, "t", "s")
	mustCommit(t, db, &Checkpoint{Task: "t", Keys: []KeyWrites{{Stream: s, Key: []byte("k"), Mark: 1, Writes: []Write{set("n", "v")}}}})
	mustClose(t, db)
	rawBadger(t, dir, func(txn *badger.Txn) error {
		if err := txn.Set(versionKey, binary.BigEndian.AppendUint32(nil, 1)); err != nil {
			return err
		}
		return txn.Set(appendMarkKey(nil, "t", s, []byte("k")), binary.BigEndian.AppendUint64(nil, 41))
	})

	check := func(db *DB, wantFormat uint32) {
		t.Helper()
		if got := storedFormat(t, db); got != wantFormat {
			t.Errorf("stored format = %d, want %d", got, wantFormat)
		}
		if mark, version, ok, err := db.MarkInfo("t", s, []byte("k")); err != nil || !ok || mark != 41 || version != 0 {
			t.Errorf("MarkInfo of a format-1 mark = %d, %d, %v, %v; want 41, 0, true", mark, version, ok, err)
		}
		var got []string
		if err := db.KeysWithVersionNot("t", s, 1, func(key []byte, v uint32) bool {
			got = append(got, fmt.Sprintf("%s=%d", key, v))
			return true
		}); err != nil || !slices.Equal(got, []string{"k=0"}) {
			t.Errorf("KeysWithVersionNot(1) = %q, %v; want [k=0]", got, err)
		}
		if got := getString(t, db, "t", s, "k", "n"); got != "v" {
			t.Errorf("Get = %q, want v", got)
		}
	}
	db = openTestDBAt(t, dir, Options{ReadOnly: true})
	check(db, 1) // a reader does not upgrade
	mustClose(t, db)

	db = openTestDBAt(t, dir, Options{})
	check(db, FormatVersion)
	mustCommit(t, db, &Checkpoint{Task: "t", Keys: []KeyWrites{{Stream: s, Key: []byte("k"), Mark: 42, StateVersion: 1}}})
	if mark, version, _, err := db.MarkInfo("t", s, []byte("k")); err != nil || mark != 42 || version != 1 {
		t.Errorf("MarkInfo after an upgraded commit = %d, %d, %v; want 42, 1", mark, version, err)
	}
	mustClose(t, db)
	db = openTestDBAt(t, dir, Options{})
	if got := storedFormat(t, db); got != FormatVersion {
		t.Errorf("stored format after reopening = %d, want %d", got, FormatVersion)
	}
}

func TestDecodeMarkRejects(t *testing.T) {
	for _, n := range []int{0, 4, 7, 9, 11, 13, 16} {
		if _, _, err := decodeMark(make([]byte, n)); !errors.Is(err, ErrCorrupt) {
			t.Errorf("decodeMark of %d bytes: error = %v, want ErrCorrupt", n, err)
		}
	}
}

func TestKeys(t *testing.T) {
	db := openTestDB(t, Options{})
	s := mustStreamID(t, db, "t", "s")
	other := mustStreamID(t, db, "t", "other")
	// In state order: by length, then bytes.
	keys := []string{"", "a", "b", "\xff", "aa", "ab", "b\xff", "\xff\xff", "abc"}
	var kws []KeyWrites
	for i, k := range keys {
		kw := KeyWrites{Stream: s, Key: []byte(k), Mark: 1}
		for n := range 1 + i*50 { // up to 401 names, to seek over
			kw.Writes = append(kw.Writes, set(fmt.Sprint(n), "v"))
		}
		kws = append(kws, kw)
	}
	kws = append(kws,
		KeyWrites{Stream: s, Key: []byte("mark-only"), Mark: 1},
		KeyWrites{Stream: s, Key: []byte("timers-only"), Mark: NoneApplied, Timers: []TimerOp{setTimer("t", 0, 1, "")}},
		KeyWrites{Stream: other, Key: []byte("leak"), Mark: 1, Writes: []Write{set("n", "v")}})
	mustCommit(t, db, &Checkpoint{Task: "t", Keys: kws})
	// A key whose names were all deleted has no state.
	mustCommit(t, db, &Checkpoint{Task: "t", Keys: []KeyWrites{{Stream: s, Key: []byte("gone"), Mark: 1, Writes: []Write{set("n", "v")}}}})
	mustCommit(t, db, &Checkpoint{Task: "t", Keys: []KeyWrites{{Stream: s, Key: []byte("gone"), Mark: 2, Writes: []Write{del("n")}}}})

	list := func(after []byte, fromStart bool, limit int) []string {
		t.Helper()
		var got []string
		err := db.Keys("t", s, after, fromStart, func(key []byte) bool {
			got = append(got, string(key))
			return limit == 0 || len(got) < limit
		})
		if err != nil {
			t.Fatalf("Keys: %v", err)
		}
		return got
	}
	tests := []struct {
		name      string
		after     string
		fromStart bool
		limit     int
		want      []string
	}{
		{name: "all", fromStart: true, want: keys},
		{name: "from start ignores after", after: "ab", fromStart: true, want: keys},
		{name: "limit", fromStart: true, limit: 2, want: keys[:2]},
		{name: "after the empty key", after: "", want: keys[1:]},
		{name: "after a", after: "a", want: keys[2:]},
		{name: "after 0xff", after: "\xff", want: keys[4:]},
		{name: "after 0xff 0xff", after: "\xff\xff", want: keys[8:]},
		{name: "after a missing key", after: "ac", want: keys[6:]},
		{name: "after a missing key of the same length", after: "zz", want: keys[7:]},
		{name: "after the last", after: "abc", want: nil},
		{name: "after a long key", after: "abcdef", want: nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := list([]byte(tt.after), tt.fromStart, tt.limit); !slices.Equal(got, tt.want) {
				t.Errorf("Keys = %q, want %q", got, tt.want)
			}
		})
	}
	t.Run("paging", func(t *testing.T) {
		var got []string
		page := list(nil, true, 2)
		for len(page) > 0 {
			got = append(got, page...)
			page = list([]byte(page[len(page)-1]), false, 2)
		}
		if !slices.Equal(got, keys) {
			t.Errorf("paged Keys = %q, want %q", got, keys)
		}
	})
}
