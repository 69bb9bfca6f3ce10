package host_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/wasmstream/wasmstream/host"
	"github.com/wasmstream/wasmstream/host/internal/kafka"
	"github.com/wasmstream/wasmstream/internal/guestbuild"
	"github.com/wasmstream/wasmstream/internal/hosttest"
	"github.com/wasmstream/wasmstream/store"
)

// BenchmarkChangelogRestore1M restores a partition holding 1M state entries (1M keys, one name
// each) from the changelog into a host with an empty disk, and reports the restore rate; then the
// same host, which kept its disk, is assigned the partition again after 1000 more snapshots were
// written and must read only those. Run with -benchtime 1x.
func BenchmarkChangelogRestore1M(b *testing.B) {
	for i := 0; i < b.N; i++ {
		took, full, tail := restore1M(b, 1_000_000)
		b.ReportMetric(float64(full.RestoredRecords-1)/took.Seconds(), "restored-keys/s")
		b.ReportMetric(float64(full.RestoredBytes)/took.Seconds()/(1<<20), "restore-MiB/s")
		b.ReportMetric(float64(tail.RestoredRecords), "tail-records")
	}
}

// TestChangelogRestore1M is the restore test: a host with an empty disk takes over a
// partition whose changelog holds 1M state entries (100,000 unless hosttest.Long: a hundred
// store transactions of restoreBatch all the same) and restores every one; the same host, which
// kept its disk, then reads only the 1001 records it lacks.
func TestChangelogRestore1M(t *testing.T) {
	took, full, tail := restore1M(t, hosttest.Scale(100_000, 1_000_000))
	t.Logf("full restore of %d records (%d bytes) in %s, host start included; tail restore read %d records",
		full.RestoredRecords, full.RestoredBytes, took.Round(time.Millisecond), tail.RestoredRecords)
}

// restore1M writes a changelog of keys key snapshots (one name each) and a position, restores
// it into a host with an empty disk, then writes 1000 more snapshots and a position and restores
// again into the same disk; it fails unless the first read every record and the second only
// the new ones, and that the restored store holds every key.
func restore1M(tb testing.TB, keys int) (took time.Duration, full, tail host.TaskStats) {
	module := guestbuild.Go(tb, "wordcount")
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "words", "counts"))
	if err != nil {
		tb.Fatal(err)
	}
	defer c.Close()
	cfg := kafka.Config{Brokers: c.ListenAddrs()}
	ctx := context.Background()
	if err := kafka.EnsureChangelog(ctx, cfg, "wc-changelog", 1, 0); err != nil {
		tb.Fatal(err)
	}
	w, err := kafka.NewChangelogWriter(cfg, "wc-changelog", 0, nil)
	if err != nil {
		tb.Fatal(err)
	}
	defer w.Close()
	write := func(from, n int) {
		for k := from; k < from+n; k++ {
			key := []byte(fmt.Sprintf("user%07d", k))
			snap := store.KeySnapshot{Key: key, Names: []store.Write{{Name: []byte("hello"), Value: []byte("1")}}, Mark: -1, HasMark: true}
			w.Write(0, clKey('k', "words", key), store.EncodeSnapshot(nil, &snap))
		}
		pos := make([]byte, 24)
		binary.BigEndian.PutUint64(pos[8:], ^uint64(0)) // Next 0, Horizon -1, Watermark -1
		binary.BigEndian.PutUint64(pos[16:], ^uint64(0))
		w.Write(0, clKey('p', "words", nil), pos)
		if _, err := w.Flush(ctx); err != nil {
			tb.Fatal(err)
		}
	}
	write(0, keys)

	dir := filepath.Join(tb.TempDir(), "data")
	run := func() host.TaskStats {
		tc := wordcountKafkaTask(module)
		tc.Changelog = host.ChangelogConfig{Enabled: true}
		h, err := host.New(host.Config{DataDir: dir, CheckpointInterval: 100 * time.Millisecond,
			Kafka: host.KafkaConfig{Brokers: c.ListenAddrs()}, Tasks: []host.TaskConfig{tc}})
		if err != nil {
			tb.Fatal(err)
		}
		rctx, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- h.Run(rctx) }()
		var st host.TaskStats
		for deadline := time.Now().Add(5 * time.Minute); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
			if s := h.Stats(); len(s) > 0 && s[0].Restores > 0 {
				st = s[0]
				break
			}
		}
		cancel()
		if err := <-done; err != nil {
			tb.Fatal(err)
		}
		return st
	}
	t0 := time.Now()
	full = run()
	took = time.Since(t0)
	if full.RestoredRecords != int64(keys)+1 {
		tb.Fatalf("full restore read %d records, want %d", full.RestoredRecords, keys+1)
	}
	write(keys, 1000)
	tail = run()
	if tail.RestoredRecords != 1001 {
		tb.Fatalf("the host that kept its disk read %d changelog records, want only the 1001 it lacks", tail.RestoredRecords)
	}
	r, err := host.OpenState(dir)
	if err != nil {
		tb.Fatal(err)
	}
	defer r.Close()
	n := 0
	if err := r.Scan("wc", nil, false, func(e host.StateEntry) bool { n++; return true }); err != nil {
		tb.Fatal(err)
	}
	if n != keys+1000 {
		tb.Fatalf("the restored store holds %d entries, want %d", n, keys+1000)
	}
	return took, full, tail
}

func clKey(kind byte, topic string, key []byte) []byte {
	b := []byte{kind}
	b = binary.BigEndian.AppendUint16(b, uint16(len(topic)))
	b = append(b, topic...)
	return append(b, key...)
}
