package modrt

import (
	"context"
	"encoding/binary"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/wasmstream/wasmstream/abi"
	"github.com/wasmstream/wasmstream/internal/guestbuild"
)

// BenchmarkProcessEmpty measures one Process call that does nothing: the wasmstream_alloc call,
// encoding the Batch into guest memory and the wasmstream_process call.
func BenchmarkProcessEmpty(b *testing.B) {
	r := newRuntime(b, RuntimeConfig{})
	i := instantiate(b, compile(b, r, "driver", Limits{}), InstanceConfig{})
	for _, n := range []int{0, 1, 100} {
		recs := make([]abi.Record, n)
		for k := range recs {
			recs[k] = rec("key", nil)
		}
		b.Run(map[int]string{0: "records=0", 1: "records=1", 100: "records=100"}[n], func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := i.Process(ctx, recs, nil); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// benchHostCalls runs one Process call whose program makes calls host calls built by add, and
// reports the time per host call (including the driver's few instructions to decode each op).
func benchHostCalls(b *testing.B, env Env, add func(p *prog)) {
	const calls = 1000
	r := newRuntime(b, RuntimeConfig{})
	i := instantiate(b, compile(b, r, "driver", Limits{}), InstanceConfig{})
	p := new(prog)
	for k := 0; k < calls; k++ {
		add(p)
	}
	recs := []abi.Record{rec("key", p.bytes())}
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		if _, err := i.Process(ctx, recs, env); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*calls), "ns/hostcall")
}

// BenchmarkHostCall is the floor: now_ms, a host call that touches no memory.
func BenchmarkHostCall(b *testing.B) {
	benchHostCalls(b, nil, func(p *prog) { p.op(opNowMs) })
}

// constEnv answers every StateGet with the same value, so BenchmarkStateGet measures the host
// side only.
type constEnv []byte

func (e constEnv) StateGet(key, name []byte) ([]byte, bool, error) { return e, true, nil }

func (e constEnv) StateScan(key, prefix, after []byte, fromStart bool, fn func(name, val []byte) bool) error {
	return nil
}

// BenchmarkStateGet reads a 16-byte committed value through the Env (a constant one, so the time
// is the runtime's: bounds checks, scope and overlay lookups, the copy into guest memory).
func BenchmarkStateGet(b *testing.B) {
	benchHostCalls(b, constEnv("0123456789abcdef"), func(p *prog) { p.get("key", "name", scratch, 64) })
}

// BenchmarkStateGetOverlay reads a value written earlier in the same call.
func BenchmarkStateGetOverlay(b *testing.B) {
	first := true
	benchHostCalls(b, nil, func(p *prog) {
		if first {
			p.put("key", "name", "0123456789abcdef")
			first = false
		}
		p.get("key", "name", scratch, 64)
	})
}

// BenchmarkStatePut writes 1000 16-byte values in one call (the copies the Effects own included).
func BenchmarkStatePut(b *testing.B) {
	benchHostCalls(b, nil, func(p *prog) { p.put("key", "name", "0123456789abcdef") })
}

// BenchmarkEmit emits 1000 records with a 16-byte value in one call.
func BenchmarkEmit(b *testing.B) {
	benchHostCalls(b, nil, func(p *prog) { p.emit("out", "key", "0123456789abcdef", nil, -1) })
}

func benchCompile(b *testing.B, wasm []byte, cacheDir string) {
	r := newRuntime(b, RuntimeConfig{CacheDir: cacheDir})
	if cacheDir != "" { // fill the cache
		m, err := r.Compile(context.Background(), wasm, Limits{})
		if err != nil {
			b.Fatal(err)
		}
		_ = m.Close(context.Background())
	}
	b.ResetTimer()
	for b.Loop() {
		// Closing the only Module drops the compiled code from memory: the next Compile
		// compiles again, or loads from the disk cache.
		m, err := r.Compile(context.Background(), wasm, Limits{})
		if err != nil {
			b.Fatal(err)
		}
		_ = m.Close(context.Background())
	}
}

// BenchmarkCompile measures Compile (validation, compilation, trial instance), without a cache and
// from the disk cache, for the WAT driver and a standard Go guest (skipped with -short).
func BenchmarkCompile(b *testing.B) {
	for _, g := range []struct {
		name string
		wasm func(testing.TB) []byte
	}{
		{"driver", func(t testing.TB) []byte { return fixture(t, "driver") }},
		{"goguest", goguestWasm},
	} {
		b.Run(g.name+"/nocache", func(b *testing.B) { benchCompile(b, g.wasm(b), "") })
		b.Run(g.name+"/diskcache", func(b *testing.B) { benchCompile(b, g.wasm(b), b.TempDir()) })
	}
}

// BenchmarkInstantiate measures Instantiate (instantiation, _initialize, ABI check, init) and Close.
func BenchmarkInstantiate(b *testing.B) {
	for _, g := range []struct {
		name string
		wasm func(testing.TB) []byte
	}{
		{"driver", func(t testing.TB) []byte { return fixture(t, "driver") }},
		{"goguest", goguestWasm},
	} {
		b.Run(g.name, func(b *testing.B) {
			r := newRuntime(b, RuntimeConfig{})
			m, err := r.Compile(context.Background(), g.wasm(b), Limits{})
			if err != nil {
				b.Fatal(err)
			}
			defer m.Close(context.Background())
			b.ReportAllocs()
			for b.Loop() {
				i, err := m.Instantiate(context.Background(), InstanceConfig{Task: "t"})
				if err != nil {
					b.Fatal(err)
				}
				_ = i.Close(context.Background())
			}
		})
	}
}

// BenchmarkGoGuestProcess measures a standard Go guest processing 100 records (a state_get, a
// state_put and an emit each).
func BenchmarkGoGuestProcess(b *testing.B) {
	recs := make([]abi.Record, 100)
	for k := range recs {
		recs[k] = rec(string(rune('a'+k%26)), []byte("0123456789abcdef"))
	}
	benchProcess(b, goguestWasm(b), recs)
}

// benchProcess measures Process of recs on an instance of wasm, and reports ns per record.
func benchProcess(b *testing.B, wasm []byte, recs []abi.Record) {
	r := newRuntime(b, RuntimeConfig{})
	m, err := r.Compile(context.Background(), wasm, Limits{})
	if err != nil {
		b.Fatal(err)
	}
	defer m.Close(context.Background())
	i := instantiate(b, m, InstanceConfig{})
	env := newEnv(nil)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := i.Process(context.Background(), recs, env); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(recs)), "ns/record")
}

