package store

import (
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"os"
	"sync"
	"syscall"
	"testing"
	"time"
)

// benchCheckpoint returns a checkpoint of n keys of 16 bytes, each with one
// 8-byte value and a mark, as a counting task would write.
func benchCheckpoint(s uint32, n, round int) *Checkpoint {
	cp := &Checkpoint{Task: "bench", Keys: make([]KeyWrites, n),
		Positions: []StreamPosition{{s, Position{Next: int64(round * n), Horizon: int64(round*n + n - 1)}}}}
	for i := range cp.Keys {
		key := fmt.Appendf(nil, "key-%012d", i)
		val := binary.BigEndian.AppendUint64(nil, uint64(round))
		cp.Keys[i] = KeyWrites{Stream: s, Key: key, Mark: int64(round*n + i),
			Writes: []Write{{Name: []byte("count"), Value: val}}}
	}
	return cp
}

// BenchmarkCommit commits checkpoints of 10k dirty keys (two Badger entries
// each: the value and the mark; one with kept=marks, each key's mark stored
// and below the checkpoint's Next; one with kept=set, each key's mark stored
// and its new mark above Next, in the applied set the checkpoint gives, as at
// saturation). It reports the process's CPU per key
// (Badger's write goroutine included) beside the wall time. The memtable=
// cases vary Options.MemTableSize.
func BenchmarkCommit(b *testing.B) {
	const keys = 10_000
	for _, bc := range []struct {
		name string
		opts Options
		kept bool
		set  bool
	}{
		{"keys=10k", Options{}, false, false},
		{"keys=10k/sync", Options{SyncWrites: true}, false, false},
		{"keys=10k/kept=marks", Options{}, true, false},
		{"keys=10k/kept=set", Options{}, false, true},
		{"keys=10k/memtable=8M", Options{MemTableSize: 8 << 20}, false, false},
		{"keys=10k/memtable=16M", Options{MemTableSize: 16 << 20}, false, false},
		{"keys=10k/memtable=64M", Options{MemTableSize: 64 << 20}, false, false},
	} {
		b.Run(bc.name, func(b *testing.B) {
			db := openTestDB(b, bc.opts)
			s := mustStreamID(b, db, "bench", "s")
			cps := []*Checkpoint{benchCheckpoint(s, keys, 0), benchCheckpoint(s, keys, 1)}
			entries := 2*keys + 2
			if bc.kept {
				// Each key's mark below the checkpoint's Next, and stored by the checkpoint
				// before: only the values are written.
				mustCommit(b, db, benchCheckpoint(s, keys, 0))
				for _, cp := range cps {
					cp.Positions[0].Position.Next = 2 * keys
					for i := range cp.Keys {
						cp.Keys[i].MarkStored = true
					}
				}
				entries = keys + 2
			}
			if bc.set {
				// Next stays at 0 (a record before them never completes): every new mark is
				// above it, and in the set of the offsets completed, 0 excluded.
				mustCommit(b, db, benchCheckpoint(s, keys, 0))
				for _, cp := range cps {
					sp := &cp.Positions[0]
					sp.Position.Next = 0
					bits := make([]uint64, (sp.Position.Horizon+64)/64)
					for o := int64(1); o <= sp.Position.Horizon; o++ {
						bits[o/64] |= 1 << (o % 64)
					}
					cp.Applied = []StreamApplied{{Stream: s, Bits: bits}}
					for i := range cp.Keys {
						cp.Keys[i].MarkStored = true
					}
				}
				entries = keys + 3
			}
			txns := 0
			db.opts.beforeTxn = func(int) error { txns++; return nil }
			cpu := cpuTime()
			b.ResetTimer()
			for i := 0; b.Loop(); i++ {
				if err := db.Commit(cps[i%2]); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.N*keys)/b.Elapsed().Seconds(), "keys/s")
			b.ReportMetric(float64(b.N*entries)/b.Elapsed().Seconds(), "entries/s")
			b.ReportMetric(float64(txns)/float64(b.N), "txns/op")
			b.ReportMetric(float64((cpuTime()-cpu).Nanoseconds())/float64(b.N*keys), "cpu-ns/key")
		})
	}
}

// BenchmarkCommitParallel is BenchmarkCommit's keys=10k case committed by 1, 2 and 4 goroutines
// at once, each its own stream (as the loops of a task commit their partitions): one op is one
// round in which every goroutine commits one checkpoint. keys/s counts every goroutine's keys;
// cpu-ns/key is the process's CPU (Badger's write goroutine included) per key.
func BenchmarkCommitParallel(b *testing.B) {
	const keys = 10_000
	for _, g := range []int{1, 2, 4} {
		b.Run(fmt.Sprintf("keys=10k/goroutines=%d", g), func(b *testing.B) {
			db := openTestDB(b, Options{})
			cps := make([][2]*Checkpoint, g)
			for i := range cps {
				s := mustStreamID(b, db, "bench", fmt.Sprintf("s%d", i))
				cps[i] = [2]*Checkpoint{benchCheckpoint(s, keys, 0), benchCheckpoint(s, keys, 1)}
			}
			cpu := cpuTime()
			b.ResetTimer()
			for round := 0; b.Loop(); round++ {
				var wg sync.WaitGroup
				for i := range cps {
					wg.Go(func() {
						if err := db.Commit(cps[i][round%2]); err != nil {
							b.Error(err)
						}
					})
				}
				wg.Wait()
			}
			b.ReportMetric(float64(b.N*g*keys)/b.Elapsed().Seconds(), "keys/s")
			b.ReportMetric(float64((cpuTime()-cpu).Nanoseconds())/float64(b.N*g*keys), "cpu-ns/key")
		})
	}
}

