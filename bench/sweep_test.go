package bench

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/wasmstream/wasmstream/internal/guestbuild"
)

// The GOMAXPROCS sweep: how one wasmstream host scales with the cores it may use. For each input
// partition count (BENCH_PARTITIONS, default "4,16"), each task and guest language, and each
// GOMAXPROCS value (BENCH_PROCS), one host run over the same records; the table gives each run's
// rate and CPU per record against the same task's run at the lowest GOMAXPROCS (1 unless
// BENCH_PROCS leaves it out). The tasks: the stateful counter (BENCH_RECORDS records) and the
// CPU-heavy guest, testguests/cpuheavy (~65 µs of guest work per record, no state;
// BENCH_HEAVY_RECORDS records, default BENCH_RECORDS ÷ 20). Each runs with every loop count of
// BENCH_LOOPS (tasks[].loops; default "1"; a count above the partitions runs as many loops as
// partitions), and BENCH_SWEEP ("counter/go,cpuheavy/rust"…; default all four) picks the task and
// guest pairs.
//
// GOMAXPROCS is set in this process with runtime.GOMAXPROCS before the host starts (its worker
// pool defaults to it), so the in-process broker runs under the same limit, as it does when the
// whole test binary runs under the GOMAXPROCS environment variable (the bundle's run.sh). CPU per
// record is the whole process's, the broker's included.

// sweepTask is one task of the sweep.
type sweepTask struct {
	name, goGuest, rustGuest string
	heavy                    bool // records: BENCH_HEAVY_RECORDS
}

var sweepTasks = []sweepTask{
	{name: "counter", goGuest: "testguests/counter", rustGuest: "testguests/counter-rust"},
	{name: "cpuheavy", goGuest: "testguests/cpuheavy", rustGuest: "testguests/cpuheavy-rust", heavy: true},
}

// sweepProcs returns the GOMAXPROCS values of the sweep, ascending, none above the machine's
// cores: BENCH_PROCS as a list ("1,2,4" or "1 2 4"), or "all" for 1, 2, 4, 8 and 16; unset, 1
// and the machine's cores (the short default of `make bench-compare`).
func sweepProcs(cores int) ([]int, error) {
	s := strings.TrimSpace(getenv("BENCH_PROCS"))
	var want []int
	switch s {
	case "":
		want = []int{1, cores}
	case "all":
		want = []int{1, 2, 4, 8, 16}
	default:
		var err error
		if want, err = intList("BENCH_PROCS", s); err != nil {
			return nil, err
		}
	}
	var out []int
	for _, p := range want {
		if p >= 1 && p <= cores {
			out = append(out, p)
		}
	}
	slices.Sort(out)
	out = slices.Compact(out)
	if len(out) == 0 {
		return nil, fmt.Errorf("BENCH_PROCS=%q: no value from 1 to this machine's %d cores", s, cores)
	}
	return out, nil
}

// intList parses a list of positive integers separated by commas or spaces.
func intList(name, s string) ([]int, error) {
	var out []int
	for _, f := range strings.FieldsFunc(s, func(r rune) bool { return r == ',' || r == ' ' }) {
		n, err := strconv.Atoi(f)
		if err != nil || n < 1 {
			return nil, fmt.Errorf("%s=%q: want positive integers separated by commas", name, s)
		}
		out = append(out, n)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%s=%q: empty", name, s)
	}
	return out, nil
}

// sweepLoops returns the loop counts of the sweep for parts partitions: BENCH_LOOPS, each at
// most parts, ascending.
func sweepLoops(parts int) ([]int, error) {
	loops, err := intList("BENCH_LOOPS", cmp.Or(strings.TrimSpace(getenv("BENCH_LOOPS")), "1"))
	if err != nil {
		return nil, err
	}
	for i := range loops {
		loops[i] = min(loops[i], parts)
	}
	slices.Sort(loops)
	return slices.Compact(loops), nil
}