// BenchmarkBatchProcess measures the benchmarks' guests, in Go and in Rust, on a batch of 256
// records of 256 distinct keys with ~100-byte values, the shape of BenchmarkKafkaPipeline's
// batches over 10k keys: the call, the batch's encoding into guest memory, the SDK's decoding of
// each record and, for the counter (testguests/counter: a state_get, a state_put and an emit per
// record), the guest's work and the host functions', per record.
func BenchmarkBatchProcess(b *testing.B) {
	for _, g := range []struct {
		name string
		wasm func(testing.TB) []byte
	}{
		{"noop-go", goGuest("testguests/noop")}, {"noop-rust", rustGuest("testguests/noop-rust")},
		{"counter-go", goGuest("testguests/counter")}, {"counter-rust", rustGuest("testguests/counter-rust")},
	} {
		b.Run(g.name, func(b *testing.B) {
			recs := make([]abi.Record, 256)
			for k := range recs {
				recs[k] = rec(fmt.Sprintf("user%05d", k), []byte(strings.Repeat("0123456789", 9)))
			}
			benchProcess(b, g.wasm(b), recs)
		})
	}
}

// cpuGuest is a guest for BenchmarkCPUBound.
type cpuGuest struct {
	name string
	wasm func(testing.TB) []byte
	recs func() []abi.Record
}

// textRecords is a batch of 16 records of 1 KiB of English-like text each.
func textRecords() []abi.Record {
	words := strings.Fields("the quick brown Fox jumps over a lazy dog while 42 zebras and 7 owls " +
		"watch quietly from behind the old Oak tree near river Thames in early spring morning light")
	recs := make([]abi.Record, 16)
	for k := range recs {
		var b []byte
		for w := k; len(b) < 1024; w += 7 {
			b = append(append(b, words[w%len(words)]...), ' ')
		}
		recs[k] = rec(string(rune('a'+k)), b[:1024])
	}
	return recs
}

