package host_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
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
// ceiling), (b) wasmstream with the no-op wasm task, (c) with the stateful counter (1 state get,
// 1 put and 1 output per record over 10k keys), (d) with the wasm wordcount; it reports records/s,
// CPU µs per record (the whole process, broker included) and the ratios.
// BENCH_RECORDS sets the count (default 1M), BENCH_TASKS the wasmstream runs (default
// "noop,counter,wordcount"; "counter-cl" is the counter with its changelog on):
// go test -run '^$' -bench KafkaPipeline -benchtime 1x ./host
// BENCH_PROFILE=dir writes a CPU profile of each wasmstream run's steady part to dir/<task>.cpu
// (the broker's share included; leave -cpuprofile out). BENCH_PARTITIONS (default 4) sets the
// input topic's partitions; BENCH_LOOPS (default "1"; e.g. "1,2") runs each task with each loop
// count (tasks[].loops), reported as <task> for 1 and <task>-l<N> for N, in the order given.
func BenchmarkKafkaPipeline(b *testing.B) {
	records := benchRecords(1_000_000)
	parts := int32(4)
	if _, err := fmt.Sscan(strings.TrimSpace(getenv("BENCH_PARTITIONS")), &parts); err != nil || parts < 1 {
		parts = 4
	}
	var loops []int
	for _, f := range strings.FieldsFunc(getenv("BENCH_LOOPS"), func(r rune) bool { return r == ',' || r == ' ' }) {
		var n int
		if _, err := fmt.Sscan(f, &n); err != nil || n < 1 {
			b.Fatalf("BENCH_LOOPS=%q: want positive integers separated by commas", getenv("BENCH_LOOPS"))
		}
		loops = append(loops, n)
	}
	if len(loops) == 0 {
		loops = []int{1}
	}
	outs := []string{"raw-out", "noop-out", "counter-out", "counter-cl-out", "wc-out"}
	for _, l := range loops {
		for _, t := range []string{"noop", "counter", "counter-cl", "wc"} {
			outs = append(outs, fmt.Sprintf("%s-l%d-out", t, l))
		}
	}
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(parts, "in"), kfake.SeedTopics(4, outs...))
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
	tasks := benchTasks("noop,counter,wordcount")
	modules := map[string]string{}
	for _, t := range tasks {
		pkg, ok := map[string]string{"noop": "testguests/noop", "counter": "testguests/counter", "counter-cl": "testguests/counter", "wordcount": "wordcount"}[t]
		if !ok {
			b.Fatalf("BENCH_TASKS: unknown task %q (want noop, counter, counter-cl or wordcount)", t)
		}
		modules[t] = guestbuild.Go(b, pkg)
	}
	for i := 0; i < b.N; i++ {
		raw := rawPassthrough(b, c, records)
		raw.report(b, "raw", raw)
		for _, t := range tasks {
			for _, l := range loops {
				name, metric := t, t
				if t == "wordcount" {
					name = "wc"
				}
				if l != 1 {
					name, metric = fmt.Sprintf("%s-l%d", name, l), fmt.Sprintf("%s-l%d", t, l)
				}
				hostOverKafka(b, c, modules[t], name, records, t == "counter-cl", l).report(b, metric, raw)
			}
		}
	}
}

// pipelineRun is one run's figures. The steady figures start at the first record out, so they
// leave out start-up (compiling the module, joining the group), which start reports.
type pipelineRun struct {
	rate, cpu             float64 // records/s and CPU µs per record over the whole run
	steadyRate, steadyCPU float64 // the same from the first record out to the last
	steadyAllocs          float64 // heap allocations per record in the steady part (the process's)
	start                 time.Duration
	batch                 float64 // wasmstream: the mean number of records and firings per guest call
}

func (r pipelineRun) report(b *testing.B, name string, raw pipelineRun) {
	b.ReportMetric(r.rate, name+"-rec/s")
	b.ReportMetric(r.cpu, name+"-cpu-µs/rec")
	b.ReportMetric(r.steadyRate, name+"-steady-rec/s")
	b.ReportMetric(r.steadyCPU, name+"-steady-cpu-µs/rec")
	b.ReportMetric(r.steadyAllocs, name+"-steady-allocs/rec")
	b.ReportMetric(r.start.Seconds(), name+"-start-s")
	if name != "raw" {
		b.ReportMetric(r.batch, name+"-batch")
		b.ReportMetric(r.rate/raw.rate, name+"/raw")
		b.ReportMetric(r.steadyRate/raw.steadyRate, name+"-steady/raw")
		// The rate a CPU-bound machine would give: on a shared machine the wall-clock ratios
		// move with the neighbours' load, the CPU per record much less.
		b.ReportMetric(raw.steadyCPU/r.steadyCPU, name+"-steady-cpu/raw")
	}
}

// steady fills r's steady figures: n records out of records had come out at (t1, cpu1,
// mallocs1), the last at (t2, cpu2, mallocs2).
func (r *pipelineRun) steady(records, n int, t1, t2 time.Time, cpu1, cpu2 time.Duration, mallocs1, mallocs2 uint64) {
	left := float64(records - n)
	r.steadyRate = left / t2.Sub(t1).Seconds()
	r.steadyCPU = float64((cpu2 - cpu1).Microseconds()) / left
	r.steadyAllocs = float64(mallocs2-mallocs1) / left
}