// cpuTime is the process's CPU time so far, user and system.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkGet reads random names from a store of 100k keys.
func BenchmarkGet(b *testing.B) {
	const keys, perCommit = 100_000, 10_000
	db := openTestDB(b, Options{})
	s := mustStreamID(b, db, "bench", "s")
	for i := range keys / perCommit {
		cp := benchCheckpoint(s, perCommit, 0)
		for j := range cp.Keys {
			cp.Keys[j].Key = fmt.Appendf(nil, "key-%012d", i*perCommit+j)
		}
		cp.Positions = nil
		mustCommit(b, db, cp)
	}
	r := rand.New(rand.NewPCG(1, 2))
	name := []byte("count")
	key := make([]byte, 0, 16)
	for b.Loop() {
		key = fmt.Appendf(key[:0], "key-%012d", r.IntN(keys))
		if _, ok, err := db.Get("bench", s, key, name); err != nil || !ok {
			b.Fatalf("Get(%s) = %v, %v", key, ok, err)
		}
	}
}

// BenchmarkDueTimers measures one DueTimers call that returns the 100 timers
// due, out of 1k and 1M pending timers (10 per key) in domain 0, and one that
// only peeks at the next due time. Its cost is a seek and a walk of 101 index
// entries plus 100 point reads of the timers: it grows with the depth of
// Badger's LSM tree, not with the number of pending timers. The last case
// measures the same call after a fifth of the timers has fired (been deleted).
func BenchmarkDueTimers(b *testing.B) {
	const perKey, due, perCommit = 10, 100, 100_000
	for _, bc := range []struct {
		name    string
		pending int
	}{
		{"pending=1k", 1_000},
		{"pending=1M", 1_000_000},
	} {
		b.Run(bc.name, func(b *testing.B) {
			dir := b.TempDir()
			db := openTestDBAt(b, dir, Options{})
			s := mustStreamID(b, db, "bench", "s")
			// Due times are a permutation of 0..pending-1, spread over the
			// keys so that the due order is not the key order.
			r := rand.New(rand.NewPCG(3, 4))
			dues := r.Perm(bc.pending)
			start := time.Now()
			payload := []byte("payload-16-bytes")
			for base := 0; base < bc.pending; base += perCommit {
				cp := &Checkpoint{Task: "bench"}
				for i := base; i < min(base+perCommit, bc.pending); i += perKey {
					kw := KeyWrites{Stream: s, Key: fmt.Appendf(nil, "key-%012d", i/perKey), Mark: NoneApplied}
					for j := range perKey {
						kw.Timers = append(kw.Timers, TimerOp{Name: fmt.Appendf(nil, "timer-%d", j),
							Due: int64(dues[i+j]), Payload: payload})
					}
					cp.Keys = append(cp.Keys, kw)
				}
				mustCommit(b, db, cp)
			}
			// Reopen, so that both stores are read from tables on disk (a
			// close flushes the memtables), not the 1k one from memory.
			mustClose(b, db)
			db = openTestDBAt(b, dir, Options{})
			b.Logf("built %d timers in %v", bc.pending, time.Since(start).Round(time.Millisecond))
			for _, m := range []struct {
				name  string
				limit int
				want  int
			}{
				{"due=100", 1000, due}, // the timers due 0..99 (upTo 99), then next
				{"peek", 0, 0},         // the seek alone: next only
			} {
				b.Run(m.name, func(b *testing.B) {
					for b.Loop() {
						n := 0
						next, ok, err := db.DueTimers("bench", s, 0, due-1, nil, m.limit, func(Timer) bool { n++; return true })
						if err != nil || n != m.want || !ok || next != int64(m.want) {
							b.Fatalf("DueTimers = %d timers, next %d, %v, %v; want %d, next %d", n, next, ok, err, m.want, m.want)
						}
					}
					b.ReportMetric(float64(m.want), "timers/op")
				})
			}

			// Fire (delete) the first fifth of the timers, as a host would,
			// and measure again: their tombstones stay in the due index until
			// compaction. The first call after a reopen walks them once; later
			// calls start at the in-memory due floor.
			fired := bc.pending / 5
			byDue := make([]int, bc.pending)
			for i, d := range dues {
				byDue[d] = i
			}
			ops := map[int][]TimerOp{} // by key
			for d := range fired {
				i := byDue[d]
				ops[i/perKey] = append(ops[i/perKey], TimerOp{Name: fmt.Appendf(nil, "timer-%d", i%perKey), Delete: true})
				if (d+1)%perCommit == 0 || d == fired-1 {
					cp := &Checkpoint{Task: "bench"}
					for k, ops := range ops {
						cp.Keys = append(cp.Keys, KeyWrites{Stream: s, Key: fmt.Appendf(nil, "key-%012d", k), Mark: NoneApplied, Timers: ops})
					}
					mustCommit(b, db, cp)
					clear(ops)
				}
			}
			mustClose(b, db)
			db = openTestDBAt(b, dir, Options{})
			upTo := int64(fired + due - 1)
			call := func(b *testing.B) {
				n := 0
				next, ok, err := db.DueTimers("bench", s, 0, upTo, nil, 1000, func(Timer) bool { n++; return true })
				if err != nil || n != due || !ok || next != upTo+1 {
					b.Fatalf("DueTimers after firing = %d timers, next %d, %v, %v; want %d, next %d", n, next, ok, err, due, upTo+1)
				}
			}
			start = time.Now()
			call(b)
			b.Logf("first call after firing %d timers and reopening: %v", fired, time.Since(start).Round(time.Microsecond))
			b.Run(fmt.Sprintf("fired=%d/due=100", fired), func(b *testing.B) {
				for b.Loop() {
					call(b)
				}
				b.ReportMetric(float64(due), "timers/op")
			})
		})
	}
}

