package task

import (
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"testing"

	"github.com/wasmstream/wasmstream/host/internal/kafka"
	"github.com/wasmstream/wasmstream/store"
)

// TestChangelogAppliedModel is store.TestAppliedSetModel's changelog variant: a model host over
// one Kafka partition (keys o%16, each key's state the list of offsets applied to it, up to 40
// records in flight completing out of order, so that Next trails the completions and
// checkpoints keep marks by the applied set) writes each checkpoint to a changelog as
// writeChangelog does, with this package's record encoding: the early position record (the
// stored position with the new horizon, the stored set), the changed keys' snapshots (their
// true marks), two unchanged keys written again from the store alone (their stored marks, which
// the set may have left low: rewriteStale, a key only timers changed), and the final position
// record with the set the store holds once the checkpoint commits (store.DB.AppliedAfter). Then
// it commits the checkpoint, and one in four restarts from the store (its replay skipping by the
// stored set and marks, its completed offsets above Next forgotten). After every checkpoint, a restore of the changelog cut after a
// random record (a host killed while writing it) and of the whole changelog, through restoring
// (parseChangelogPosition, finish), into a second store, must be exact: replay from the
// restored position skips a record, by the set or its key's mark, exactly when its key's
// restored state holds it. Dropping the set from the position record, or restoring without it,
// fails it (keys whose restored mark is low with their offsets at or above Next in the set).
func TestChangelogAppliedModel(t *testing.T) {
	relied := 0
	for seed := range uint64(3) {
		relied += runChangelogModel(t, seed)
	}
	if relied == 0 {
		t.Fatal("no restore had a key whose restored mark relied on the set")
	}
	t.Logf("%d restored keys relied on the set", relied)
}

// clRec is a changelog record of the model: its key and value.
type clRec struct{ key, val []byte }

