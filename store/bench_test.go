package store

import (
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"testing"
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
// each: the value and the mark).
func BenchmarkCommit(b *testing.B) {
	const keys = 10_000
	for _, bc := range []struct {
		name string
		opts Options
	}{
		{"keys=10k", Options{}},
		{"keys=10k/sync", Options{SyncWrites: true}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			db := openTestDB(b, bc.opts)
			s := mustStreamID(b, db, "bench", "s")
			cps := []*Checkpoint{benchCheckpoint(s, keys, 0), benchCheckpoint(s, keys, 1)}
			txns := 0
			db.opts.beforeTxn = func(int) error { txns++; return nil }
			b.ResetTimer()
			for i := 0; b.Loop(); i++ {
				if err := db.Commit(cps[i%2]); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.N*keys)/b.Elapsed().Seconds(), "keys/s")
			b.ReportMetric(float64(b.N*(2*keys+1))/b.Elapsed().Seconds(), "entries/s")
			b.ReportMetric(float64(txns)/float64(b.N), "txns/op")
		})
	}
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
