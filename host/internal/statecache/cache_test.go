package statecache

import (
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/wasmstream/wasmstream/store"
)

// persisted is a Loader over a map of (stream, key) → name → value.
type persisted map[string]map[string]string

func skeyString(stream uint32, key []byte) string { return fmt.Sprintf("%d/%s", stream, key) }

func (p persisted) load(stream uint32, key []byte, _ *Meta, fn func(name, val []byte)) error {
	var name, val []byte // reused, as a store iterator reuses its buffers
	for n, v := range p[skeyString(stream, key)] {
		name = append(name[:0], n...)
		val = append(val[:0], v...)
		fn(name, val)
	}
	return nil
}

// loadedEntry returns a pinned, loaded entry of (1, "k") over state.
func loadedEntry(t *testing.T, state map[string]string) (*Cache, *Entry) {
	t.Helper()
	p := persisted{skeyString(1, []byte("k")): state}
	c := New(p.load, 1<<30)
	e := c.Pin(1, []byte("k"))
	if err := e.Load(c.Loader()); err != nil {
		t.Fatal(err)
	}
	return c, e
}

func scanNames(e *Entry, prefix, after string, fromStart bool) []string {
	var names []string
	e.Scan([]byte(prefix), []byte(after), fromStart, func(name, val []byte) bool {
		names = append(names, string(name)+"="+string(val))
		return true
	})
	return names
}

func TestScan(t *testing.T) {
	state := map[string]string{"": "e", "a": "1", "a/1": "2", "a/2": "3", "a/3": "4", "ab": "5", "b": "6", "b/1": "7", "\xff": "8"}
	tests := []struct {
		name      string
		prefix    string
		after     string
		fromStart bool
		want      []string
	}{
		{name: "everything", prefix: "", fromStart: true, want: []string{"=e", "a=1", "a/1=2", "a/3=4", "ab=5", "b=6", "b/1=7", "\xff=8"}},
		{name: "empty prefix after the empty name", prefix: "", after: "", want: []string{"a=1", "a/1=2", "a/3=4", "ab=5", "b=6", "b/1=7", "\xff=8"}},
		{name: "empty prefix after a name", prefix: "", after: "a/3", want: []string{"ab=5", "b=6", "b/1=7", "\xff=8"}},
		{name: "prefix from start", prefix: "a/", fromStart: true, want: []string{"a/1=2", "a/3=4"}},
		{name: "fromStart ignores after", prefix: "a/", after: "a/3", fromStart: true, want: []string{"a/1=2", "a/3=4"}},
		{name: "prefix that is a name from start", prefix: "a", fromStart: true, want: []string{"a=1", "a/1=2", "a/3=4", "ab=5"}},
		{name: "after equals the prefix name", prefix: "a", after: "a", want: []string{"a/1=2", "a/3=4", "ab=5"}},
		{name: "after equals the prefix, not a name", prefix: "a/", after: "a/", want: []string{"a/1=2", "a/3=4"}},
		{name: "after before the prefix", prefix: "a/", after: "0", want: []string{"a/1=2", "a/3=4"}},
		{name: "after empty before the prefix", prefix: "b", after: "", want: []string{"b=6", "b/1=7"}},
		{name: "after equals a name", prefix: "a/", after: "a/1", want: []string{"a/3=4"}},
		{name: "after equals a deleted name", prefix: "a/", after: "a/2", want: []string{"a/3=4"}},
		{name: "after between names", prefix: "a/", after: "a/15", want: []string{"a/3=4"}},
		{name: "after the last prefixed name", prefix: "a/", after: "a/3", want: nil},
		{name: "after beyond the prefix range", prefix: "a/", after: "a0", want: nil},
		{name: "after in a later range", prefix: "a", after: "b", want: nil},
		{name: "prefix with no names", prefix: "c", fromStart: true, want: nil},
		{name: "prefix longer than every name", prefix: "a/1/x", fromStart: true, want: nil},
		{name: "non-UTF-8 prefix", prefix: "\xff", fromStart: true, want: []string{"\xff=8"}},
		{name: "after the last name", prefix: "", after: "\xff", want: nil},
	}
	c, e := loadedEntry(t, state)
	c.Apply(e, []byte("a/2"), nil, true) // a tombstone, not yet collected
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := scanNames(e, tt.prefix, tt.after, tt.fromStart); !slices.Equal(got, tt.want) {
				t.Errorf("Scan(%q, %q, %v) = %q, want %q", tt.prefix, tt.after, tt.fromStart, got, tt.want)
			}
		})
	}
}

func TestScanStops(t *testing.T) {
	_, e := loadedEntry(t, map[string]string{"a": "1", "b": "2", "c": "3"})
	var got []string
	e.Scan(nil, nil, true, func(name, _ []byte) bool {
		got = append(got, string(name))
		return len(got) < 2
	})
	if !slices.Equal(got, []string{"a", "b"}) {
		t.Errorf("Scan visited %q after fn returned false, want [a b]", got)
	}
}