func runChangelogModel(t *testing.T, seed uint64) (relied int) {
	const (
		keys   = 16
		end    = int64(800)
		window = 40
		topic  = "in"
	)
	open := func(dir string) (*store.DB, uint32) {
		db, err := store.Open(dir, store.Options{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { db.Close() })
		id, err := db.StreamID("t", "kafka:in/0")
		if err != nil {
			t.Fatal(err)
		}
		return db, id
	}
	db, s := open(filepath.Join(t.TempDir(), "a"))
	rdb, rs := open(filepath.Join(t.TempDir(), "b"))
	rng := rand.New(rand.NewPCG(seed, 11))
	key := func(o int64) int { return int(o % keys) }
	name := func(k int) []byte { return []byte(fmt.Sprint(k)) }
	// A key's state: the offsets applied to it, 8 bytes each.
	encode := func(l []int64) []byte {
		b := make([]byte, 0, 8*len(l))
		for _, o := range l {
			b = binary.BigEndian.AppendUint64(b, uint64(o))
		}
		return b
	}
	decode := func(b []byte) (l []int64) {
		for ; len(b) >= 8; b = b[8:] {
			l = append(l, int64(binary.BigEndian.Uint64(b)))
		}
		return l
	}

	state := map[int][]int64{}
	mark := map[int]int64{}
	stored := map[int]bool{}
	dirty := map[int]bool{}
	completed := map[int64]bool{}
	var inflight []int64
	var log []clRec
	admitted, prefix, horizon := int64(0), int64(0), int64(-1)
	durable := store.Position{Next: -1, Horizon: -1, Watermark: -1}
	// After a restart: replay up to the stored horizon skips the records in the stored set or at
	// or below their key's stored mark.
	replayTo, replaySet, storedMark := int64(-1), store.AppliedSet{}, map[int]int64{}

	// restore replays log into the second store from scratch, as a host on an empty disk, and
	// checks replay from what it restored.
	restore := func(log []clRec, when string) {
		t.Helper()
		if err := rdb.DropStream("t", rs); err != nil {
			t.Fatal(err)
		}
		r := &restoring{db: rdb, task: "t", id: rs, topic: topic}
		for i, rec := range log {
			if err := r.add(rec.key, rec.val, kafka.RecordMeta{Epoch: 1, LeaderEpoch: -1}, int64(i)); err != nil {
				t.Fatal(err)
			}
		}
		if err := r.flush(); err != nil {
			t.Fatal(err)
		}
		if err := r.finish(store.Position{}, false, int64(len(log)), int64(len(log))); err != nil {
			t.Fatal(err)
		}
		pos, ok, err := rdb.Position("t", rs)
		if err != nil || !ok {
			t.Fatalf("%s: restored no position: %v", when, err)
		}
		set, err := rdb.Applied("t", rs)
		if err != nil {
			t.Fatal(err)
		}
		applied := map[int64]bool{}
		marks := map[int]int64{}
		for k := range keys {
			v, _, err := rdb.Get("t", rs, name(k), []byte("a"))
			if err != nil {
				t.Fatal(err)
			}
			for _, o := range decode(v) {
				applied[o] = true
			}
			marks[k] = store.DropMark
			if m, ok, err := rdb.Mark("t", rs, name(k)); err != nil {
				t.Fatal(err)
			} else if ok {
				marks[k] = m
			}
		}
		low := map[int]bool{}
		for o := range end {
			k := key(o)
			switch {
			case o < pos.Next && !applied[o]:
				t.Fatalf("seed %d, %s: offset %d below Next %d not applied", seed, when, o, pos.Next)
			case o >= pos.Next && o <= pos.Horizon:
				skip := set.Has(o) || o <= marks[k]
				if skip != applied[o] {
					t.Fatalf("seed %d, %s: offset %d (key %d, restored mark %d, in set %v, Next %d, Horizon %d): replay skips it %v, applied %v",
						seed, when, o, k, marks[k], set.Has(o), pos.Next, pos.Horizon, skip, applied[o])
				}
				if applied[o] && o > marks[k] {
					low[k] = true
				}
			case o > pos.Horizon && applied[o]:
				t.Fatalf("seed %d, %s: offset %d above the horizon %d applied", seed, when, o, pos.Horizon)
			}
		}
		relied += len(low)
	}

	for cpn := 0; prefix < end || len(dirty) > 0; cpn++ {
		if cpn > 10000 {
			t.Fatal("the model does not finish")
		}
		for range 1 + rng.IntN(8) {
			for n := 0; n < window && len(inflight) < window && admitted < end; n++ {
				o := admitted
				admitted++
				if m, ok := storedMark[key(o)]; o <= replayTo && (replaySet.Has(o) || ok && o <= m) {
					completed[o] = true // skipped: applied before the restart
					continue
				}
				inflight = append(inflight, o)
			}
			for n := rng.IntN(window/4 + 1); n > 0 && len(inflight) > 0; n-- {
				i := rng.IntN(len(inflight))
				if len(inflight) > 1 && i == 0 && rng.IntN(4) > 0 {
					i = 1 // mostly not the oldest: Next trails the completions
				}
				for j := range i { // a key's records apply in order
					if key(inflight[j]) == key(inflight[i]) {
						i = j
						break
					}
				}
				o := inflight[i]
				inflight = slices.Delete(inflight, i, i+1)
				k := key(o)
				state[k] = append(state[k], o)
				mark[k] = o
				dirty[k] = true
				completed[o] = true
				horizon = max(horizon, o)
			}
			for completed[prefix] {
				prefix++
			}
		}

		// The checkpoint, as collectPositions gives it: the completed offsets above Next.
		cp := &store.Checkpoint{Task: "t"}
		for k := range keys {
			if dirty[k] {
				cp.Keys = append(cp.Keys, store.KeyWrites{Stream: s, Key: name(k), Mark: mark[k], StateVersion: 1, MarkStored: stored[k],
					Writes: []store.Write{{Name: []byte("a"), Value: encode(state[k])}}})
			}
		}
		var bits []uint64
		for o := range completed {
			if o >= prefix {
				d := o - prefix
				for int64(len(bits)) <= d/64 {
					bits = append(bits, 0)
				}
				bits[d/64] |= 1 << (d % 64)
			}
		}
		pos := store.Position{Next: prefix, Horizon: horizon, Watermark: -1}
		cp.Positions = []store.StreamPosition{{Stream: s, Position: pos}}
		cp.Applied = []store.StreamApplied{{Stream: s, Bits: bits}}

		// Its changelog records, as writeChangelog (and rewriteStale) write them.
		before := len(log)
		early := durable
		early.Horizon = max(early.Horizon, horizon)
		early.Next = max(early.Next, 0)
		set, err := db.Applied("t", s)
		if err != nil {
			t.Fatal(err)
		}
		log = append(log, clRec{changelogPositionKey(topic, [16]byte{}), changelogPosition(early, set)})
		refs := make([]store.KeyRef, 0, len(cp.Keys)+2)
		for i := range cp.Keys {
			refs = append(refs, store.KeyRef{Stream: s, Key: cp.Keys[i].Key, Written: &cp.Keys[i]})
		}
		for range 2 {
			if k := rng.IntN(keys); stored[k] && !dirty[k] {
				refs = append(refs, store.KeyRef{Stream: s, Key: name(k)}) // from the store alone
			}
		}
		var scratch []byte
		if err := db.Snapshots("t", refs, func(i int, snap *store.KeySnapshot) error {
			if refs[i].Written != nil {
				snap.Apply(refs[i].Written)
			}
			kv, n := snapshotRecord(&scratch, topic, snap)
			log = append(log, clRec{kv[:n], kv[n:]})
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		sets, err := db.AppliedAfter(cp)
		if err != nil {
			t.Fatal(err)
		}
		log = append(log, clRec{changelogPositionKey(topic, [16]byte{}), changelogPosition(pos, sets[0])})

		// A host killed while writing them: the store never got the checkpoint.
		if cut := before + 1 + rng.IntN(len(log)-before); cut < len(log) {
			restore(log[:cut], fmt.Sprintf("checkpoint %d cut after %d of its %d records", cpn, cut-before, len(log)-before))
		}
		if err := db.Commit(cp); err != nil {
			t.Fatal(err)
		}
		durable = pos
		for k := range dirty {
			stored[k] = true
		}
		clear(dirty)
		restore(log, fmt.Sprintf("checkpoint %d", cpn))
		if rng.IntN(4) == 0 {
			// A restart: what is in flight is lost, and the completed offsets above Next are
			// known again only as replay reaches them (the store's set keeps them meanwhile).
			inflight = nil
			clear(completed)
			admitted, prefix, replayTo = durable.Next, durable.Next, horizon
			if replaySet, err = db.Applied("t", s); err != nil {
				t.Fatal(err)
			}
			for k := range keys {
				if m, ok, err := db.Mark("t", s, name(k)); err != nil {
					t.Fatal(err)
				} else if ok {
					storedMark[k] = m
				}
			}
		}
	}
	return relied
}
