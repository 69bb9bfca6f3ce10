package task

import (
	"fmt"
	"testing"

	"github.com/wasmstream/wasmstream/abi"
	"github.com/wasmstream/wasmstream/host/internal/modrt"
	"github.com/wasmstream/wasmstream/host/internal/positions"
	"github.com/wasmstream/wasmstream/host/internal/sched"
	"github.com/wasmstream/wasmstream/host/internal/source"
	"github.com/wasmstream/wasmstream/store"
)

// keyedItems returns n record items of stream 0, each of its own key.
func keyedItems(n int) []sched.Item[*item] {
	items := make([]sched.Item[*item], n)
	for i := range items {
		key := []byte(fmt.Sprintf("user%05d", i))
		items[i] = sched.Item[*item]{Stream: 0, Key: string(key), Offset: int64(i),
			Value: &item{rec: abi.Record{Offset: int64(i), Key: key, Value: []byte("v")}}}
	}
	return items
}

// TestNewJobAllocs checks that forming a job costs a few allocations per batch, not several per
// record: the loop forms one job per batch, and at a million records a second each allocation
// per record is GC work the loop pays for.
func TestNewJobAllocs(t *testing.T) {
	tk, err := New(Config{Name: "allocs", Workers: 2})
	if err != nil {
		t.Fatal(err)
	}
	tk.streams[0] = &stream{}
	const n = 256
	items := keyedItems(n)
	b := sched.Batch[*item]{ID: 1, Items: items}
	run := func() {
		j := tk.newJob(b)
		if len(j.groups) != 1 || len(j.groups[0].recs) != n || len(j.groups[0].keys) != n {
			t.Fatalf("job: %d groups, %d records, %d keys; want 1, %d, %d", len(j.groups), len(j.groups[0].recs), len(j.groups[0].keys), n, n)
		}
		tk.release(j)
	}
	run() // the keys' cache entries and a released job's buffers exist from now on, as in a steady state
	got := testing.AllocsPerRun(20, run)
	t.Logf("forming and releasing a job of %d records: %.0f allocations", n, got)
	if got > 4 {
		t.Errorf("forming and releasing a job of %d records: %.0f allocations, want at most 4", n, got)
	}
}

// TestAdmitAllocs checks that admitting records costs well under one allocation each once the
// keys' queues exist: a record's item and its sequencing key are carved from shared blocks
// (alloc.go), not allocated one by one.
func TestAdmitAllocs(t *testing.T) {
	tk, err := New(Config{Name: "allocs", Workers: 2})
	if err != nil {
		t.Fatal(err)
	}
	st := &stream{id: 0, kafka: true, source: []byte("in"), replay: -1, horizon: -1,
		tracker: positions.NewTracker(0), tm: newStreamTime(tk.cfg.Now(), 0)}
	tk.streams[0] = st
	tk.sched.AddStream(0)
	const n, keys = 256, 16
	recs := make([]source.Record, n)
	for i := range recs {
		recs[i].Key = []byte(fmt.Sprintf("user%05d", i%keys))
		recs[i].Value = []byte("v")
		recs[i].Timestamp = -1
	}
	next := int64(0)
	run := func() {
		now := tk.cfg.Now()
		for i := range recs {
			recs[i].Offset = next
			next++
			if err := tk.admit(st, &recs[i], now); err != nil {
				t.Fatal(err)
			}
		}
	}
	run() // the keys' queues exist from now on, as in a steady state with more keys queued
	got := testing.AllocsPerRun(20, run)
	t.Logf("admitting %d records: %.0f allocations", n, got)
	if got > n/8 {
		t.Errorf("admitting %d records: %.0f allocations, want at most %d", n, got, n/8)
	}
}

// TestOutgrowsTxnAllocs checks that the check of a job's writes against a key's store
// transaction (outgrowsTxn, run for every job that succeeded) makes no allocation per write.
func TestOutgrowsTxnAllocs(t *testing.T) {
	db, err := store.Open("", store.Options{InMemory: true})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	tk, err := New(Config{Name: "allocs", Workers: 2, Store: db})
	if err != nil {
		t.Fatal(err)
	}
	st := &stream{}
	tk.streams[0] = st
	const n = 256
	items := keyedItems(n)
	j := tk.newJob(sched.Batch[*item]{ID: 1, Items: items})
	g := &j.groups[0]
	for _, it := range g.work {
		g.effects.Writes = append(g.effects.Writes, modrt.Write{Key: it.rec.Key, Name: []byte("n"), Value: []byte("1")})
	}
	for _, e := range g.keys {
		tk.cache.Charge(e, 1, 64) // every key has a write pending since the last checkpoint
	}
	if tk.outgrowsTxn(j) {
		t.Fatal("a job of one small write per key outgrows a key's transaction")
	}
	if got := testing.AllocsPerRun(20, func() { tk.outgrowsTxn(j) }); got > 2 {
		t.Errorf("outgrowsTxn over %d writes: %.0f allocations, want at most 2", n, got)
	}
}