// sweepPicked reports whether BENCH_SWEEP picks task with guest lang ("go", "rust").
func sweepPicked(task, lang string) bool {
	s := strings.TrimSpace(getenv("BENCH_SWEEP"))
	return s == "" || slices.Contains(strings.FieldsFunc(s, func(r rune) bool { return r == ',' || r == ' ' }), task+"/"+lang)
}

// sweepRow is one run of the sweep.
type sweepRow struct {
	partitions int
	task, lang string
	loops      int
	procs      int
	run        pipelineRun
	base       *pipelineRun // the same task's run with as many loops at the sweep's lowest GOMAXPROCS
	one        *pipelineRun // the same task's run with one loop at this GOMAXPROCS
}

// runSweep runs the sweep on c and returns its rows. Each run reads the records in a topic of
// the partition count ("in" for 4, the topic seeded with the cluster; "in<N>" otherwise, and
// "heavy<N>" for the CPU-heavy guest's fewer records, produced here) and its output topic is deleted after the outputs are counted, so
// the broker's memory stays that of the inputs.
func runSweep(b *testing.B, c cluster, records, heavyRecords int, partitions, procs []int) []sweepRow {
	modules := map[string]string{}
	for _, t := range sweepTasks {
		modules[t.name+"/go"] = guestbuild.Go(b, t.goGuest)
		modules[t.name+"/rust"] = guestbuild.Rust(b, t.rustGuest)
	}
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(0))
	var rows []sweepRow
	for _, parts := range partitions {
		topic, heavyTopic := "in", fmt.Sprintf("heavy%d", parts)
		if parts != 4 {
			topic = fmt.Sprintf("in%d", parts)
			if createTopic(b, c, topic, parts) {
				produceInput(b, c, topic, records)
			}
		}
		if createTopic(b, c, heavyTopic, parts) {
			produceInput(b, c, heavyTopic, heavyRecords)
		}
		for _, t := range sweepTasks {
			n, in := records, topic
			if t.heavy {
				n, in = heavyRecords, heavyTopic
			}
			loops, err := sweepLoops(parts)
			if err != nil {
				b.Fatal(err)
			}
			for _, lang := range []string{"go", "rust"} {
				if !sweepPicked(t.name, lang) {
					continue
				}
				one := map[int]*pipelineRun{} // by GOMAXPROCS, the run with one loop
				for _, l := range loops {
					var base *pipelineRun
					for _, p := range procs {
						runtime.GOMAXPROCS(p)
						name := fmt.Sprintf("sweep-%s-%s-p%d-g%d-l%d", t.name, lang, parts, p, l)
						createTopic(b, c, name+"-out", 4)
						r := hostRun(b, c, modules[t.name+"/"+lang], name, in, n, false, l)
						r.outputs = outputsPerRecord(b, c, name+"-out", n)
						deleteTopic(b, c, name+"-out")
						row := &sweepRow{partitions: parts, task: t.name, lang: lang, loops: l, procs: p, run: r, base: base, one: one[p]}
						if base == nil {
							base = &row.run
						}
						if l == 1 {
							one[p] = &row.run
						}
						rows = append(rows, *row)
					}
				}
			}
		}
	}
	return rows
}

