package bench

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/wasmstream/wasmstream/host"
	"github.com/wasmstream/wasmstream/internal/guestbuild"
)

// BenchmarkCompare runs, on one in-process kfake cluster and over the same 4-partition topic of
// ~100-byte records keyed by 10k users: the raw franz-go consume → produce loop (the ceiling),
// then for each task — no-op, the stateful counter (1 state get, 1 put and 1 output per record)
// and wordcount (per word: 1 get, 1 put, 1 output) — the goka peer, the same task hand-written
// on franz-go and Badger (handRun), wasmstream with the Go guest and wasmstream with the Rust
// guest; and, first, the wasmstream binary's peak RSS holding 1M keys and 1M pending timers.
// It prints one table; then the GOMAXPROCS sweep (sweep_test.go) prints a second.
// Between the memory rows and the table, the goals table (goals_test.go): the counter's CPU per
// record against the hand-written loop's and with the changelog against without, BENCH_GOAL_REPS
// (default 5) interleaved repetitions on a broker in a child process, medians and ranges.
// BENCH_TABLES ("compare,goals,sweep" by default) picks the tables; "changelog" adds (or, alone,
// runs only) the Go counter without and with its changelog, twice each, and their ratios
// (changelogCost). Run with -benchtime 1x.
func BenchmarkCompare(b *testing.B) {
	records := envInt("BENCH_RECORDS", 1_000_000)
	heavyRecords := envInt("BENCH_HEAVY_RECORDS", max(records/20, 1))
	rssKeys := envInt("BENCH_RSS_KEYS", 1_000_000)
	goalReps := envInt("BENCH_GOAL_REPS", 5)
	compare, goals, sweep, changelog := true, true, true, false
	if s := strings.TrimSpace(getenv("BENCH_TABLES")); s != "" {
		compare, goals, sweep = false, false, false
		for _, t := range strings.Split(s, ",") {
			switch strings.TrimSpace(t) {
			case "compare":
				compare = true
			case "goals":
				goals = true
			case "sweep":
				sweep = true
			case "changelog":
				changelog = true
			default:
				b.Fatalf("BENCH_TABLES=%q: want compare, goals, sweep, changelog or several, separated by commas", s)
			}
		}
	}
	if goalReps == 0 {
		goals = false
	}
	procs, err := sweepProcs(runtime.NumCPU())
	if err != nil {
		b.Fatal(err)
	}
	partitions, err := intList("BENCH_PARTITIONS", cmp.Or(strings.TrimSpace(getenv("BENCH_PARTITIONS")), "4,16"))
	if err != nil {
		b.Fatal(err)
	}
	if !compare {
		rssKeys = 0
	}
	tasks := []struct{ name, goGuest, rustGuest string }{
		{"noop", "testguests/noop", "testguests/noop-rust"},
		{"counter", "testguests/counter", "testguests/counter-rust"},
		{"wordcount", "wordcount", "wordcount-rust"},
	}
	// Build every module before measuring anything.
	modules := map[string]string{}
	for _, t := range tasks {
		if !compare {
			break
		}
		modules[t.name+"/go"] = guestbuild.Go(b, t.goGuest)
		modules[t.name+"/rust"] = guestbuild.Rust(b, t.rustGuest)
	}
	var bin string
	if rssKeys > 0 {
		bin = guestbuild.Binary(b)
	}

	// The memory rows first, while this process is small: Linux reports as a child's peak RSS
	// the larger of its own and that of the process it was started from (runBinary checks).
	var mem []memRow
	if rssKeys > 0 {
		mem = append(mem, distinctKeysRSS(b, bin, modules["wordcount/go"], rssKeys))
		mem = append(mem, pendingTimersRSS(b, bin, guestbuild.Go(b, "testguests/timers"), rssKeys))
	}

	// The goals table next, before the in-process broker fills this process's heap: its broker
	// is a process of its own (goals_test.go).
	if goals {
		goalsTable(b, os.Stdout, records, goalReps)
	}
	if !compare && !sweep && !changelog {
		return
	}

	topics := []string{"in", "raw-out"}
	for _, t := range tasks {
		topics = append(topics, "goka-"+t.name+"-out", "hand-"+t.name+"-out", "go-"+t.name+"-out", "rust-"+t.name+"-out")
	}
	topics = append(topics, "go-counter-cl-out")
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(4, topics...), kfake.AllowAutoTopicCreation())
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	produceInput(b, c, "in", records)

	for i := 0; i < b.N; i++ {
		if compare {
			var rows []row
			raw := rawPassthrough(b, c, records)
			raw.outputs = outputsPerRecord(b, c, "raw-out", records)
			rows = append(rows, row{task: "any", system: "raw franz-go consume→produce (ceiling)", run: raw})
			for _, t := range tasks {
				peer := gokaRun(b, c, t.name, records)
				peer.outputs = outputsPerRecord(b, c, "goka-"+t.name+"-out", records)
				rows = append(rows, row{task: t.name, system: "goka (peer)", run: peer})
				hand := handRun(b, c, t.name, records, "")
				hand.outputs = outputsPerRecord(b, c, "hand-"+t.name+"-out", records)
				rows = append(rows, row{task: t.name, system: "hand-written franz-go + map + Badger", run: hand, peer: &peer})
				for _, lang := range []string{"go", "rust"} {
					name := lang + "-" + t.name
					r := hostRun(b, c, modules[t.name+"/"+lang], name, "in", records, false, 1)
					r.outputs = outputsPerRecord(b, c, name+"-out", records)
					rows = append(rows, row{task: t.name, system: "wasmstream, " + map[string]string{"go": "Go", "rust": "Rust"}[lang] + " guest", run: r, peer: &peer})
				}
				if t.name == "counter" {
					// goka's table is a Kafka topic too: the same with wasmstream's changelog.
					r := hostRun(b, c, modules["counter/go"], "go-counter-cl", "in", records, true, 1)
					r.outputs = outputsPerRecord(b, c, "go-counter-cl-out", records)
					rows = append(rows, row{task: t.name, system: "wasmstream, Go guest, changelog on", run: r, peer: &peer})
				}
			}
			printTable(os.Stdout, records, raw, rows, mem)
		}
		if changelog {
			changelogCost(b, c, records, 2)
		}
		if sweep {
			printSweep(os.Stdout, records, heavyRecords, runSweep(b, c, records, heavyRecords, partitions, procs))
		}
	}
}