func mallocs() uint64 {
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.Mallocs
}

// benchTasks returns the names in BENCH_TASKS (comma-separated), or in def.
func benchTasks(def string) []string {
	s := strings.TrimSpace(getenv("BENCH_TASKS"))
	if s == "" {
		s = def
	}
	return strings.Split(s, ",")
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
func rawPassthrough(b *testing.B, c *kfake.Cluster, records int) (r pipelineRun) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.ConsumerGroup("raw"), kgo.ConsumeTopics("in"),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.DisableAutoCommit(), kgo.ProducerLinger(5*time.Millisecond))
	if err != nil {
		b.Fatal(err)
	}
	defer cl.Close()
	ctx := context.Background()
	cpu0, t0 := cpuNow(), time.Now()
	var cpu1 time.Duration
	var t1 time.Time
	var m1 uint64
	n, n1 := 0, 0
	for n < records {
		fs := cl.PollRecords(ctx, 10000)
		if t1.IsZero() && n > 0 {
			cpu1, t1, n1, m1 = cpuNow(), time.Now(), n, mallocs()
		}
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
	cpu2, t2, m2 := cpuNow(), time.Now(), mallocs()
	r.rate, r.cpu = float64(records)/t2.Sub(t0).Seconds(), float64((cpu2-cpu0).Microseconds())/float64(records)
	r.start = t1.Sub(t0)
	r.steady(records, n1, t1, t2, cpu1, cpu2, m1, m2)
	return r
}

// hostOverKafka runs a wasmstream host with module over "in" (its own group) until it has
// processed every record; changelog turns the task's changelog on.
func hostOverKafka(b *testing.B, c *kfake.Cluster, module, name string, records int, changelog bool, loops int) pipelineRun {
	r, st := timeHostRun(b, host.Config{
		DataDir: filepath.Join(b.TempDir(), "data"), CheckpointInterval: 200 * time.Millisecond,
		Kafka: host.KafkaConfig{Brokers: c.ListenAddrs()},
		Tasks: []host.TaskConfig{{
			Name: name, Module: module,
			Inputs:    []host.InputConfig{{Name: "in", Type: "kafka", Topics: []string{"in"}}},
			Output:    host.OutputConfig{Type: "kafka", Topic: name + "-out"},
			Changelog: host.ChangelogConfig{Enabled: changelog},
			Loops:     loops,
		}},
	}, records, func(s host.TaskStats) bool { return s.Processed >= int64(records) })
	if st.BatchSize.Count > 0 {
		r.batch = st.BatchSize.Sum / float64(st.BatchSize.Count)
	}
	return r
}

// timeHost runs a host with one task until its figures satisfy done, and returns the rate over
// records, the CPU per record (the whole process) and the figures.
func timeHost(b *testing.B, cfg host.Config, records int, done func(host.TaskStats) bool) (rate, cpuPerRec float64, st host.TaskStats) {
	r, st := timeHostRun(b, cfg, records, done)
	return r.rate, r.cpu, st
}

// timeHostRun is timeHost with the steady figures: from when the task's first records were
// processed (seen within the 10 ms the figures are polled at) to done.
func timeHostRun(b *testing.B, cfg host.Config, records int, done func(host.TaskStats) bool) (r pipelineRun, st host.TaskStats) {
	h, err := host.New(cfg)
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	stopped := make(chan error, 1)
	cpu0, t0 := cpuNow(), time.Now()
	var cpu1 time.Duration
	var t1 time.Time
	var n1 int
	var m1 uint64
	stopProfile := func() {}
	go func() { stopped <- h.Run(ctx) }()
	for {
		time.Sleep(10 * time.Millisecond)
		s := h.Stats()
		if len(s) == 1 && done(s[0]) {
			st = s[0]
			break
		}
		if len(s) == 1 && t1.IsZero() && s[0].Processed > 0 {
			cpu1, t1, n1, m1 = cpuNow(), time.Now(), int(s[0].Processed), mallocs()
			stopProfile = startProfile(b, cfg.Tasks[0].Name)
		}
		select {
		case err := <-stopped:
			b.Fatalf("host stopped: %v", err)
		default:
		}
	}
	cpu2, t2, m2 := cpuNow(), time.Now(), mallocs()
	stopProfile()
	cancel()
	if err := <-stopped; err != nil {
		b.Fatal(err)
	}
	r.rate, r.cpu = float64(records)/t2.Sub(t0).Seconds(), float64((cpu2-cpu0).Microseconds())/float64(records)
	if t1.IsZero() { // done at the first look
		t1, cpu1 = t0, cpu0
	}
	r.start = t1.Sub(t0)
	r.steady(records, n1, t1, t2, cpu1, cpu2, m1, m2)
	return r, st
}

// startProfile starts a CPU profile to $BENCH_PROFILE/<name>.cpu if BENCH_PROFILE is set, and
// returns what stops it.
func startProfile(b *testing.B, name string) (stop func()) {
	dir := getenv("BENCH_PROFILE")
	if dir == "" {
		return func() {}
	}
	f, err := os.Create(filepath.Join(dir, name+".cpu"))
	if err != nil {
		b.Fatal(err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		b.Fatal(err)
	}
	return func() {
		pprof.StopCPUProfile()
		f.Close()
	}
}

func getenv(k string) string { return os.Getenv(k) }
