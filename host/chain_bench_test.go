package host_test

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/wasmstream/wasmstream/host"
	"github.com/wasmstream/wasmstream/internal/guestbuild"
	"github.com/wasmstream/wasmstream/internal/hosttest"
)

// BenchmarkChainVsKafka measures two tasks, wordcount → counter (per key), connected in the host
// (a chained input) and through a Kafka topic on an in-process broker, over the same records:
// records/s from the host's start to the last output of the second task. Each sub-benchmark runs
// the whole input once per iteration (use -benchtime 1x).
//
//	go test ./host -run '^$' -bench ChainVsKafka -benchtime 1x
func BenchmarkChainVsKafka(b *testing.B) {
	wc, ctr := guestbuild.Go(b, "wordcount"), guestbuild.Go(b, "testguests/counter")
	const records = 100_000
	interval := 100 * time.Millisecond // the chain's latency: entries are visible downstream once committed
	input := writeLines(b, b.TempDir(), chainInput(records))
	tasks := func(out string) []host.TaskConfig {
		first := kvTask("wc", wc, input, "")
		first.Output = host.OutputConfig{Type: "stdout"}
		return []host.TaskConfig{first,
			{Name: "tot", Module: ctr, Inputs: []host.InputConfig{{Name: "counts", Type: "task", Task: "wc", Output: "counts"}},
				Output: host.OutputConfig{Type: "file", Path: out}}}
	}
	b.Run("chain", func(b *testing.B) {
		for range b.N {
			dir := b.TempDir()
			out := filepath.Join(dir, "out.ndjson")
			start := time.Now()
			h := hosttest.New(b, host.Config{DataDir: filepath.Join(dir, "data"), CheckpointInterval: interval, Tasks: tasks(out)})
			if err := h.Run(context.Background()); err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(records/time.Since(start).Seconds(), "records/s")
			for _, s := range h.Stats() {
				b.Logf("%s: %d checkpoints, %d chain entries, %d holds, %d pauses", s.Task, s.Checkpoints, s.ChainEntries, s.ChainHolds, s.Pauses)
			}
			if n := countLines(b, out); n != 2*records {
				b.Fatalf("%d outputs, want %d", n, 2*records)
			}
		}
	})
	b.Run("kafka", func(b *testing.B) {
		for range b.N {
			dir := b.TempDir()
			out := filepath.Join(dir, "out.ndjson")
			c := newCluster(b, "counts")
			ts := tasks(out)
			ts[0].Output = host.OutputConfig{Type: "kafka", Topic: "counts"}
			ts[1].Inputs = []host.InputConfig{{Name: "counts", Type: "kafka", Topics: []string{"counts"}}}
			start := time.Now()
			r := hosttest.Start(b, host.Config{DataDir: filepath.Join(dir, "data"), CheckpointInterval: interval, Kafka: host.KafkaConfig{Brokers: c.ListenAddrs()}, Tasks: ts})
			hosttest.WaitFor(b, 5*time.Minute, "every output", func() bool { return countLines(b, out) >= 2*records })
			b.ReportMetric(records/time.Since(start).Seconds(), "records/s")
			if err := r.Stop(); err != nil {
				b.Fatal(err)
			}
		}
	})
}
