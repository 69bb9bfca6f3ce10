package task

import (
	"errors"
	"testing"

	"github.com/wasmstream/wasmstream/host/internal/chain"
	"github.com/wasmstream/wasmstream/host/internal/modrt"
	"github.com/wasmstream/wasmstream/host/internal/sched"
	"github.com/wasmstream/wasmstream/store"
)

// TestChainTxnBound: a chained task's checkpoint is one store transaction, so the task
// checkpoints before a job would take the pending state changes and entries past it
// (chainOutgrows), and fails a job that alone would not fit (chainRoom). Entries pending for a
// reader's bound (25) ask for an early checkpoint (chainPendingFull), after which the task holds
// (chainBlocked).
func TestChainTxnBound(t *testing.T) {
	db, err := store.Open("", store.Options{InMemory: true, MaxTxnEntries: 100})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	l, err := chain.Open(db, "up", "counts")
	if err != nil {
		t.Fatal(err)
	}
	l.AddReader("down", "in", 25)
	tk, err := New(Config{Name: "up", Workers: 2, Store: db, ChainOutputs: map[string]*chain.Log{"counts": l}})
	if err != nil {
		t.Fatal(err)
	}
	tk.startChain()
	tk.streams[0] = &stream{}
	id := uint64(0)
	mk := func(n int) *job { // n keys, each with one write and one chained output: 3 entries a key
		id++
		j := tk.newJob(sched.Batch[*item]{ID: id, Items: keyedItems(n)})
		g := &j.groups[0]
		for _, it := range g.work {
			g.effects.Writes = append(g.effects.Writes, modrt.Write{Key: it.rec.Key, Name: []byte("n"), Value: []byte("1")})
			g.effects.Outputs = append(g.effects.Outputs, modrt.Output{Name: "counts", Key: it.rec.Key, Value: []byte("1")})
		}
		return j
	}
	apply := func(j *job) {
		for _, o := range j.groups[0].effects.Outputs {
			if !tk.chainOutput(&o) {
				t.Fatal("a chained output was not taken")
			}
		}
		tk.chainApplied(j)
	}
	for i := range 3 { // 3 × 30 entries: 90, the limit (100 less a tenth)
		j := mk(10)
		if err := tk.chainRoom(j); err != nil {
			t.Fatalf("chainRoom of 10 keys: %v", err)
		}
		if tk.chainOutgrows(j) {
			t.Fatalf("job %d of 10 keys outgrows the checkpoint with %+v pending", i, tk.chain.cost)
		}
		apply(j)
		if full := tk.chainPendingFull(); full != (i == 2) {
			t.Fatalf("with %d entries pending for a bound of 25, chainPendingFull = %v", 10*(i+1), full)
		}
	}
	if !tk.chainOutgrows(mk(1)) {
		t.Fatalf("with %+v pending, one more key does not outgrow the checkpoint", tk.chain.cost)
	}
	cp := store.Checkpoint{Task: "up"}
	tk.chainCollect(&cp)
	if len(cp.Chain) != 30 || cp.Chain[29].Offset != 29 {
		t.Fatalf("collected %d entries, the last numbered %d; want 30, 29", len(cp.Chain), cp.Chain[len(cp.Chain)-1].Offset)
	}
	if err := db.Commit(&cp); err != nil {
		t.Fatal(err)
	}
	if err := tk.chainCommitted(&cp); err != nil {
		t.Fatal(err)
	}
	if l.Head() != 30 || tk.chain.cost != (txnCost{}) || tk.chainOutgrows(mk(10)) {
		t.Fatalf("after the commit: head %d, cost %+v; want 30, none", l.Head(), tk.chain.cost)
	}
	if tk.chainPendingFull() || !tk.chainBlocked() || tk.stats.ChainHolds != 1 {
		t.Fatalf("after the commit: pending full %v, blocked %v, holds %d; want false, true, 1",
			tk.chainPendingFull(), tk.chainBlocked(), tk.stats.ChainHolds)
	}
	if err := tk.chainRoom(mk(40)); !errors.Is(err, modrt.ErrOverLimit) {
		t.Fatalf("chainRoom of 40 keys (120 entries) = %v, want ErrOverLimit", err)
	}
}
