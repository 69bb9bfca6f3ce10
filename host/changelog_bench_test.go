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
	"github.com/wasmstream/wasmstream/store"
)

// BenchmarkChangelogRestore1M restores a partition holding 1M state entries (1M keys, one name
// each) from the changelog into a host with an empty disk, and reports the restore rate; then the
// same host, which kept its disk, is assigned the partition again after 1000 more snapshots were
// written and must read only those. Run with -benchtime 1x.
func BenchmarkChangelogRestore1M(b *testing.B) {
	const keys = 1_000_000
	module := guestbuild.Go(b, "wordcount")
	for i := 0; i < b.N; i++ {
		c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "words", "counts"))
		if err != nil {
			b.Fatal(err)
		}
		cfg := kafka.Config{Brokers: c.ListenAddrs()}
		ctx := context.Background()
		if err := kafka.EnsureChangelog(ctx, cfg, "wc-changelog", 1, 0); err != nil {
			b.Fatal(err)
		}
		w, err := kafka.NewChangelogWriter(cfg, "wc-changelog", nil)
		if err != nil {
			b.Fatal(err)
		}
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
				b.Fatal(err)
			}
		}
		write(0, keys)

		dir := filepath.Join(b.TempDir(), "data")
		run := func() host.TaskStats {
			tc := wordcountKafkaTask(module)
			tc.Changelog = host.ChangelogConfig{Enabled: true}
			h, err := host.New(host.Config{DataDir: dir, CheckpointInterval: 100 * time.Millisecond,
				Kafka: host.KafkaConfig{Brokers: c.ListenAddrs()}, Tasks: []host.TaskConfig{tc}})
			if err != nil {
				b.Fatal(err)
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
				b.Fatal(err)
			}
			return st
		}
		t0 := time.Now()
		full := run()
		took := time.Since(t0)
		if full.RestoredRecords != keys+1 {
			b.Fatalf("full restore read %d records, want %d", full.RestoredRecords, keys+1)
		}
		write(keys, 1000)
		tail := run()
		if tail.RestoredRecords != 1001 {
			b.Fatalf("the host that kept its disk read %d changelog records, want only the 1001 it lacks", tail.RestoredRecords)
		}
		b.ReportMetric(float64(keys)/took.Seconds(), "restored-keys/s")
		b.ReportMetric(float64(full.RestoredBytes)/took.Seconds()/(1<<20), "restore-MiB/s")
		b.ReportMetric(float64(tail.RestoredRecords), "tail-records")
		w.Close()
		c.Close()
	}
}

func clKey(kind byte, topic string, key []byte) []byte {
	b := []byte{kind}
	b = binary.BigEndian.AppendUint16(b, uint16(len(topic)))
	b = append(b, topic...)
	return append(b, key...)
}
