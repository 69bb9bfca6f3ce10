package host_test

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/wasmstream/wasmstream/host"
	"github.com/wasmstream/wasmstream/internal/guestbuild"
)

// BenchmarkExactlyOnce measures, on one in-process cluster and in one run, the wasm wordcount
// with a changelog over the same 4-partition topic of keyed ~20-byte records at least once and
// exactly once, at checkpoint (transaction) intervals of 100 ms and 1 s; it reports records/s
// until every record is committed, CPU µs per record (the whole process, broker included) and
// the exactly-once/at-least-once ratios. BENCH_RECORDS sets the count (default 300k):
// go test -run '^$' -bench ExactlyOnce -benchtime 1x ./host
func BenchmarkExactlyOnce(b *testing.B) {
	records := benchRecords(300_000)
	modes := []struct {
		name     string
		delivery host.Delivery
		interval time.Duration
	}{
		{"alos-100ms", "at_least_once", 100 * time.Millisecond},
		{"eos-100ms", "exactly_once", 100 * time.Millisecond},
		{"alos-1s", "at_least_once", time.Second},
		{"eos-1s", "exactly_once", time.Second},
	}
	topics := []string{"in"}
	for _, m := range modes {
		topics = append(topics, m.name+"-out")
	}
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(4, topics...))
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	prod, _ := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.ProducerLinger(5*time.Millisecond))
	defer prod.Close()
	words := strings.Fields("alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu")
	for i := 0; i < records; i++ {
		v := words[i%len(words)] + " " + words[(i/7)%len(words)]
		prod.Produce(context.Background(), &kgo.Record{Topic: "in", Key: []byte(fmt.Sprintf("user%04d", i%5000)), Value: []byte(v)}, nil)
	}
	if err := prod.Flush(context.Background()); err != nil {
		b.Fatal(err)
	}
	wc := guestbuild.Go(b, "wordcount")
	for i := 0; i < b.N; i++ {
		rates := map[string]float64{}
		for _, m := range modes {
			rate, cpu, st := wordcountCommitted(b, c, wc, m.name, m.delivery, m.interval, records)
			rates[m.name] = rate
			b.ReportMetric(rate, m.name+"-rec/s")
			b.ReportMetric(cpu, m.name+"-cpu-µs/rec")
			if m.delivery == "exactly_once" {
				b.ReportMetric(float64(st.TxnCommits), m.name+"-txns")
			}
		}
		b.ReportMetric(rates["eos-100ms"]/rates["alos-100ms"], "eos/alos-100ms")
		b.ReportMetric(rates["eos-1s"]/rates["alos-1s"], "eos/alos-1s")
	}
}

// wordcountCommitted runs the wordcount with a changelog over "in" in its own group until every
// record's input offset is committed, and returns the rate, the CPU per record and the figures.
func wordcountCommitted(b *testing.B, c *kfake.Cluster, module, name string, delivery host.Delivery, interval time.Duration, records int) (rate, cpuPerRec float64, st host.TaskStats) {
	return timeHost(b, host.Config{
		DataDir: filepath.Join(b.TempDir(), "data"), CheckpointInterval: interval,
		Kafka: host.KafkaConfig{Brokers: c.ListenAddrs()},
		Tasks: []host.TaskConfig{{
			Name: name, Module: module, Delivery: delivery,
			Inputs:    []host.InputConfig{{Name: "in", Type: "kafka", Topics: []string{"in"}}},
			Output:    host.OutputConfig{Type: "kafka", Topic: name + "-out"},
			Changelog: host.ChangelogConfig{Enabled: true},
		}},
	}, records, func(s host.TaskStats) bool {
		var committed int64
		for _, in := range s.Inputs {
			committed += in.Committed
		}
		return committed >= int64(records)
	})
}
