package host_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/wasmstream/wasmstream/host"
	"github.com/wasmstream/wasmstream/internal/guestbuild"
)

func cpuNow() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkKafkaPipeline measures on one in-process cluster, in one run, over the same 4-partition
// topic of ~100-byte records: (a) raw franz-go consume → produce, committing per poll (the
// ceiling), (b) wasmstream with the no-op wasm task, (c) with the wasm wordcount; it reports
// records/s, CPU µs per record (the whole process, broker included) and the ratios.
// BENCH_RECORDS sets the count (default 1M): go test -run '^$' -bench KafkaPipeline -benchtime 1x ./host
func BenchmarkKafkaPipeline(b *testing.B) {
	records := benchRecords(1_000_000)
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(4, "in", "raw-out", "noop-out", "wc-out"))
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	prod, _ := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.ProducerLinger(5*time.Millisecond))
	defer prod.Close()
	words := strings.Fields("alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu nu xi omicron pi rho sigma")
	for i := 0; i < records; i++ {
		var sb strings.Builder
		for sb.Len() < 90 {
			sb.WriteString(words[(i*7+sb.Len())%len(words)])
			sb.WriteByte(' ')
		}
		prod.Produce(context.Background(), &kgo.Record{Topic: "in", Key: []byte(fmt.Sprintf("user%05d", i%10000)), Value: []byte(sb.String())}, nil)
	}
	if err := prod.Flush(context.Background()); err != nil {
		b.Fatal(err)
	}
	noop, wc := guestbuild.Go(b, "testguests/noop"), guestbuild.Go(b, "wordcount")
	for i := 0; i < b.N; i++ {
		rawRate, rawCPU := rawPassthrough(b, c, records)
		noopRate, noopCPU := hostOverKafka(b, c, noop, "noop", records)
		wcRate, wcCPU := hostOverKafka(b, c, wc, "wc", records)
		b.ReportMetric(rawRate, "raw-rec/s")
		b.ReportMetric(noopRate, "noop-rec/s")
		b.ReportMetric(wcRate, "wordcount-rec/s")
		b.ReportMetric(rawCPU, "raw-cpu-µs/rec")
		b.ReportMetric(noopCPU, "noop-cpu-µs/rec")
		b.ReportMetric(wcCPU, "wordcount-cpu-µs/rec")
		b.ReportMetric(noopRate/rawRate, "noop/raw")
		b.ReportMetric(wcRate/rawRate, "wordcount/raw")
	}
}

func benchRecords(def int) int {
	var n int
	if _, err := fmt.Sscan(strings.TrimSpace(getenv("BENCH_RECORDS")), &n); err == nil && n > 0 {
		return n
	}
	return def
}

// rawPassthrough consumes "in" in a fresh group and produces each record to raw-out,
// committing after each poll's records are acknowledged.
func rawPassthrough(b *testing.B, c *kfake.Cluster, records int) (rate, cpuPerRec float64) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.ConsumerGroup("raw"), kgo.ConsumeTopics("in"),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.DisableAutoCommit(), kgo.ProducerLinger(5*time.Millisecond))
	if err != nil {
		b.Fatal(err)
	}
	defer cl.Close()
	ctx := context.Background()
	cpu0, t0 := cpuNow(), time.Now()
	n := 0
	for n < records {
		fs := cl.PollRecords(ctx, 10000)
		fs.EachRecord(func(r *kgo.Record) {
			cl.Produce(ctx, &kgo.Record{Topic: "raw-out", Key: r.Key, Value: r.Value}, nil)
			n++
		})
		if err := cl.Flush(ctx); err != nil {
			b.Fatal(err)
		}
		if err := cl.CommitUncommittedOffsets(ctx); err != nil {
			b.Fatal(err)
		}
	}
	wall, cpu := time.Since(t0), cpuNow()-cpu0
	return float64(records) / wall.Seconds(), float64(cpu.Microseconds()) / float64(records)
}

// hostOverKafka runs a wasmstream host with module over "in" (its own group) until it has
// processed every record.
func hostOverKafka(b *testing.B, c *kfake.Cluster, module, name string, records int) (rate, cpuPerRec float64) {
	rate, cpuPerRec, _ = timeHost(b, host.Config{
		DataDir: filepath.Join(b.TempDir(), "data"), CheckpointInterval: 200 * time.Millisecond,
		Kafka: host.KafkaConfig{Brokers: c.ListenAddrs()},
		Tasks: []host.TaskConfig{{
			Name: name, Module: module,
			Inputs: []host.InputConfig{{Name: "in", Type: "kafka", Topics: []string{"in"}}},
			Output: host.OutputConfig{Type: "kafka", Topic: name + "-out"},
		}},
	}, records, func(s host.TaskStats) bool { return s.Processed >= int64(records) })
	return rate, cpuPerRec
}

// timeHost runs a host with one task until its figures satisfy done, and returns the rate over
// records, the CPU per record (the whole process) and the figures.
func timeHost(b *testing.B, cfg host.Config, records int, done func(host.TaskStats) bool) (rate, cpuPerRec float64, st host.TaskStats) {
	h, err := host.New(cfg)
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	stopped := make(chan error, 1)
	cpu0, t0 := cpuNow(), time.Now()
	go func() { stopped <- h.Run(ctx) }()
	for {
		time.Sleep(10 * time.Millisecond)
		if s := h.Stats(); len(s) == 1 && done(s[0]) {
			st = s[0]
			break
		}
		select {
		case err := <-stopped:
			b.Fatalf("host stopped: %v", err)
		default:
		}
	}
	wall, cpu := time.Since(t0), cpuNow()-cpu0
	cancel()
	if err := <-stopped; err != nil {
		b.Fatal(err)
	}
	return float64(records) / wall.Seconds(), float64(cpu.Microseconds()) / float64(records), st
}

func getenv(k string) string { return os.Getenv(k) }
