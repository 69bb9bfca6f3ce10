package task

import (
	"context"
	"fmt"
	"math/rand/v2"
	"runtime"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/wasmstream/wasmstream/host/internal/kafka"
	"github.com/wasmstream/wasmstream/host/internal/modrt"
	"github.com/wasmstream/wasmstream/host/internal/positions"
	"github.com/wasmstream/wasmstream/host/internal/sink"
	"github.com/wasmstream/wasmstream/host/internal/source"
	"github.com/wasmstream/wasmstream/store"
)

// nativeCounter is the counter task as a native Processor: per record, one state get, one put
// and one output.
type nativeCounter struct{}

func (nativeCounter) Broken() bool                  { return false }
func (nativeCounter) Close(context.Context) error   { return nil }
func (nativeCounter) HasExport(modrt.StepKind) bool { return false }
func (nativeCounter) StateVersion() uint32          { return 0 }

func (nativeCounter) Run(ctx context.Context, u *modrt.Unit, env modrt.Env) (modrt.Effects, error) {
	var eff modrt.Effects
	overlay := map[string]int{}
	name := []byte("n")
	for _, s := range u.Steps {
		for _, r := range s.Records {
			n, ok := overlay[string(r.Key)]
			if !ok {
				v, _, err := env.StateGet(r.Key, name)
				if err != nil {
					return modrt.Effects{}, err
				}
				n, _ = strconv.Atoi(string(v))
			}
			n++
			overlay[string(r.Key)] = n
			v := strconv.AppendInt(nil, int64(n), 10)
			eff.Writes = append(eff.Writes, modrt.Write{Key: r.Key, Name: name, Value: v})
			eff.Outputs = append(eff.Outputs, modrt.Output{Name: "out", Key: r.Key, Value: v, Timestamp: r.Timestamp})
		}
	}
	return eff, nil
}

// discardSink takes outputs and dead letters and keeps nothing.
type discardSink struct{}

func (discardSink) WriteOutput(string, []byte, []byte, int64, []sink.Header) error { return nil }
func (discardSink) WriteDeadLetter(*DeadLetter) error                              { return nil }
func (discardSink) Flush() error                                                   { return nil }

// threadCPU is the CPU time the calling OS thread has used.
func threadCPU() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(1 /* RUSAGE_THREAD */, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkLoopCounter measures the CPU the task loop spends per record of the counter task,
// without Kafka and without wasm: fetches of 1000 records over 10,000 keys are admitted (the
// loop's ingestKafka work), formed into jobs, run by a native counter on this goroutine, applied,
// and checkpointed into a real Badger store every 20,000 records, all on one locked OS thread.
// loop-cpu-ns/rec counts the thread's CPU time outside the native counter's calls: admitting,
// forming jobs, applying them and the checkpoints' part on the loop (Badger's write goroutine
// is not counted). The guest's part, run inline, is reported apart (worker-cpu-ns/rec).
func BenchmarkLoopCounter(b *testing.B) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	db, err := store.Open(b.TempDir(), store.Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close()
	tk, err := New(Config{Name: "counter", Workers: 2, Store: db, Output: discardSink{}, DeadLetter: discardSink{},
		StateCacheBytes: 256 << 20})
	if err != nil {
		b.Fatal(err)
	}
	st := &stream{id: 1, in: &Input{Name: "in"}, kafka: true, tp: kafka.TopicPartition{Topic: "in"}, source: []byte("in"), replay: -1, horizon: -1,
		tracker: positions.NewTracker(0), tm: newStreamTime(tk.cfg.Now(), 0), boundEnd: -1}
	tk.streams[1] = st
	tk.order = append(tk.order, st)
	tk.sched.AddStream(1)
	const keys, fetch, every = 10_000, 1000, 20_000
	names := make([][]byte, keys)
	for i := range names {
		names[i] = fmt.Appendf(nil, "user%05d", i)
	}
	rnd := rand.New(rand.NewPCG(1, 2))
	recs := make([]source.Record, fetch)
	load := tk.cache.Loader()
	inst := nativeCounter{}
	ctx := context.Background()
	var next int64
	value := []byte("v")
	var loop, worker time.Duration
	b.ResetTimer()
	for done := 0; done < b.N; {
		n := min(fetch, b.N-done)
		for i := range n {
			recs[i] = source.Record{Offset: next, Raw: value}
			recs[i].Key, recs[i].Value, recs[i].Timestamp = names[rnd.IntN(keys)], value, 1_700_000_000_000+next
			next++
		}
		t0 := threadCPU()
		now := tk.cfg.Now()
		for i := range n {
			if err := tk.admit(st, &recs[i], now); err != nil {
				b.Fatal(err)
			}
		}
		loop += threadCPU() - t0
		for tk.pending > 0 {
			t0 := threadCPU()
			bt, ok := tk.sched.Next(now)
			if !ok {
				b.Fatalf("%d records pending and no batch", tk.pending)
			}
			j := tk.newJob(bt)
			tk.startJob(j)
			tk.out.jobs = tk.out.jobs[:0]
			t1 := threadCPU()
			for gi := range j.groups {
				if err := tk.runUnit(ctx, inst, &j.groups[gi], load); err != nil {
					b.Fatal(err)
				}
			}
			t2 := threadCPU()
			if err := tk.finish(j); err != nil {
				b.Fatal(err)
			}
			t3 := threadCPU()
			loop += t1 - t0 + t3 - t2
			worker += t2 - t1
		}
		done += n
		if done%every < fetch {
			t0 := threadCPU()
			if err := tk.checkpoint(); err != nil {
				b.Fatal(err)
			}
			loop += threadCPU() - t0
		}
		tk.out = actions{}
	}
	b.ReportMetric(float64(loop.Nanoseconds())/float64(b.N), "loop-cpu-ns/rec")
	b.ReportMetric(float64(worker.Nanoseconds())/float64(b.N), "worker-cpu-ns/rec")
	if tk.stats.Processed != int64(b.N) {
		b.Fatalf("%d records processed of %d", tk.stats.Processed, b.N)
	}
}
