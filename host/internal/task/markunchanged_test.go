package task

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"testing"
	"time"

	"github.com/dgraph-io/badger/v4"

	"github.com/wasmstream/wasmstream/host/internal/modrt"
	"github.com/wasmstream/wasmstream/internal/guestbuild"
	"github.com/wasmstream/wasmstream/store"
)

// TestTimerFiringsWriteNoMarks: a checkpoint whose keys only had timers fire writes no mark
// entry for them (store.KeyWrites.MarkUnchanged): their mark and state version are those the
// store holds. 40 keys each get one record that sets a processing-time timer firing 4 times;
// the records, then each of the first 3 rounds of firings, are committed on their own (no record comes, so no
// position changes and the rule of marks below Next does not apply), then a module of state
// version 2 takes over and the last round fires under it. In the store's history the keys'
// mark entries were written twice each: by their record's checkpoint and by the checkpoint of
// the firing under the new version (which must carry version 2). Writing the mark with every
// firing gives 200 mark entries, not 80; skipping it when the version changed leaves version 0.
func TestTimerFiringsWriteNoMarks(t *testing.T) {
	const keys, rounds = 40, 4
	dir := t.TempDir()
	r := startRig(t, rigOpts{dir: dir, start: 0})
	for i := range keys {
		r.send(r0(fmt.Sprintf("k%02d", i), fmt.Sprintf("set w p 1000 again:%d", rounds-1)))
	}
	r.waitLines("log rec", keys)
	streams, err := r.db.Streams("timers")
	if err != nil || len(streams) != 1 {
		t.Fatalf("streams %v, %v; want one", streams, err)
	}
	s := streams[0].ID
	// committed waits until the store holds state name = n for every key: a checkpoint
	// committed it.
	committed := func(name string, n int) {
		t.Helper()
		waitUntil(t, fmt.Sprintf("%s = %d in the store for every key", name, n), func() bool {
			for i := range keys {
				v, _, err := r.db.Get("timers", s, []byte(fmt.Sprintf("k%02d", i)), []byte(name))
				if err != nil {
					t.Fatal(err)
				}
				if string(v) != fmt.Sprint(n) {
					return false
				}
			}
			return true
		})
	}
	committed("records", 1)
	for round := 1; round < rounds; round++ {
		r.advance(int64(round) * 1000)
		r.waitLines("log fired", round*keys)
		committed("fired", round)
	}
	wasm, err := os.ReadFile(guestbuild.Go(t, "testguests/timers/v2"))
	if err != nil {
		t.Fatal(err)
	}
	mod, err := r.rt.Compile(context.Background(), wasm, modrt.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { mod.Close(context.Background()) })
	if _, err := r.tk.Switch(context.Background(), mod, 2); err != nil {
		t.Fatal(err)
	}
	r.advance(rounds * 1000)
	r.waitLines("log fired", rounds*keys)
	committed("fired", rounds)
	r.stop()

	db, err := store.Open(filepath.Join(dir, "db"), store.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	for i := range keys {
		key := []byte(fmt.Sprintf("k%02d", i))
		mark, v, ok, err := db.MarkInfo("timers", s, key)
		if err != nil || !ok || mark != int64(i) || v != 2 {
			t.Errorf("key %s: mark %d version %d ok %v err %v; want mark %d (its record), version 2", key, mark, v, ok, err, i)
		}
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	marks, perCommit := markHistory(t, filepath.Join(dir, "db"))
	t.Logf("entries by checkpoint transaction: %s", perCommit)
	if marks != 2*keys {
		t.Errorf("the store's history holds %d mark entries, want %d (each key's first checkpoint and its version change)", marks, 2*keys)
	}
}

// markHistory opens a closed store's Badger directly and counts the mark entries of every
// version (Badger keeps each transaction's entries under its own version until a compaction,
// which a store this small does not run), and describes each write transaction's entries by
// table tag.
func markHistory(t *testing.T, dir string) (marks int, perCommit string) {
	t.Helper()
	bdb, err := badger.Open(badger.DefaultOptions(dir).WithLogger(nil).WithReadOnly(true))
	if err != nil {
		t.Fatal(err)
	}
	defer bdb.Close()
	byVersion := map[uint64]map[byte]int{}
	err = bdb.View(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{AllVersions: true})
		defer it.Close()
		for it.Rewind(); it.Valid(); it.Next() {
			item := it.Item()
			tag := item.Key()[0]
			if tag == 'm' {
				marks++
			}
			if byVersion[item.Version()] == nil {
				byVersion[item.Version()] = map[byte]int{}
			}
			byVersion[item.Version()][tag]++
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	versions := make([]uint64, 0, len(byVersion))
	for v := range byVersion {
		versions = append(versions, v)
	}
	sort.Slice(versions, func(i, j int) bool { return versions[i] < versions[j] })
	for _, v := range versions {
		c := byVersion[v]
		if c['c'] == 0 { // not a checkpoint's last transaction
			continue
		}
		perCommit += fmt.Sprintf(" [m=%d s=%d T=%d D=%d p=%d]", c['m'], c['s'], c['T'], c['D'], c['p'])
	}
	return marks, perCommit
}

// TestDedupeExpiriesWriteNoMarks measures the Badger entries of the checkpoints of examples/wasm/dedupe
// (a processing-time window per id) in bursts: each burst brings 100 new ids, then the clock
// moves 5 s and, once the burst is committed, the ids of the burst two windows back expire with
// no record around them. It logs the entries of each checkpoint by table and the mark entries
// of the run (-v), and checks that each id's mark entry was written once, by its record: the
// expiries change no mark (1,900 mark entries when every dirty key's mark was written, 1,000 now).
func TestDedupeExpiriesWriteNoMarks(t *testing.T) {
	const bursts, ids = 10, 100
	dir := t.TempDir()
	r := startRig(t, rigOpts{dir: dir, start: 0, guest: "dedupe", guestConfig: `{"window_seconds":10}`})
	var s uint32
	for b := range bursts {
		for i := range ids {
			r.send(r0(fmt.Sprintf("b%d-%03d", b, i), "x"))
		}
		waitUntil(t, "the burst committed", func() bool {
			if s == 0 {
				if streams, err := r.db.Streams("timers"); err == nil && len(streams) == 1 {
					s = streams[0].ID
				}
			}
			pos, _, err := r.db.Position("timers", s)
			return s != 0 && err == nil && pos.Next == int64((b+1)*ids)
		})
		r.advance(int64(b+1) * 5000)
		if old := b - 1; old >= 0 { // set at old*5000, due at old*5000+10000 ≤ (b+1)*5000
			waitUntil(t, "the expiry committed", func() bool {
				for i := range ids {
					if _, ok, err := r.db.Get("timers", s, []byte(fmt.Sprintf("b%d-%03d", old, i)), []byte("seen")); err != nil || ok {
						return false
					}
				}
				return true
			})
		}
	}
	r.stop()
	marks, perCommit := markHistory(t, filepath.Join(dir, "db"))
	t.Logf("dedupe, %d bursts of %d ids: %d mark entries; entries by checkpoint transaction:%s", bursts, ids, marks, perCommit)
	if marks != bursts*ids {
		t.Errorf("%d mark entries written, want %d: one per id, at its record", marks, bursts*ids)
	}
}

// waitUntil polls cond until it holds, failing the test after 30 s (hosttest.WaitFor, which
// this package cannot import).
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	deadline := time.After(30 * time.Second)
	for !cond() {
		select {
		case <-deadline:
			t.Fatalf("waited 30s for %s", what)
		case <-tick.C:
		}
	}
}
