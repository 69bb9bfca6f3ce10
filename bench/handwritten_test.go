package bench

import (
	"context"
	"errors"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/dgraph-io/badger/v4"
	"github.com/twmb/franz-go/pkg/kgo"
)

// handRun runs the hand-written version of task ("noop", "counter" or "wordcount"): what a Go
// developer writes without a framework, with wasmstream's durability. A franz-go group
// consumer, state in a map (read from Badger the first time a key is met), outputs produced
// asynchronously, both with wasmstream's client settings (clientOpts); every 200 ms (wasmstream's
// checkpoint interval here) the keys changed since the last checkpoint go to Badger in one
// write batch, the producer is flushed, and then the offsets polled so far are committed.
func handRun(b *testing.B, c cluster, task string, records int, name string) pipelineRun {
	if name == "" {
		name = "hand-" + task
	}
	db, err := badger.Open(badger.DefaultOptions(filepath.Join(b.TempDir(), "badger")).WithLogger(nil))
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close()
	cl, err := kgo.NewClient(clientOpts(c, name)...)
	if err != nil {
		b.Fatal(err)
	}
	defer cl.Close()
	ctx := context.Background()
	out := name + "-out"

	state := map[string]uint64{}
	dirty := map[string]struct{}{}
	// get returns the count stored under k: from the map, else from Badger.
	get := func(k string) uint64 {
		if v, ok := state[k]; ok {
			return v
		}
		var v uint64
		err := db.View(func(txn *badger.Txn) error {
			item, err := txn.Get([]byte(k))
			if errors.Is(err, badger.ErrKeyNotFound) {
				return nil
			}
			if err != nil {
				return err
			}
			return item.Value(func(b []byte) error {
				v, err = strconv.ParseUint(string(b), 10, 64)
				return err
			})
		})
		if err != nil {
			b.Fatal(err)
		}
		return v
	}
	put := func(k string, v uint64) {
		state[k] = v
		dirty[k] = struct{}{}
	}
	checkpoint := func() {
		wb := db.NewWriteBatch()
		for k := range dirty {
			if err := wb.Set([]byte(k), strconv.AppendUint(nil, state[k], 10)); err != nil {
				b.Fatal(err)
			}
		}
		if err := wb.Flush(); err != nil {
			b.Fatal(err)
		}
		clear(dirty)
		if err := cl.Flush(ctx); err != nil {
			b.Fatal(err)
		}
		if err := cl.CommitUncommittedOffsets(ctx); err != nil {
			b.Fatal(err)
		}
	}

	m := newMeter(records)
	last := time.Now()
	n := 0
	for n < records {
		fs := cl.PollRecords(ctx, 10000)
		if err := fs.Err0(); err != nil {
			b.Fatal(err)
		}
		fs.EachRecord(func(r *kgo.Record) {
			n++
			switch task {
			case "counter":
				k := string(r.Key)
				v := get(k) + 1
				put(k, v)
				cl.Produce(ctx, &kgo.Record{Topic: out, Key: r.Key, Value: strconv.AppendUint(nil, v, 10)}, nil)
			case "wordcount":
				eachWord(r.Value, func(w []byte) {
					k := string(r.Key) + "\x00" + string(w)
					v := get(k) + 1
					put(k, v)
					val := strconv.AppendUint(append(append(make([]byte, 0, len(w)+8), w...), ' '), v, 10)
					cl.Produce(ctx, &kgo.Record{Topic: out, Key: r.Key, Value: val}, nil)
				})
			}
		})
		if time.Since(last) >= 200*time.Millisecond || n >= records {
			checkpoint()
			last = time.Now()
			// Sampled after a checkpoint only, as wasmstream publishes its counts: the
			// measured window is whole checkpoint cycles.
			m.seen(n)
		}
	}
	return m.done()
}