func TestDeleteHidesThenForgets(t *testing.T) {
	tests := []struct {
		name      string
		persisted bool // the name was loaded from the store, not written in the cache
	}{
		{name: "persisted name", persisted: true},
		{name: "name written in the cache", persisted: false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			state := map[string]string{"keep": "k"}
			if tt.persisted {
				state["x"] = "old"
			}
			c, e := loadedEntry(t, state)
			if !tt.persisted {
				c.Apply(e, []byte("x"), []byte("new"), false)
			}
			if v, ok := e.Get([]byte("x")); !ok || len(v) == 0 {
				t.Fatalf("Get(x) before the delete = %q, %v", v, ok)
			}
			c.Apply(e, []byte("x"), []byte("ignored"), true)
			if v, ok := e.Get([]byte("x")); ok || v != nil {
				t.Errorf("Get(x) after the delete = %q, %v", v, ok)
			}
			if got := scanNames(e, "", "", true); !slices.Equal(got, []string{"keep=k"}) {
				t.Errorf("Scan after the delete = %q", got)
			}
			c.Unpin(e)
			var cp store.Checkpoint
			c.Collect(&cp)
			if len(cp.Keys) != 1 || len(cp.Keys[0].Writes) != 1 {
				t.Fatalf("Collect = %+v, want one key with one write", cp.Keys)
			}
			if w := cp.Keys[0].Writes[0]; string(w.Name) != "x" || !w.Delete {
				t.Errorf("write = %+v, want a delete of x", w)
			}
			if slices.ContainsFunc(e.slots.all(), func(s slot) bool { return string(s.name) == "x" }) {
				t.Error("the tombstone outlived Collect")
			}
			if _, ok := e.Get([]byte("x")); ok {
				t.Error("Get(x) after Collect found it")
			}
			if got := scanNames(e, "", "", true); !slices.Equal(got, []string{"keep=k"}) {
				t.Errorf("Scan after Collect = %q", got)
			}
			c.Apply(e, []byte("x"), []byte("again"), false)
			if v, ok := e.Get([]byte("x")); !ok || string(v) != "again" {
				t.Errorf("Get(x) after writing it again = %q, %v", v, ok)
			}
			checkSizes(t, c)
		})
	}
}

func TestLoad(t *testing.T) {
	p := persisted{skeyString(3, []byte("k")): {"c": "3", "a": "1", "b": "2", "d": "4"}}
	calls := 0
	load := func(stream uint32, key []byte, _ *Meta, fn func(name, val []byte)) error {
		calls++
		if stream != 3 || string(key) != "k" {
			t.Errorf("loader called for (%d, %q), want (3, k)", stream, key)
		}
		return p.load(stream, key, nil, fn)
	}
	c := New(load, 1<<30)
	e := c.Pin(3, []byte("k"))
	if e.Loaded() {
		t.Fatal("a new entry is loaded")
	}
	// Blind writes before the load win over the persisted values, deletes included.
	c.Apply(e, []byte("b"), []byte("blind"), false)
	c.Apply(e, []byte("c"), nil, true)
	c.Apply(e, []byte("z"), []byte("new"), false)
	for range 2 {
		if err := e.Load(load); err != nil {
			t.Fatal(err)
		}
	}
	if calls != 1 {
		t.Errorf("loader called %d times, want once", calls)
	}
	if !e.Loaded() {
		t.Error("Loaded() = false after Load")
	}
	if got, want := scanNames(e, "", "", true), []string{"a=1", "b=blind", "d=4", "z=new"}; !slices.Equal(got, want) {
		t.Errorf("state = %q, want %q", got, want)
	}
	if all := e.slots.all(); len(all) > 0 {
		for i := 1; i < len(all); i++ {
			if string(all[i-1].name) >= string(all[i].name) {
				t.Fatalf("slots not sorted: %q before %q", all[i-1].name, all[i].name)
			}
		}
	}
	c.Unpin(e)
	checkSizes(t, c)
}

// TestLoadKeepsSetStateVersion: an entry whose state version the loop set, then collected into a
// checkpoint that is not committed yet (the store still has the older version), keeps its version
// when a worker loads it. Before, Load took the store's version once the entry was clean.
func TestLoadKeepsSetStateVersion(t *testing.T) {
	load := func(_ uint32, _ []byte, meta *Meta, _ func(name, val []byte)) error {
		meta.Found, meta.Mark, meta.StateVersion = true, 5, 1
		return nil
	}
	c := New(load, 1<<30)
	e := c.Pin(1, []byte("k"))
	c.Unpin(e)
	// A firing changed the key without loading it: its mark and the version that ran.
	c.SetMark(e, 9)
	c.SetStateVersion(e, 2)
	var cp store.Checkpoint
	c.Collect(&cp)
	if len(cp.Keys) != 1 || cp.Keys[0].StateVersion != 2 {
		t.Fatalf("collected %+v, want the key with state version 2", cp.Keys)
	}
	c.Pin(1, []byte("k"))
	if err := e.Load(c.Loader()); err != nil {
		t.Fatal(err)
	}
	if e.StateVersion() != 2 || e.mark != 9 {
		t.Errorf("after the load: state version %d, mark %d; want 2 and 9", e.StateVersion(), e.mark)
	}

	// A key the loop never set a version of takes the store's.
	f := c.Pin(1, []byte("other"))
	if err := f.Load(c.Loader()); err != nil {
		t.Fatal(err)
	}
	if f.StateVersion() != 1 {
		t.Errorf("state version of a key loaded as it is stored: %d, want 1", f.StateVersion())
	}
}