func goGuest(pkg string) func(testing.TB) []byte {
	return func(t testing.TB) []byte {
		if testing.Short() {
			t.Skip("builds a Go guest; skipped with -short")
		}
		b, err := os.ReadFile(guestbuild.Go(t, pkg))
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
}

func rustGuest(crate string) func(testing.TB) []byte {
	return func(t testing.TB) []byte {
		if testing.Short() {
			t.Skip("builds a Rust guest; skipped with -short")
		}
		b, err := os.ReadFile(guestbuild.Rust(t, crate))
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
}

var cpuGuests = []cpuGuest{
	{"tokenizer-go", goGuest("testguests/tokenizer"), textRecords},
	{"wordcount-go", goGuest("wordcount"), textRecords},
	{"wordcount-rust", rustGuest("wordcount-rust"), textRecords},
	{"spin-wat", func(t testing.TB) []byte { return fixture(t, "spin") }, func() []abi.Record {
		return []abi.Record{rec("k", binary.LittleEndian.AppendUint32(nil, 100_000))}
	}},
}

// BenchmarkCPUBound measures what bounding a guest's CPU time costs (DESIGN S21), on a CPU-heavy
// guest (a tokenizer over 1 KiB records), the wordcount examples and a tight arithmetic loop: the
// same batch is processed by three instances in turn — no bound at all, wazero's interruption
// (WithCloseOnContextDone, with a deadline per call) and fuel metering — so that the ratios
// come from one run under the same conditions. Metrics: ns per record of each, and the overhead
// of each bound against none (fuel-% and interrupt-%).
func BenchmarkCPUBound(b *testing.B) {
	for _, g := range cpuGuests {
		b.Run(g.name, func(b *testing.B) {
			wasm := g.wasm(b)
			recs := g.recs()
			type mode struct {
				name string
				inst *Instance
				ctx  bool // a deadline per call
				ns   time.Duration
			}
			mk := func(name string, rc RuntimeConfig, lim Limits, withCtx bool) *mode {
				r := newRuntime(b, rc)
				m, err := r.Compile(context.Background(), wasm, lim)
				if err != nil {
					b.Fatal(err)
				}
				b.Cleanup(func() { _ = m.Close(context.Background()) })
				return &mode{name: name, inst: instantiate(b, m, InstanceConfig{}), ctx: withCtx}
			}
			modes := []*mode{
				mk("none", RuntimeConfig{}, Limits{FuelPerRecord: NoFuel}, false),
				mk("interrupt", RuntimeConfig{closeOnContextDone: true}, Limits{FuelPerRecord: NoFuel}, true),
				mk("fuel", RuntimeConfig{}, Limits{}, false),
			}
			var want []Output
			for _, m := range modes { // warm up, and check that every mode computes the same
				eff, err := m.inst.Process(context.Background(), recs, newEnv(nil))
				if err != nil {
					b.Fatalf("%s: %v", m.name, err)
				}
				if want == nil {
					want = eff.Outputs
				} else if fmtOutputs(eff.Outputs) != fmtOutputs(want) {
					b.Fatalf("%s computes other outputs than %s", m.name, modes[0].name)
				}
			}
			b.ResetTimer()
			for b.Loop() {
				for _, m := range modes {
					ctx, cancel := context.Background(), context.CancelFunc(func() {})
					start := time.Now()
					if m.ctx {
						ctx, cancel = context.WithTimeout(ctx, time.Minute)
					}
					_, err := m.inst.Process(ctx, recs, newEnv(nil))
					cancel()
					m.ns += time.Since(start)
					if err != nil {
						b.Fatalf("%s: %v", m.name, err)
					}
				}
			}
			per := func(m *mode) float64 { return float64(m.ns.Nanoseconds()) / float64(b.N*len(recs)) }
			for _, m := range modes {
				b.ReportMetric(per(m), m.name+"-ns/rec")
			}
			b.ReportMetric(100*(per(modes[2])/per(modes[0])-1), "fuel-%")
			b.ReportMetric(100*(per(modes[1])/per(modes[0])-1), "interrupt-%")
		})
	}
}