// TestOutgrowsTxn checks the answer of outgrowsTxn, through its bound over the whole group and
// through its count per key: a key whose pending writes, the job's writes to it and its mark pass
// the store's transaction limit outgrows it; the same job's writes spread over other keys, which
// pass the limit only added together, do not.
func TestOutgrowsTxn(t *testing.T) {
	db, err := store.Open("", store.Options{InMemory: true, MaxTxnEntries: 10})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	tk, err := New(Config{Name: "txn", Workers: 2, Store: db})
	if err != nil {
		t.Fatal(err)
	}
	tk.streams[0] = &stream{}
	const keys = 5
	j := tk.newJob(sched.Batch[*item]{ID: 1, Items: keyedItems(keys)})
	g := &j.groups[0]
	first := g.work[0].rec.Key
	tk.cache.Charge(g.entry(first), 7, 700) // 7 writes of the first key wait for a checkpoint
	write := func(key []byte, name string) {
		g.effects.Writes = append(g.effects.Writes, modrt.Write{Key: key, Name: []byte(name), Value: []byte("1")})
	}
	for _, it := range g.work {
		write(it.rec.Key, "a") // one write per key: 7 + 1 + the mark for the first key, 5 writes in all
	}
	if tk.outgrowsTxn(j) {
		t.Fatal("7 pending + 1 write + the mark outgrow a transaction of 10 entries")
	}
	write(first, "b")
	write(first, "c") // 7 + 3 + the mark: 11
	if !tk.outgrowsTxn(j) {
		t.Fatal("7 pending + 3 writes + the mark do not outgrow a transaction of 10 entries")
	}
	g.effects.Writes = g.effects.Writes[:keys]
	for _, it := range g.work[1:] {
		write(it.rec.Key, "b") // more writes, none of them to the first key
	}
	if tk.outgrowsTxn(j) {
		t.Fatal("writes to other keys count against the first key's transaction")
	}
}

// TestNewJobPinsEachKeyOnce checks the scope a job forms without a map of its own: by partition,
// a batch's record keys repeat apart from each other, and each key is still in the group's scope
// once, pinned once, found by its key, and unpinned when the job is released.
func TestNewJobPinsEachKeyOnce(t *testing.T) {
	tk, err := New(Config{Name: "scope", Workers: 2, Policy: PolicyPartition})
	if err != nil {
		t.Fatal(err)
	}
	tk.streams[0] = &stream{}
	items := keyedItems(12)
	for i := range items {
		key := []byte(fmt.Sprintf("user%05d", i%3)) // 0 1 2 0 1 2 ...: no two neighbours alike
		items[i].Key = ""
		items[i].Value.rec.Key = key
	}
	j := tk.newJob(sched.Batch[*item]{ID: 1, Items: items})
	g := &j.groups[0]
	if len(g.keys) != 3 {
		t.Fatalf("%d keys in the scope, want 3", len(g.keys))
	}
	for i := range 3 {
		key := []byte(fmt.Sprintf("user%05d", i))
		e := g.entry(key)
		if e == nil || string(e.Key()) != string(key) || !e.Pinned() {
			t.Fatalf("key %s: entry %v", key, e)
		}
		if m := g.marks[i]; m.e != e || m.first != int64(i) || m.last != int64(i) {
			t.Fatalf("mark %d: %+v", i, m)
		}
	}
	if len(g.marks) != 12 {
		t.Fatalf("%d marks, want one per run of a key: 12", len(g.marks))
	}
	tk.release(j)
	for i := range 3 {
		if e := tk.cache.Peek(0, []byte(fmt.Sprintf("user%05d", i))); e == nil || e.Pinned() {
			t.Fatalf("key %d after the release: %v", i, e)
		}
	}
}