// printSweep writes the sweep as one Markdown table: per run, its rate, CPU per record and the
// cores it kept busy, and the scaling factors against the same task at the lowest GOMAXPROCS:
// rate ÷ that rate (ideally the GOMAXPROCS ratio) and CPU per record ÷ that CPU per record
// (ideally 1).
func printSweep(w io.Writer, records, heavyRecords int, rows []sweepRow) {
	fmt.Fprintf(w, "\nGOMAXPROCS sweep on %d cores: counter over %d records, cpuheavy over %d records, 10k keys, one in-process kfake broker under the same GOMAXPROCS\n\n",
		runtime.NumCPU(), records, heavyRecords)
	fmt.Fprintln(w, "| partitions | task | guest | loops | GOMAXPROCS | rec/s | CPU µs/rec | cores | rate ÷ rate at lowest | CPU ÷ CPU at lowest | rate ÷ rate with 1 loop | start s | outputs/rec |")
	fmt.Fprintln(w, "|---:|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
	for _, r := range rows {
		rate, cpu, one := "1.00", "1.00", "1.00"
		if r.base != nil {
			rate = fmt.Sprintf("%.2f", r.run.rate/r.base.rate)
			cpu = fmt.Sprintf("%.2f", r.run.cpu/r.base.cpu)
		}
		if r.one != nil {
			one = fmt.Sprintf("%.2f", r.run.rate/r.one.rate)
		} else if r.loops != 1 {
			one = "-"
		}
		start := fmt.Sprintf("%.1f", r.run.start.Seconds())
		if r.run.whole {
			start = "included"
		}
		fmt.Fprintf(w, "| %d | %s | %s | %d | %d | %s | %.2f | %.2f | %s | %s | %s | %s | %.2f |\n", r.partitions, r.task,
			map[string]string{"go": "Go", "rust": "Rust"}[r.lang], r.loops, r.procs, thousands(r.run.rate), r.run.cpu,
			r.run.rate*r.run.cpu/1e6, rate, cpu, one, start, r.run.outputs)
	}
	fmt.Fprintln(w)
}

func adminClient(b *testing.B, c cluster) (*kadm.Client, func()) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...))
	if err != nil {
		b.Fatal(err)
	}
	return kadm.NewClient(cl), cl.Close
}

// createTopic creates topic, or reports false if it exists (an earlier iteration made it).
func createTopic(b *testing.B, c cluster, topic string, partitions int) bool {
	adm, done := adminClient(b, c)
	defer done()
	resp, err := adm.CreateTopic(context.Background(), int32(partitions), 1, nil, topic)
	if err == nil {
		err = resp.Err
	}
	if errors.Is(err, kerr.TopicAlreadyExists) {
		return false
	}
	if err != nil {
		b.Fatalf("creating topic %s: %v", topic, err)
	}
	return true
}

// changelogCost runs the Go counter over "in" without and with its changelog, rounds times each,
// interleaved, and prints the best run of each and their ratios: the changelog's cost.
func changelogCost(b *testing.B, c cluster, records, rounds int) {
	module := guestbuild.Go(b, "testguests/counter")
	best := map[bool]pipelineRun{}
	for i := 0; i < rounds; i++ {
		for _, on := range []bool{false, true} {
			name := fmt.Sprintf("cl-counter-%t-%d", on, i)
			createTopic(b, c, name+"-out", 4)
			r := hostRun(b, c, module, name, "in", records, on, 1)
			r.outputs = outputsPerRecord(b, c, name+"-out", records)
			deleteTopic(b, c, name+"-out")
			if r.outputs != 1 {
				b.Fatalf("%s: %.2f outputs per record, want 1", name, r.outputs)
			}
			if r.rate > best[on].rate {
				best[on] = r
			}
		}
	}
	off, on := best[false], best[true]
	fmt.Printf("\nchangelog cost, Go counter, %d records, 4 partitions, GOMAXPROCS=%d, best of %d: off %s rec/s %.2f µs/rec, on %s rec/s %.2f µs/rec; rate off ÷ on %.2f, CPU on ÷ off %.2f\n\n",
		records, runtime.GOMAXPROCS(0), rounds, thousands(off.rate), off.cpu, thousands(on.rate), on.cpu, off.rate/on.rate, on.cpu/off.cpu)
}

func deleteTopic(b *testing.B, c cluster, topic string) {
	adm, done := adminClient(b, c)
	defer done()
	resp, err := adm.DeleteTopic(context.Background(), topic)
	if err == nil {
		err = resp.Err
	}
	if err != nil {
		b.Fatalf("deleting topic %s: %v", topic, err)
	}
}