// row is one line of the throughput table.
type row struct {
	task, system string
	run          pipelineRun
	peer         *pipelineRun // the goka run of the same task; nil for the peer and the ceiling
}

// pipelineRun is one run's figures. Rate and CPU are steady figures (see meter), which leave
// out start-up (compiling the module, joining the group, creating goka's table topic); start
// reports that part.
type pipelineRun struct {
	rate     float64 // records/s
	cpu      float64 // CPU µs per record, the whole process (the in-process broker included)
	otherCPU float64 // CPU µs per record of the process otherCPU measures (the child broker), if any
	start    time.Duration
	whole    bool    // too short for a steady span: rate and CPU are the whole run's, start-up included
	outputs  float64 // records in the output topic after the run, per input record
}

// printTable writes the results as one Markdown table. Ratios are "higher is better" for the
// row: rate ÷ the other's rate, and the other's CPU per record ÷ the row's. Cores is rate ×
// CPU per record: the cores the run kept busy. A start of "included" marks a run too short for
// a steady span (raise BENCH_RECORDS). The memory rows come last, with their peak RSS.
func printTable(w io.Writer, records int, raw pipelineRun, rows []row, mem []memRow) {
	fmt.Fprintf(w, "\nwasmstream vs goka vs raw franz-go: %d records × ~100 B, 4 partitions, 10k keys, one in-process kfake broker, GOMAXPROCS=%d\n\n", records, runtime.GOMAXPROCS(0))
	fmt.Fprintln(w, "| task | system | rec/s | CPU µs/rec | cores | rate ÷ ceiling | ceiling CPU ÷ CPU | rate ÷ peer | peer CPU ÷ CPU | start s | outputs/rec | peak RSS MiB |")
	fmt.Fprintln(w, "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
	for _, r := range rows {
		ceilRate, ceilCPU, peerRate, peerCPU := "", "", "", ""
		if r.task != "any" {
			ceilRate = fmt.Sprintf("%.2f", r.run.rate/raw.rate)
			ceilCPU = fmt.Sprintf("%.2f", raw.cpu/r.run.cpu)
		}
		if r.peer != nil {
			peerRate = fmt.Sprintf("%.2f", r.run.rate/r.peer.rate)
			peerCPU = fmt.Sprintf("%.2f", r.peer.cpu/r.run.cpu)
		}
		start := fmt.Sprintf("%.1f", r.run.start.Seconds())
		if r.run.whole {
			start = "included"
		}
		fmt.Fprintf(w, "| %s | %s | %s | %.2f | %.2f | %s | %s | %s | %s | %s | %.2f | |\n", r.task, r.system, thousands(r.run.rate), r.run.cpu,
			r.run.rate*r.run.cpu/1e6, ceilRate, ceilCPU, peerRate, peerCPU, start, r.run.outputs)
	}
	for _, m := range mem {
		fmt.Fprintf(w, "| %s | %s | %s | %.2f | %.2f | | | | | | | %.0f |\n", m.task, m.system, thousands(m.rate), m.cpu, m.rate*m.cpu/1e6, m.rssMiB)
	}
	fmt.Fprintln(w)
}

func thousands(f float64) string {
	s := strconv.FormatInt(int64(f+0.5), 10)
	var out []byte
	for i := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			out = append(out, ',')
		}
		out = append(out, s[i])
	}
	return string(out)
}

