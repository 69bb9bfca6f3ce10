package task

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/wasmstream/wasmstream/abi"
	"github.com/wasmstream/wasmstream/host/internal/modrt"
	"github.com/wasmstream/wasmstream/host/internal/sink"
	"github.com/wasmstream/wasmstream/host/internal/source"
	"github.com/wasmstream/wasmstream/internal/guestbuild"
	"github.com/wasmstream/wasmstream/store"
)

// nativeWordcount is the wordcount example written as a native Go Processor: the same work
// through the same pipeline, without wasm. It is the benchmarks' reference.
type nativeWordcount struct{}

func (nativeWordcount) Broken() bool                { return false }
func (nativeWordcount) Close(context.Context) error { return nil }

func (nativeWordcount) HasExport(modrt.StepKind) bool { return false }
func (nativeWordcount) StateVersion() uint32          { return 0 }

func (n nativeWordcount) Run(ctx context.Context, u *modrt.Unit, env modrt.Env) (modrt.Effects, error) {
	var recs []abi.Record
	for _, s := range u.Steps {
		recs = append(recs, s.Records...)
	}
	return n.Process(ctx, recs, env)
}

func (nativeWordcount) Process(ctx context.Context, recs []abi.Record, env modrt.Env) (modrt.Effects, error) {
	var eff modrt.Effects
	overlay := map[string][]byte{}
	for _, r := range recs {
		v := r.Value
		for i := 0; i < len(v); {
			for i < len(v) && !alnum(v[i]) {
				i++
			}
			j := i
			for j < len(v) && alnum(v[j]) {
				j++
			}
			if j == i {
				break
			}
			word := make([]byte, j-i)
			for k := range word {
				c := v[i+k]
				if c >= 'A' && c <= 'Z' {
					c += 'a' - 'A'
				}
				word[k] = c
			}
			i = j
			ok := string(r.Key) + "\x00" + string(word)
			cur, found := overlay[ok]
			if !found {
				got, _, err := env.StateGet(r.Key, word)
				if err != nil {
					return modrt.Effects{}, err
				}
				cur = got
			}
			n, _ := strconv.Atoi(string(cur))
			next := strconv.AppendInt(nil, int64(n+1), 10)
			overlay[ok] = next
			eff.Writes = append(eff.Writes, modrt.Write{Key: r.Key, Name: word, Value: next})
			out := append(append(append([]byte{}, word...), ' '), next...)
			eff.Outputs = append(eff.Outputs, modrt.Output{Name: "counts", Key: r.Key, Value: out, Timestamp: r.Timestamp})
		}
	}
	return eff, nil
}