// BenchmarkRestore restores 100k keys of one 8-byte name and a mark each, in
// Restore calls of 10k snapshots (a changelog consumer's batch), into an empty
// stream and over an existing copy of the same keys.
func BenchmarkRestore(b *testing.B) {
	const keys, batch = 100_000, 10_000
	snaps := make([]KeySnapshot, keys)
	for i := range snaps {
		snaps[i] = KeySnapshot{Key: fmt.Appendf(nil, "key-%012d", i), Mark: int64(i), HasMark: true,
			Names: []Write{{Name: []byte("count"), Value: binary.BigEndian.AppendUint64(nil, uint64(i))}}}
	}
	restore := func(b *testing.B, db *DB, s uint32) {
		for i := 0; i < keys; i += batch {
			pos := &Position{Next: int64(i + batch), Horizon: int64(i + batch - 1), Watermark: -1}
			if err := db.Restore("bench", s, snaps[i:i+batch], pos); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.Run("keys=100k/empty", func(b *testing.B) {
		db := openTestDB(b, Options{})
		for i := 0; b.Loop(); i++ {
			b.StopTimer()
			s := mustStreamID(b, db, "bench", fmt.Sprint("s", i))
			b.StartTimer()
			restore(b, db, s)
		}
		b.ReportMetric(float64(b.N*keys)/b.Elapsed().Seconds(), "keys/s")
	})
	b.Run("keys=100k/overwrite", func(b *testing.B) {
		db := openTestDB(b, Options{})
		s := mustStreamID(b, db, "bench", "s")
		restore(b, db, s)
		b.ResetTimer()
		for b.Loop() {
			restore(b, db, s)
		}
		b.ReportMetric(float64(b.N*keys)/b.Elapsed().Seconds(), "keys/s")
	})
}

// BenchmarkOpen1M opens a closed store of 1M keys (2M Badger entries: values and marks) and
// reports what verifying its files (checkFiles: the MANIFEST and every table's checksums)
// adds to Badger's own open: verify-ms against badger-ms, and the store's size.
//
//	go test ./store -run '^$' -bench Open1M -benchtime 5x
func BenchmarkOpen1M(b *testing.B) {
	const keys, perCommit = 1_000_000, 10_000
	dir := b.TempDir()
	db := openTestDBAt(b, dir, Options{})
	s := mustStreamID(b, db, "bench", "s")
	for i := range keys / perCommit {
		cp := benchCheckpoint(s, perCommit, i)
		for j := range cp.Keys {
			cp.Keys[j].Key = fmt.Appendf(nil, "key-%012d", i*perCommit+j)
		}
		mustCommit(b, db, cp)
	}
	mustClose(b, db)
	var verify, open time.Duration
	for b.Loop() {
		t0 := time.Now()
		if _, err := checkFiles(dir, true); err != nil {
			b.Fatal(err)
		}
		t1 := time.Now()
		bdb, err := openBadger(dir, Options{}.withDefaults().badgerOptions(dir))
		if err != nil {
			b.Fatal(err)
		}
		open += time.Since(t1)
		verify += t1.Sub(t0)
		if err := bdb.Close(); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(verify.Milliseconds())/float64(b.N), "verify-ms")
	b.ReportMetric(float64(open.Milliseconds())/float64(b.N), "badger-ms")
	b.ReportMetric(float64(dirSize(b, dir))/(1<<20), "MiB")
}

func dirSize(b *testing.B, dir string) int64 {
	entries, err := os.ReadDir(dir)
	if err != nil {
		b.Fatal(err)
	}
	var n int64
	for _, e := range entries {
		if info, err := e.Info(); err == nil && !e.IsDir() {
			n += info.Size()
		}
	}
	return n
}