// produceInput writes records to topic: ~100-byte texts of the 18 words below, keyed by 10k
// users, as the host package's BenchmarkKafkaPipeline does.
func produceInput(b *testing.B, c cluster, topic string, records int) {
	prod, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.ProducerLinger(5*time.Millisecond))
	if err != nil {
		b.Fatal(err)
	}
	defer prod.Close()
	words := strings.Fields("alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu nu xi omicron pi rho sigma")
	for i := 0; i < records; i++ {
		var sb strings.Builder
		for sb.Len() < 90 {
			sb.WriteString(words[(i*7+sb.Len())%len(words)])
			sb.WriteByte(' ')
		}
		prod.Produce(context.Background(), &kgo.Record{Topic: topic, Key: []byte(fmt.Sprintf("user%05d", i%10000)), Value: []byte(sb.String())}, nil)
	}
	if err := prod.Flush(context.Background()); err != nil {
		b.Fatal(err)
	}
}

// meter measures a run from samples of the records processed so far, taken every 10 ms.
// wasmstream publishes its figures at each checkpoint, so its count moves in steps; the steady
// part runs from the first sample of a new count to the last new count below the total, both
// moments when the pipeline was busy: the idle tail between the last record and the checkpoint
// that reports it is left out. A run too short to have such a span counts from its start to
// its end.
type meter struct {
	records int
	t0      time.Time
	cpu0    time.Duration
	other0  time.Duration
	first   sample // the first sample with a count above 0
	last    sample // the last sample with a new count below records
}

type sample struct {
	t          time.Time
	cpu, other time.Duration
	n          int
}

func newMeter(records int) *meter {
	runtime.GC() // the previous run's garbage is not this run's
	return &meter{records: records, t0: time.Now(), cpu0: cpuNow(), other0: otherNow()}
}

func (m *meter) seen(n int) {
	if n == 0 || n >= m.records || n == m.last.n {
		return
	}
	s := sample{time.Now(), cpuNow(), otherNow(), n}
	if m.first.n == 0 {
		m.first = s
	}
	m.last = s
}

// done ends the run and returns its figures.
func (m *meter) done() pipelineRun {
	from, to := m.first, m.last
	whole := from.n == 0 || to.n <= from.n
	if whole {
		from = sample{m.t0, m.cpu0, m.other0, 0}
		to = sample{time.Now(), cpuNow(), otherNow(), m.records}
	}
	n := float64(to.n - from.n)
	return pipelineRun{
		rate:     n / to.t.Sub(from.t).Seconds(),
		cpu:      float64((to.cpu - from.cpu).Microseconds()) / n,
		otherCPU: float64((to.other - from.other).Microseconds()) / n,
		start:    from.t.Sub(m.t0),
		whole:    whole,
	}
}

// otherNow returns otherCPU's figure, or 0 when it is not set.
func otherNow() time.Duration {
	if otherCPU == nil {
		return 0
	}
	return otherCPU()
}