func alnum(c byte) bool { return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' }

func writeBenchInput(b *testing.B, path string, n, keys int) {
	f, err := os.Create(path)
	if err != nil {
		b.Fatal(err)
	}
	w := bufio.NewWriter(f)
	rng := rand.New(rand.NewPCG(1, 2))
	for i := 0; i < n; i++ {
		fmt.Fprintf(w, `{"user":"user%d","ts":%d,"text":"w%d w%d, W%d w%d"}`+"\n", rng.IntN(keys), 1700000000000+i,
			rng.IntN(100), rng.IntN(100), rng.IntN(100), rng.IntN(100))
	}
	w.Flush()
	f.Close()
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

type pipelineResult struct {
	recsPerSec float64
	cpuPerRec  time.Duration
}

// runPipeline runs one task over input with either a wasm module or a native processor, from
// the file source through the scheduler, workers, state cache, sink (discarding) and store.
func runPipeline(b *testing.B, mod *modrt.Module, native Processor, input string, records int) pipelineResult {
	dir := b.TempDir()
	db, err := store.Open(filepath.Join(dir, "state"), store.Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close()
	cfg := Config{
		Name: "bench", Module: mod, GuestConfig: []byte("{}"),
		Inputs:     []Input{{Name: "in", Path: input, Format: source.Format{JSON: true, KeyField: "user", ValueField: "text", TimestampField: "ts"}}},
		Output:     sink.NewStream(io.Discard),
		DeadLetter: FileDeadLetters{W: sink.NewStream(io.Discard)},
		Store:      db, Policy: PolicyKey, Workers: runtime.GOMAXPROCS(0),
		StateCacheBytes: 256 << 20, MaxAttempts: 1, OnExhausted: "halt", Checkpoint: time.Second,
	}
	if native != nil {
		cfg.NewProcessor = func(context.Context) (Processor, error) { return native, nil }
	}
	cfg.Sched.MaxBatchItems = 256
	tk, err := New(cfg)
	if err != nil {
		b.Fatal(err)
	}
	runtime.GC()
	cpu0, t0 := cpuTime(), time.Now()
	if err := tk.Run(context.Background()); err != nil {
		b.Fatal(err)
	}
	wall, cpu := time.Since(t0), cpuTime()-cpu0
	if got := tk.Stats().Processed; got != int64(records) {
		b.Fatalf("processed %d of %d records", got, records)
	}
	return pipelineResult{recsPerSec: float64(records) / wall.Seconds(), cpuPerRec: cpu / time.Duration(records)}
}

// BenchmarkPipeline measures, in one run over the same input and pipeline, (a) the wasm
// wordcount, (b) the same work as a native Go handler and (c) a no-op wasm task, and reports
// records/s, CPU µs per record and the ratios. Run with -benchtime 1x.
func BenchmarkPipeline(b *testing.B) {
	const records = 200_000
	dir := b.TempDir()
	input := filepath.Join(dir, "in.ndjson")
	writeBenchInput(b, input, records, 10_000)
	ctx := context.Background()
	rt, err := modrt.NewRuntime(ctx, modrt.RuntimeConfig{CacheDir: filepath.Join(dir, "cache")})
	if err != nil {
		b.Fatal(err)
	}
	defer rt.Close(ctx)
	load := func(pkg string) *modrt.Module {
		wasm, err := os.ReadFile(guestbuild.Go(b, pkg))
		if err != nil {
			b.Fatal(err)
		}
		m, err := rt.Compile(ctx, wasm, modrt.Limits{})
		if err != nil {
			b.Fatal(err)
		}
		return m
	}
	wc, noop := load("wordcount"), load("testguests/noop")
	rwasm, err := os.ReadFile(guestbuild.Rust(b, "wordcount-rust"))
	if err != nil {
		b.Fatal(err)
	}
	rwc, err := rt.Compile(ctx, rwasm, modrt.Limits{})
	if err != nil {
		b.Fatal(err)
	}
	for i := 0; i < b.N; i++ {
		w := runPipeline(b, wc, nil, input, records)
		r := runPipeline(b, rwc, nil, input, records)
		n := runPipeline(b, nil, nativeWordcount{}, input, records)
		o := runPipeline(b, noop, nil, input, records)
		b.ReportMetric(r.recsPerSec, "rust-rec/s")
		b.ReportMetric(float64(r.cpuPerRec.Nanoseconds())/1e3, "rust-cpu-µs/rec")
		b.ReportMetric(r.recsPerSec/n.recsPerSec, "rust/native-throughput")
		b.ReportMetric(w.recsPerSec, "wasm-rec/s")
		b.ReportMetric(n.recsPerSec, "native-rec/s")
		b.ReportMetric(o.recsPerSec, "noop-rec/s")
		b.ReportMetric(float64(w.cpuPerRec.Nanoseconds())/1e3, "wasm-cpu-µs/rec")
		b.ReportMetric(float64(n.cpuPerRec.Nanoseconds())/1e3, "native-cpu-µs/rec")
		b.ReportMetric(float64(o.cpuPerRec.Nanoseconds())/1e3, "noop-cpu-µs/rec")
		b.ReportMetric(w.recsPerSec/n.recsPerSec, "wasm/native-throughput")
		b.ReportMetric(float64(w.cpuPerRec)/float64(n.cpuPerRec), "wasm/native-cpu")
	}
}

// BenchmarkInstantiate reports the time to create one instance (instantiate, _initialize, ABI
// check, init) of the Go and the Rust wordcount.
func BenchmarkInstantiate(b *testing.B) {
	ctx := context.Background()
	rt, err := modrt.NewRuntime(ctx, modrt.RuntimeConfig{})
	if err != nil {
		b.Fatal(err)
	}
	defer rt.Close(ctx)
	for _, c := range []struct{ name, path string }{
		{"go", guestbuild.Go(b, "wordcount")},
		{"rust", guestbuild.Rust(b, "wordcount-rust")},
	} {
		wasm, err := os.ReadFile(c.path)
		if err != nil {
			b.Fatal(err)
		}
		mod, err := rt.Compile(ctx, wasm, modrt.Limits{})
		if err != nil {
			b.Fatal(err)
		}
		b.Run(c.name, func(b *testing.B) {
			b.ReportMetric(float64(len(wasm))/1024, "module-KiB")
			for i := 0; i < b.N; i++ {
				inst, err := mod.Instantiate(ctx, modrt.InstanceConfig{Task: "bench", Config: []byte(`{"min_len":2}`)})
				if err != nil {
					b.Fatal(err)
				}
				inst.Close(ctx)
			}
		})
	}
}

// BenchmarkTimerFirings measures timer firings per second through the whole pipeline: the timers
// guest over 100k records of 10k keys, where each record sets a processing-time timer due at once
// (every record leads to one firing: a guest call that writes state and emits), against the same
// records doing only their own work ("count"). The firing rate is records / (time with timers −
// time without). Run with -benchtime 1x.
func BenchmarkTimerFirings(b *testing.B) {
	const records, keys = 100_000, 10_000
	dir := b.TempDir()
	ctx := context.Background()
	rt, err := modrt.NewRuntime(ctx, modrt.RuntimeConfig{CacheDir: filepath.Join(dir, "cache")})
	if err != nil {
		b.Fatal(err)
	}
	defer rt.Close(ctx)
	wasm, err := os.ReadFile(guestbuild.Go(b, "testguests/timers"))
	if err != nil {
		b.Fatal(err)
	}
	mod, err := rt.Compile(ctx, wasm, modrt.Limits{})
	if err != nil {
		b.Fatal(err)
	}
	write := func(name string, cmd func(i int) string) string {
		path := filepath.Join(dir, name)
		f, err := os.Create(path)
		if err != nil {
			b.Fatal(err)
		}
		w := bufio.NewWriter(f)
		for i := 0; i < records; i++ {
			fmt.Fprintf(w, `{"user":"k%d","ts":%d,"text":"%s"}`+"\n", i%keys, 1700000000000+i, cmd(i))
		}
		w.Flush()
		f.Close()
		return path
	}
	timers := write("timers.ndjson", func(i int) string { return fmt.Sprintf("set t%d p 0", i) })
	plain := write("plain.ndjson", func(int) string { return "count" })
	for i := 0; i < b.N; i++ {
		t0 := time.Now()
		runPipeline(b, mod, nil, plain, records)
		base := time.Since(t0)
		t0 = time.Now()
		runPipeline(b, mod, nil, timers, records)
		with := time.Since(t0)
		b.ReportMetric(float64(records)/base.Seconds(), "records-only-rec/s")
		b.ReportMetric(float64(records)/with.Seconds(), "with-timers-rec/s")
		b.ReportMetric(float64(records)/(with-base).Seconds(), "firings/s")
	}
}