func TestLoadError(t *testing.T) {
	errDown := errors.New("store down")
	fail := true
	load := func(stream uint32, key []byte, _ *Meta, fn func(name, val []byte)) error {
		fn([]byte("half"), []byte("read"))
		if fail {
			return errDown
		}
		fn([]byte("rest"), []byte("read"))
		return nil
	}
	c := New(load, 1<<30)
	e := c.Pin(1, []byte("k"))
	if err := e.Load(load); !errors.Is(err, errDown) {
		t.Fatalf("Load = %v, want %v", err, errDown)
	}
	if e.Loaded() {
		t.Fatal("Loaded() after a failed Load")
	}
	if e.slots.len() != 0 {
		t.Fatalf("a failed Load left %d slots", e.slots.len())
	}
	fail = false
	if err := e.Load(load); err != nil {
		t.Fatalf("second Load: %v", err)
	}
	if got := scanNames(e, "", "", true); !slices.Equal(got, []string{"half=read", "rest=read"}) {
		t.Errorf("state after the retried Load = %q", got)
	}
}

func TestCollect(t *testing.T) {
	c := New(persisted{}.load, 1<<30)
	a := c.Pin(1, []byte("a"))
	b := c.Pin(1, []byte("b"))
	m := c.Pin(2, []byte("a")) // same key, another stream: another entry
	idle := c.Pin(1, []byte("idle"))
	for _, e := range []*Entry{a, b, m, idle} {
		if err := e.Load(c.Loader()); err != nil {
			t.Fatal(err)
		}
	}
	if m == a {
		t.Fatal("streams share an entry")
	}
	c.Apply(a, []byte("y"), []byte("1"), false)
	c.Apply(a, []byte("x"), []byte("1"), false)
	c.Apply(a, []byte("x"), []byte("2"), false) // the last write of a name wins
	c.SetMark(a, 10)
	c.Apply(b, []byte("gone"), nil, true) // never set in the cache: still a delete for the store
	c.SetMark(m, 4)
	c.SetMark(m, 7)
	c.SetMark(m, 5) // marks only increase
	if c.Dirty() != 3 {
		t.Errorf("Dirty() = %d, want 3", c.Dirty())
	}

	cp := store.Checkpoint{Keys: []store.KeyWrites{{Stream: 9, Key: []byte("earlier")}}}
	c.Collect(&cp)
	if cp.Keys[0].Stream != 9 {
		t.Error("Collect replaced what cp held instead of appending")
	}
	got := map[string]string{}
	for _, kw := range cp.Keys[1:] {
		got[skeyString(kw.Stream, kw.Key)] = describe(kw)
	}
	want := map[string]string{
		"1/a": "mark 10: x=2 y=1",
		"1/b": "mark -1: -gone", // no record applied: a key changed by a firing or a tick,
		"2/a": "mark 7:",
	}
	if !maps.Equal(got, want) {
		t.Errorf("Collect = %q, want %q", got, want)
	}
	if c.Dirty() != 0 {
		t.Errorf("Dirty() = %d after Collect", c.Dirty())
	}

	// Nothing changed since: nothing to collect. A lower mark changes nothing either.
	c.SetMark(a, 9)
	c.SetMark(m, 7)
	cp = store.Checkpoint{}
	c.Collect(&cp)
	if len(cp.Keys) != 0 {
		t.Errorf("second Collect = %+v, want nothing", cp.Keys)
	}

	// Only what changed since the last Collect, with the current mark.
	c.Apply(a, []byte("y"), nil, true)
	c.Collect(&cp)
	if len(cp.Keys) != 1 || describe(cp.Keys[0]) != "mark 10: -y" {
		t.Errorf("third Collect = %+v, want a's delete of y at mark 10", cp.Keys)
	}
}

// describe renders a KeyWrites as "mark M: name=value -deleted …".
func describe(kw store.KeyWrites) string {
	var b strings.Builder
	fmt.Fprintf(&b, "mark %d:", kw.Mark)
	for _, w := range kw.Writes {
		if w.Delete {
			fmt.Fprintf(&b, " -%s", w.Name)
		} else {
			fmt.Fprintf(&b, " %s=%s", w.Name, w.Value)
		}
	}
	return b.String()
}

