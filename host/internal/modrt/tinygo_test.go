package modrt

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/wasmstream/wasmstream/abi"
	"github.com/wasmstream/wasmstream/internal/guestbuild"
)

// wordcountRecords returns the wordcount example's input lines as records, key = user and value
// = text, as its README runs it.
func wordcountRecords(t *testing.T) []abi.Record {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(guestbuild.Root(), "examples", "wasm", "wordcount", "input.ndjson"))
	if err != nil {
		t.Fatal(err)
	}
	var recs []abi.Record
	for line := range strings.Lines(string(data)) {
		var l struct {
			User, Text string
			TS         int64
		}
		if err := json.Unmarshal([]byte(line), &l); err != nil {
			t.Fatal(err)
		}
		recs = append(recs, abi.Record{Offset: int64(len(recs)), Timestamp: l.TS, Source: []byte("in"), Key: []byte(l.User), Value: []byte(l.Text)})
	}
	return recs
}

// TestTinyGoFigures measures the wordcount example built with standard Go and with TinyGo:
// module size, compile and instantiate time, start-up fuel and the fuel of each record over many
// calls, one record a call, on one instance (so that the garbage collector runs: TinyGo's
// collects in the call that allocates, and that call pays for it). The figures behind the
// the TinyGo sizing advice of docs/writing-tasks.md; run with -v to see them (`make test-tinygo` does). It asserts
// what the advice rests on: the default budget covers the most expensive record many times
// over, and the same run spends the same fuel (fuel is deterministic, GC included).
func TestTinyGoFigures(t *testing.T) {
	tiny := guestbuild.TinyGo(t, "wordcount")
	std := guestbuild.Go(t, "wordcount")
	recs := wordcountRecords(t)
	const rounds = 200 // the input is 12 lines: 2400 calls
	type figures struct {
		size                  int
		compile, instantiate  time.Duration
		startup               int64
		perRecord             []int64 // one per call, in order
		median, p99, max, sum int64
		firstSpike            int // the first call that spent over 5 × the median, 1-based
	}
	measure := func(path string) figures {
		wasm, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		f := figures{size: len(wasm)}
		r := newRuntime(t, RuntimeConfig{})
		start := time.Now()
		m, err := r.Compile(context.Background(), wasm, Limits{})
		if err != nil {
			t.Fatal(err)
		}
		f.compile = time.Since(start)
		t.Cleanup(func() { _ = m.Close(context.Background()) })
		f.startup = m.Info().StartupFuel
		cfg := InstanceConfig{Task: "wordcount", Config: []byte(`{"min_len": 2}`), Now: func() int64 { return 1234 }}
		var inst *Instance
		for k := range 5 { // the fastest of a few: the machine's load only adds
			start = time.Now()
			i, err := m.Instantiate(context.Background(), cfg)
			if err != nil {
				t.Fatal(err)
			}
			if d := time.Since(start); k == 0 || d < f.instantiate {
				f.instantiate = d
			}
			if inst != nil {
				_ = inst.Close(context.Background())
			}
			inst = i
		}
		defer inst.Close(context.Background())
		env := newEnv(nil)
		for range rounds {
			for _, rec := range recs {
				eff, err := inst.Process(context.Background(), []abi.Record{rec}, env)
				if err != nil {
					t.Fatal(err)
				}
				for _, w := range eff.Writes { // commit, so that counts grow as in the host
					if env.state[string(w.Key)] == nil {
						env.state[string(w.Key)] = map[string][]byte{}
					}
					if w.Delete {
						delete(env.state[string(w.Key)], string(w.Name))
					} else {
						env.state[string(w.Key)][string(w.Name)] = w.Value
					}
				}
				f.perRecord = append(f.perRecord, eff.Fuel)
				f.sum += eff.Fuel
			}
		}
		sorted := slices.Sorted(slices.Values(f.perRecord))
		f.median, f.p99, f.max = sorted[len(sorted)/2], sorted[len(sorted)*99/100], sorted[len(sorted)-1]
		f.firstSpike = 1 + slices.IndexFunc(f.perRecord, func(n int64) bool { return n > 5*f.median })
		return f
	}
	g, tg := measure(std), measure(tiny)
	for _, x := range []struct {
		name string
		f    figures
	}{{"standard Go", g}, {"TinyGo", tg}} {
		t.Logf("%-11s: %8d bytes, compile %v, instantiate %v, start-up fuel %d; fuel per record over %d calls: median %d, p99 %d, max %d, mean %d; first over 5 × median: call %d (0: none)",
			x.name, x.f.size, x.f.compile.Round(time.Millisecond), x.f.instantiate.Round(10*time.Microsecond), x.f.startup,
			len(x.f.perRecord), x.f.median, x.f.p99, x.f.max, x.f.sum/int64(len(x.f.perRecord)), x.f.firstSpike)
	}
	if tg.max*100 > DefaultFuelPerRecord {
		t.Errorf("a TinyGo wordcount record spent up to %d fuel: more than a hundredth of the default budget %d", tg.max, DefaultFuelPerRecord)
	}
	// What the sizing advice of docs/writing-tasks.md warns about: TinyGo's collector runs inside the call that
	// allocates, so a few records pay for a whole collection, far above the typical record.
	if tg.max < 5*tg.median {
		t.Errorf("TinyGo fuel per record: max %d, median %d; want the collections to show (max ≥ 5 × median), or the advice in docs/writing-tasks.md is out of date", tg.max, tg.median)
	}
	if again := measure(tiny); !slices.Equal(again.perRecord, tg.perRecord) {
		t.Errorf("a second identical run spent other fuel per record: fuel must be deterministic")
	}
	if tg.size*10 > g.size {
		t.Errorf("TinyGo module %d bytes, standard Go %d: want TinyGo's at least 10 times smaller", tg.size, g.size)
	}
}