func cpuNow() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// clientOpts are the options of the in-process loops' clients (the ceiling and the
// hand-written peer): consuming "in" from the start in group, with the fetch settings of
// wasmstream's Kafka input, and producing with those of its Kafka output (linger 5 ms, acks from
// all in-sync replicas). The fetch bound matters beyond fairness: with kgo's defaults kfake
// answers the first fetch with most of the topic, which the steady figures would then leave out.
func clientOpts(c cluster, group string) []kgo.Opt {
	return []kgo.Opt{
		kgo.SeedBrokers(c.ListenAddrs()...), kgo.ConsumerGroup(group), kgo.ConsumeTopics("in"),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.DisableAutoCommit(),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.FetchMaxPartitionBytes(256 << 10), kgo.FetchMaxWait(200 * time.Millisecond),
		kgo.ProducerLinger(5 * time.Millisecond), kgo.RequiredAcks(kgo.AllISRAcks()),
	}
}

// rawPassthrough consumes "in" in a fresh group and produces each record to raw-out,
// committing after each poll's records are acknowledged.
func rawPassthrough(b *testing.B, c cluster, records int) pipelineRun {
	cl, err := kgo.NewClient(clientOpts(c, "raw")...)
	if err != nil {
		b.Fatal(err)
	}
	defer cl.Close()
	ctx := context.Background()
	m := newMeter(records)
	n := 0
	for n < records {
		fs := cl.PollRecords(ctx, 10000)
		if err := fs.Err0(); err != nil {
			b.Fatal(err)
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
		m.seen(n)
	}
	return m.done()
}

// hostRun runs a wasmstream host with module over topic (its own group, named after the task)
// until it has processed every record, with the checkpoint interval of the host package's
// Kafka benchmark; changelog turns the task's changelog on.
func hostRun(b *testing.B, c cluster, module, name, topic string, records int, changelog bool, loops int) pipelineRun {
	h, err := host.New(host.Config{
		DataDir: filepath.Join(b.TempDir(), "data"), CheckpointInterval: 200 * time.Millisecond,
		Kafka: host.KafkaConfig{Brokers: c.ListenAddrs()},
		Tasks: []host.TaskConfig{{
			Name: name, Module: module,
			Inputs:    []host.InputConfig{{Name: "in", Type: "kafka", Topics: []string{topic}}},
			Output:    host.OutputConfig{Type: "kafka", Topic: name + "-out"},
			Changelog: host.ChangelogConfig{Enabled: changelog},
			Loops:     loops,
		}},
	})
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	stopped := make(chan error, 1)
	m := newMeter(records)
	go func() { stopped <- h.Run(ctx) }()
	for {
		time.Sleep(10 * time.Millisecond)
		s := h.Stats()
		if len(s) != 1 {
			continue
		}
		if s[0].Processed >= int64(records) {
			break
		}
		m.seen(int(s[0].Processed))
		select {
		case err := <-stopped:
			b.Fatalf("%s: host stopped: %v", name, err)
		default:
		}
	}
	r := m.done()
	cancel()
	if err := <-stopped; err != nil {
		b.Fatal(err)
	}
	return r
}

// outputsPerRecord returns the records in topic (the sum of its partitions' end offsets) per
// input record: a check that every system did the same work.
func outputsPerRecord(b *testing.B, c cluster, topic string, records int) float64 {
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...))
	if err != nil {
		b.Fatal(err)
	}
	defer cl.Close()
	ends, err := kadm.NewClient(cl).ListEndOffsets(context.Background(), topic)
	if err == nil {
		err = ends.Error()
	}
	if err != nil {
		b.Fatalf("end offsets of %s: %v", topic, err)
	}
	var n int64
	ends.Each(func(o kadm.ListedOffset) { n += o.Offset })
	return float64(n) / float64(records)
}

func getenv(k string) string { return os.Getenv(k) }

// envInt returns the environment variable k as a non-negative integer, or def when it is unset.
func envInt(k string, def int) int {
	s := strings.TrimSpace(os.Getenv(k))
	if s == "" {
		return def
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 0 {
		panic(fmt.Sprintf("%s=%q: want a non-negative integer", k, s))
	}
	return n
}