func TestEvict(t *testing.T) {
	const keys = 10
	tests := []struct {
		name     string
		budget   int64 // in entries' worth of bytes
		pinned   []int
		dirty    []int
		wantLeft int // entries left
	}{
		{name: "within budget", budget: keys, wantLeft: keys},
		{name: "evicts down to the budget", budget: 4, wantLeft: 4},
		{name: "evicts everything for a zero budget", budget: 0, wantLeft: 0},
		{name: "never pinned or dirty", budget: 0, pinned: []int{1, 2}, dirty: []int{3}, wantLeft: 3},
		{name: "pinned and dirty count towards the budget", budget: 5, pinned: []int{0, 1}, dirty: []int{2, 3}, wantLeft: 5},
		{name: "a budget below what must stay", budget: 1, pinned: []int{0, 1}, dirty: []int{2}, wantLeft: 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := persisted{}
			for i := range keys {
				p[skeyString(1, fmt.Appendf(nil, "k%d", i))] = map[string]string{"n": strings.Repeat("v", 1000)}
			}
			c := New(p.load, 0)
			entries := make([]*Entry, keys)
			for i := range entries {
				entries[i] = c.Pin(1, fmt.Appendf(nil, "k%d", i))
				if err := entries[i].Load(c.Loader()); err != nil {
					t.Fatal(err)
				}
				c.Unpin(entries[i])
			}
			perEntry := entries[0].size
			if c.Size() != keys*perEntry {
				t.Fatalf("Size() = %d, want %d entries of %d bytes", c.Size(), keys, perEntry)
			}
			for _, i := range tt.pinned {
				c.Pin(1, entries[i].key)
			}
			for _, i := range tt.dirty {
				c.SetMark(entries[i], 1)
			}
			c.budget = tt.budget * perEntry
			n := c.Evict()
			if c.Len() != tt.wantLeft || n != keys-tt.wantLeft {
				t.Errorf("Evict() = %d leaving %d entries, want %d leaving %d", n, c.Len(), keys-tt.wantLeft, tt.wantLeft)
			}
			if c.Size() != int64(c.Len())*perEntry {
				t.Errorf("Size() = %d for %d entries of %d bytes", c.Size(), c.Len(), perEntry)
			}
			for _, i := range append(slices.Clone(tt.pinned), tt.dirty...) {
				if c.Pin(1, entries[i].key) != entries[i] {
					t.Errorf("entry %d (pinned or dirty) was evicted", i)
				}
			}
			checkSizes(t, c)
		})
	}
}

// TestSizeCountsLoadedState checks that what a Load reads counts towards the budget and that
// evicting it gives back exactly what it took.
func TestSizeCountsLoadedState(t *testing.T) {
	p := persisted{skeyString(1, []byte("k")): {"n": strings.Repeat("v", 10_000)}}
	c := New(p.load, 1000)
	e := c.Pin(1, []byte("k"))
	empty := c.Size()
	if err := e.Load(c.Loader()); err != nil {
		t.Fatal(err)
	}
	c.Unpin(e)
	if c.Size() < empty+10_000 {
		t.Fatalf("Size() = %d after loading 10000 bytes into an entry of %d", c.Size(), empty)
	}
	if n := c.Evict(); n != 1 {
		t.Fatalf("Evict() = %d, want 1", n)
	}
	if c.Size() != 0 || c.Len() != 0 {
		t.Errorf("after evicting everything Size() = %d, Len() = %d", c.Size(), c.Len())
	}
}

// checkSizes checks the size bookkeeping against the slots: each entry's size is its overhead and
// bytes, the cache's is the sum of what it has counted, and an unpinned entry is fully counted.
func checkSizes(t *testing.T, c *Cache) {
	t.Helper()
	var total int64
	c.each(func(e *Entry, _ uint64) bool {
		want := entryOverhead + int64(len(e.key))
		for _, s := range e.slots.all() {
			want += int64(nameOverhead + len(s.name) + len(s.val))
		}
		if e.size != want {
			t.Fatalf("entry %q: size %d, want %d", e.key, e.size, want)
		}
		if e.pins == 0 && e.counted != e.size {
			t.Fatalf("unpinned entry %q: counted %d of %d bytes", e.key, e.counted, e.size)
		}
		total += e.counted
		return true
	})
	if c.size != total {
		t.Fatalf("cache size %d, entries counted %d", c.size, total)
	}
}

// TestCollectWhileWorkerReads runs Collect while workers hold pinned entries, as the task loop
// does at a checkpoint with batches in flight: one worker reads an entry that has uncollected
// writes and a tombstone, another loads an entry whose only change is its mark. Run with -race.
func TestCollectWhileWorkerReads(t *testing.T) {
	p := persisted{
		skeyString(1, []byte("k")): {"a": "1", "b": "2", "c": "3"},
		skeyString(1, []byte("m")): {"x": "9"},
	}
	c := New(p.load, 0)
	e := c.Pin(1, []byte("k"))
	if err := e.Load(c.Loader()); err != nil {
		t.Fatal(err)
	}
	c.Apply(e, []byte("b"), nil, true)
	c.Apply(e, []byte("d"), []byte("4"), false)
	c.SetMark(e, 3)
	m := c.Pin(1, []byte("m"))
	c.SetMark(m, 5) // a key in the batch that wrote nothing: dirty but never loaded

	want := []string{"a=1", "c=3", "d=4"}
	const reads = 200
	errs := make(chan error, 2)
	go func() { // the worker holding k
		for range reads {
			if got := scanNames(e, "", "", true); !slices.Equal(got, want) {
				errs <- fmt.Errorf("worker's Scan = %q, want %q", got, want)
				return
			}
			if _, ok := e.Get([]byte("b")); ok {
				errs <- errors.New("worker's Get found a deleted name")
				return
			}
		}
		errs <- nil
	}()
	go func() { // the worker holding m
		if err := m.Load(c.Loader()); err != nil {
			errs <- err
			return
		}
		if v, ok := m.Get([]byte("x")); !ok || string(v) != "9" {
			errs <- fmt.Errorf("worker's Get(x) = %q, %v", v, ok)
			return
		}
		errs <- nil
	}()
	var cp store.Checkpoint
	c.Collect(&cp)
	for range 2 {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
	got := map[string]string{}
	for _, kw := range cp.Keys {
		got[skeyString(kw.Stream, kw.Key)] = describe(kw)
	}
	if w := map[string]string{"1/k": "mark 3: -b d=4", "1/m": "mark 5:"}; !maps.Equal(got, w) {
		t.Errorf("Collect = %q, want %q", got, w)
	}
	// The results came back: the loop owns the entries again.
	c.Unpin(e)
	c.Unpin(m)
	if slices.ContainsFunc(e.slots.all(), func(s slot) bool { return s.deleted }) {
		t.Error("a collected tombstone outlived the Unpin")
	}
	if got := scanNames(e, "", "", true); !slices.Equal(got, want) {
		t.Errorf("Scan after Unpin = %q, want %q", got, want)
	}
	checkSizes(t, c)
	if n := c.Evict(); n != 2 || c.Size() != 0 {
		t.Errorf("Evict() = %d leaving Size() = %d, want 2 and 0", n, c.Size())
	}
}

// TestDropStream checks that DropStream forgets exactly one stream's entries — clean, dirty and
// pinned — that the size accounting stays right when a pinned one is released later, and that the
// next Pin of a dropped key loads it afresh; once with every lookup hash colliding, so that the
// drop unlinks entries from the middle of a chain.
func TestDropStream(t *testing.T) {
	t.Run("hashed", testDropStream)
	t.Run("colliding", func(t *testing.T) {
		hashMask = 0
		defer func() { hashMask = ^uint64(0) }()
		testDropStream(t)
	})
}

func testDropStream(t *testing.T) {
	p := persisted{skeyString(1, []byte("a")): {"n": "store"}, skeyString(2, []byte("a")): {"n": "other"}}
	c := New(p.load, 1<<30)
	load := func(e *Entry) {
		t.Helper()
		if err := e.Load(c.Loader()); err != nil {
			t.Fatal(err)
		}
	}
	a1, b1, a2 := c.Pin(1, []byte("a")), c.Pin(1, []byte("b")), c.Pin(2, []byte("a"))
	load(a1)
	load(b1)
	load(a2)
	c.Apply(a1, []byte("n"), []byte("stale"), false) // dirty
	c.Unpin(b1)
	c.Unpin(a2)
	if n := c.DropStream(1); n != 2 {
		t.Fatalf("dropped %d entries, want 2", n)
	}
	if c.Len() != 1 || c.Dirty() != 0 {
		t.Fatalf("after the drop: %d entries, %d dirty; want 1 and 0", c.Len(), c.Dirty())
	}
	if c.Peek(2, []byte("a")) != a2 || c.Peek(1, []byte("b")) != nil {
		t.Fatal("the drop lost the other stream's entry or kept one of its own")
	}
	size := c.Size()
	c.Unpin(a1) // the job that held it finishes: the cache does not count it again
	if c.Size() != size {
		t.Errorf("size %d after releasing a dropped entry, want %d", c.Size(), size)
	}
	fresh := c.Pin(1, []byte("a"))
	if fresh == a1 {
		t.Fatal("Pin returned the dropped entry")
	}
	load(fresh)
	if v, _ := fresh.Get([]byte("n")); string(v) != "store" {
		t.Errorf("reloaded value %q, want the store's", v)
	}
	var cp store.Checkpoint
	c.Collect(&cp)
	if len(cp.Keys) != 0 {
		t.Errorf("a dropped dirty entry was collected: %+v", cp.Keys)
	}
}

func TestLookups(t *testing.T) {
	c := New(func(uint32, []byte, *Meta, func(name, val []byte)) error { return nil }, 1<<20)
	a := c.Pin(1, []byte("a"))
	c.Unpin(a)
	c.Unpin(c.Pin(1, []byte("a")))
	c.Unpin(c.Pin(2, []byte("a"))) // another stream: another entry
	if hits, misses := c.Lookups(); hits != 1 || misses != 2 {
		t.Fatalf("Lookups = %d hits, %d misses; want 1 and 2", hits, misses)
	}
}

// The snapshot bound: unknown until set, then raised by every value and timer added and
// lowered by a value replaced or deleted, never below what the state holds.
func TestSnapshotBytesBound(t *testing.T) {
	p := persisted{skeyString(1, []byte("k")): {"a": "1234567890"}}
	c := New(p.load, 1<<30)
	e := c.Pin(1, []byte("k"))
	if err := e.Load(p.load); err != nil {
		t.Fatal(err)
	}
	if _, ok := e.SnapshotBytes(); ok {
		t.Fatal("a bound before SetSnapshotBytes")
	}
	c.Apply(e, []byte("b"), []byte("xx"), false) // not counted: no bound yet
	e.SetSnapshotBytes(100)
	for _, step := range []struct {
		do   func()
		want int
	}{
		{func() { c.Apply(e, []byte("c"), []byte("yyy"), false) }, 100 + 1 + 3 + snapNameOverhead},
		{func() { c.Apply(e, []byte("a"), []byte("z"), false) }, 120 - 11 + 1 + 1 + snapNameOverhead},
		{func() { c.Apply(e, []byte("b"), nil, true) }, 127 - 3},
		{func() { c.Apply(e, []byte("b"), nil, true) }, 124}, // deleted already
		{func() { c.AddTimer(e, store.TimerOp{Name: []byte("t"), Payload: []byte("pp")}) }, 124 + 3 + snapTimerOverhead},
		{func() { c.AddTimer(e, store.TimerOp{Name: []byte("t"), Delete: true}) }, 159},
	} {
		step.do()
		if n, ok := e.SnapshotBytes(); !ok || n != step.want {
			t.Fatalf("bound %d, %v; want %d", n, ok, step.want)
		}
	}
	c.Unpin(e)
}

// TestPinOnce checks that an owner pins a key once however often it asks, that another owner
// pins it again, and that the lookups count one hit or miss per pin.
func TestPinOnce(t *testing.T) {
	c := New(persisted{}.load, 1<<30)
	e, first := c.PinOnce(1, []byte("k"), 7)
	if !first || e.pins != 1 {
		t.Fatalf("first PinOnce: first %v, %d pins", first, e.pins)
	}
	again, first := c.PinOnce(1, []byte("k"), 7)
	if again != e || first || e.pins != 1 {
		t.Fatalf("the same owner again: same entry %v, first %v, %d pins; want the entry, not pinned again", again == e, first, e.pins)
	}
	other, first := c.PinOnce(1, []byte("k"), 8)
	if other != e || !first || e.pins != 2 {
		t.Fatalf("another owner: same entry %v, first %v, %d pins", other == e, first, e.pins)
	}
	if hits, misses := c.Lookups(); hits != 1 || misses != 1 {
		t.Fatalf("lookups: %d hits, %d misses; want 1 and 1", hits, misses)
	}
	c.Unpin(e)
	c.Unpin(e)
	if e.Pinned() {
		t.Fatal("pinned after two Unpins")
	}
	if e2, first := c.PinOnce(2, []byte("k"), 8); e2 == e || !first {
		t.Fatal("another stream's key shares the entry")
	}
}

// TestPinAllocs checks that a new entry of a short key is one allocation: its key's bytes are in
// the entry and the cache's map is keyed by a hash, not by a copy of the key (which made three).
func TestPinAllocs(t *testing.T) {
	const n = 1024
	keys := make([][]byte, n)
	for i := range keys {
		keys[i] = fmt.Appendf(nil, "user%05d", i)
	}
	got := testing.AllocsPerRun(5, func() {
		c := New(func(uint32, []byte, *Meta, func(name, val []byte)) error { return nil }, 1<<30)
		for _, k := range keys {
			c.Unpin(c.Pin(1, k))
		}
	})
	t.Logf("a cache of %d new keys: %.0f allocations", n, got)
	if got > n*3/2 {
		t.Errorf("a cache of %d new keys: %.0f allocations, want at most %d (one per entry, and the map's growth)", n, got, n*3/2)
	}
}

// BenchmarkPinOnce measures finding a key's entry (ns/op is per key): PinOnce and Unpin of keys
// taken at random from 100,000 cached ones (more than the CPU caches hold, as on the task loop,
// where a key's entry was last touched many records ago).
func BenchmarkPinOnce(b *testing.B) {
	const n = 100_000
	c := New(func(uint32, []byte, *Meta, func(name, val []byte)) error { return nil }, 1<<30)
	keys := make([][]byte, n)
	for i := range keys {
		keys[i] = fmt.Appendf(nil, "user%05d", i)
		c.Unpin(c.Pin(1, keys[i]))
	}
	order := rand.New(rand.NewPCG(1, 2)).Perm(n)
	owner := uint64(0)
	i := 0
	for b.Loop() {
		owner++
		e, _ := c.PinOnce(1, keys[order[i%n]], owner)
		c.Unpin(e)
		i++
	}
}

// TestCollectMarkStored: Collect tells the store that a key's mark entry is stored with the
// state version it collects (store.KeyWrites.MarkStored) only when it is: read by the load with
// that version, or collected by an earlier Collect with it. A new key, a key the store has with
// another version, a key whose version changed since, and a key never loaded nor collected
// have their mark written.
func TestCollectMarkStored(t *testing.T) {
	stored := map[string]uint32{"old": 1, "v3": 3} // keys the store has, with their state version
	load := func(_ uint32, key []byte, meta *Meta, _ func(name, val []byte)) error {
		if v, ok := stored[string(key)]; ok {
			meta.Found, meta.Mark, meta.StateVersion = true, 1, v
		}
		return nil
	}
	c := New(load, 1<<30)
	collect := func(step string, want map[string]bool) {
		t.Helper()
		var cp store.Checkpoint
		c.Collect(&cp)
		got := map[string]bool{}
		for _, kw := range cp.Keys {
			got[string(kw.Key)] = kw.MarkStored
		}
		if !maps.Equal(got, want) {
			t.Errorf("%s: MarkStored by key %v, want %v", step, got, want)
		}
	}
	entry := func(key string, loaded bool) *Entry {
		e := c.Pin(1, []byte(key))
		if loaded {
			if err := e.Load(c.Loader()); err != nil {
				t.Fatal(err)
			}
		}
		c.Unpin(e)
		return e
	}
	change := func(e *Entry, offset int64) {
		c.Apply(e, []byte("n"), []byte(fmt.Sprint(offset)), false)
		c.SetMark(e, offset)
	}
	fresh, old, v3, blind := entry("new", true), entry("old", true), entry("v3", true), entry("blind", false)
	c.SetStateVersion(v3, 1) // a module of version 1 wrote it: the store has 3
	for _, e := range []*Entry{fresh, old, v3} {
		change(e, 10)
	}
	c.SetMark(blind, 10) // a firing changed it, unloaded: what the store has is unknown
	collect("first", map[string]bool{"new": false, "old": true, "v3": false, "blind": false})

	for _, e := range []*Entry{fresh, old, v3, blind} {
		change(e, 20)
	}
	collect("second", map[string]bool{"new": true, "old": true, "v3": true, "blind": true})

	// A new module version: every key's mark is written once with it.
	for _, e := range []*Entry{fresh, old} {
		c.SetStateVersion(e, 2)
		change(e, 30)
	}
	collect("version changed", map[string]bool{"new": false, "old": false})
	change(fresh, 40)
	collect("version kept", map[string]bool{"new": true})

	// A load after a Collect keeps what the Collect knew: the store may not hold it yet.
	stored["late"] = 7
	late := c.Pin(1, []byte("late"))
	c.Unpin(late)
	c.SetStateVersion(late, 2)
	c.SetMark(late, 50)
	collect("late, unloaded", map[string]bool{"late": false})
	if err := late.Load(c.Loader()); err != nil {
		t.Fatal(err)
	}
	change(late, 60)
	collect("late, loaded after its collect", map[string]bool{"late": true})
}

// TestCollectMarkUnchanged: Collect tells the store that a key's mark entry is already the one
// it would write (store.KeyWrites.MarkUnchanged) only when the mark and state version it
// collects are those the store holds: read by the load, or collected by an earlier Collect. A
// key changed only by timer firings keeps its stored mark; one a record changed, one a module
// of another version changed, a new key (its NoneApplied mark written once) and a key whose
// stream was dropped and loaded again after a newer write have their mark written.
func TestCollectMarkUnchanged(t *testing.T) {
	type meta struct {
		mark int64
		vers uint32
	}
	stored := map[string]meta{"old": {5, 1}, "other": {5, 1}}
	load := func(_ uint32, key []byte, m *Meta, _ func(name, val []byte)) error {
		if s, ok := stored[string(key)]; ok {
			m.Found, m.Mark, m.StateVersion = true, s.mark, s.vers
		}
		return nil
	}
	c := New(load, 1<<30)
	collect := func(step string, want map[string]bool) {
		t.Helper()
		var cp store.Checkpoint
		c.Collect(&cp)
		got := map[string]bool{}
		for _, kw := range cp.Keys {
			got[string(kw.Key)] = kw.MarkUnchanged
			if kw.MarkUnchanged && !kw.MarkStored {
				t.Errorf("%s: key %s MarkUnchanged without MarkStored", step, kw.Key)
			}
			stored[string(kw.Key)] = meta{kw.Mark, kw.StateVersion} // what the commit leaves
		}
		if !maps.Equal(got, want) {
			t.Errorf("%s: MarkUnchanged by key %v, want %v", step, got, want)
		}
	}
	entry := func(key string) *Entry {
		e := c.Pin(1, []byte(key))
		if err := e.Load(c.Loader()); err != nil {
			t.Fatal(err)
		}
		c.Unpin(e)
		return e
	}
	fire := func(e *Entry) { // a timer fired: its window's result written, the timer deleted
		c.Apply(e, []byte("fired"), []byte("1"), false)
		c.AddTimer(e, store.TimerOp{Name: []byte("w"), Delete: true})
	}
	old, other, fresh := entry("old"), entry("other"), entry("new")
	fire(old)
	fire(fresh)
	c.SetStateVersion(other, 2) // a module of version 2 fired it: the store has 1
	fire(other)
	collect("loaded, fired", map[string]bool{"old": true, "new": false, "other": false})

	for _, e := range []*Entry{old, other, fresh} {
		fire(e)
	}
	collect("collected, fired", map[string]bool{"old": true, "new": true, "other": true})

	c.Apply(old, []byte("n"), []byte("1"), false)
	c.SetMark(old, 9) // a record
	c.SetStateVersion(fresh, 3)
	fire(fresh)
	collect("record, version", map[string]bool{"old": false, "new": false})
	fire(old)
	fire(fresh)
	collect("fired after", map[string]bool{"old": true, "new": true})

	// The stream dropped (an aborted transaction, an assignment): the store's entry is read
	// again. Here a restore wrote mark 12 for "old" meanwhile: a firing must not claim 9.
	c.DropStream(1)
	stored["old"] = meta{12, 1}
	old = entry("old")
	fire(old)
	collect("reloaded", map[string]bool{"old": true})
	if m := stored["old"].mark; m != 12 {
		t.Errorf("reloaded: collected mark %d, want the store's 12", m)
	}
}

// TestCollectWhole: a collected key is Whole (a changelog snapshot reads none of its state
// entries) when its entry was loaded and the checkpoint writes every name it has (a delete
// included; a tombstone collected before names nothing); a name left unchanged or a blind write
// before the load leave it unset.
func TestCollectWhole(t *testing.T) {
	p := persisted{skeyString(1, []byte("one")): {"n": "1"}, skeyString(1, []byte("two")): {"a": "1", "b": "2"}}
	c := New(p.load, 1<<30)
	entry := func(key string, load bool) *Entry {
		e := c.Pin(1, []byte(key))
		if load {
			if err := e.Load(c.Loader()); err != nil {
				t.Fatal(err)
			}
		}
		return e
	}
	collect := func(step string, want map[string]bool) {
		t.Helper()
		var cp store.Checkpoint
		c.Collect(&cp)
		got := map[string]bool{}
		for _, kw := range cp.Keys {
			got[string(kw.Key)] = kw.Whole
		}
		if !maps.Equal(got, want) {
			t.Errorf("%s: Whole by key %v, want %v", step, got, want)
		}
	}
	one, two, blind := entry("one", true), entry("two", true), entry("blind", false)
	c.Apply(one, []byte("n"), []byte("2"), false)   // its only name
	c.Apply(two, []byte("a"), []byte("3"), false)   // b unchanged
	c.Apply(blind, []byte("x"), []byte("1"), false) // not loaded: the store may hold more
	collect("first writes", map[string]bool{"one": true, "two": false, "blind": false})

	c.Apply(two, []byte("a"), []byte("4"), false)
	c.Apply(two, []byte("b"), []byte("5"), false)
	c.Apply(one, []byte("m"), []byte("1"), false)
	c.Apply(one, []byte("n"), nil, true) // deleted: Writes carry the delete
	collect("every name", map[string]bool{"one": true, "two": true})

	c.Apply(one, []byte("m"), []byte("2"), false) // n's collected tombstone waits for the Unpin
	collect("after a delete", map[string]bool{"one": true})
}

// BenchmarkCollect measures a checkpoint's Collect of 10,000 keys with one name written each,
// as the counter's checkpoints are (ns/op and allocs/op per Collect).
func BenchmarkCollect(b *testing.B) {
	const n = 10_000
	c := New(func(uint32, []byte, *Meta, func(name, val []byte)) error { return nil }, 1<<30)
	entries := make([]*Entry, n)
	for i := range entries {
		entries[i] = c.Pin(1, fmt.Appendf(nil, "user%05d", i))
		if err := entries[i].Load(c.Loader()); err != nil {
			b.Fatal(err)
		}
		c.Unpin(entries[i])
	}
	name, val := []byte("count"), []byte("12345")
	cp := &store.Checkpoint{Keys: make([]store.KeyWrites, 0, n)}
	b.ReportAllocs()
	for b.Loop() {
		b.StopTimer()
		for _, e := range entries {
			c.Apply(e, name, val, false)
			c.SetMark(e, 1)
		}
		cp.Keys = cp.Keys[:0]
		b.StartTimer()
		c.Collect(cp)
	}
}
