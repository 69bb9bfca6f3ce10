package host_test

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/wasmstream/wasmstream/host"
	"github.com/wasmstream/wasmstream/internal/guestbuild"
	"github.com/wasmstream/wasmstream/internal/hosttest"
)

// TestBenchGuestsRustMatchGo checks that the Rust ports of the benchmarks' guests
// (testguests/noop-rust, testguests/counter-rust, testguests/cpuheavy-rust), which `make
// bench-compare` measures beside the Go ones, do the same work: over the same input, the same
// outputs and the same state.
func TestBenchGuestsRustMatchGo(t *testing.T) {
	dir := t.TempDir()
	input := filepath.Join(dir, "in.ndjson")
	f, err := os.Create(input)
	if err != nil {
		t.Fatal(err)
	}
	w := bufio.NewWriter(f)
	const records, keys = 30, 3
	for i := 0; i < records; i++ {
		fmt.Fprintf(w, `{"user":"k%d","ts":%d,"text":"x"}`+"\n", i%keys, 1700000000000+i)
	}
	w.Flush()
	f.Close()

	run := func(t *testing.T, module string, config ...map[string]any) (outputs []string, state string) {
		d := t.TempDir()
		var cfg map[string]any
		if len(config) > 0 {
			cfg = config[0]
		}
		hosttest.RunToEnd(t, host.Config{DataDir: filepath.Join(d, "data"), Logger: testLogger(t), Tasks: []host.TaskConfig{{
			Name: "bench", Module: module, MaxBatchRecords: 4, Config: cfg,
			Inputs: []host.InputConfig{{Name: "in", Path: input, KeyField: "user", ValueField: "text", TimestampField: "ts"}},
			Output: host.OutputConfig{Type: "file", Path: filepath.Join(d, "out.ndjson")},
		}}})
		out, err := os.ReadFile(filepath.Join(d, "out.ndjson"))
		if err != nil && !os.IsNotExist(err) {
			t.Fatal(err)
		}
		if s := strings.TrimSpace(string(out)); s != "" {
			outputs = sortByKey(t, []byte(s))
		}
		return outputs, dumpState(t, filepath.Join(d, "data"), "bench")
	}

	t.Run("noop", func(t *testing.T) {
		for _, module := range []string{guestbuild.Go(t, "testguests/noop"), guestbuild.Rust(t, "testguests/noop-rust")} {
			out, state := run(t, module)
			if len(out) != 0 || state != "\n" {
				t.Errorf("%s: %d outputs, state %q; want none", guestbuild.Describe(module), len(out), state)
			}
		}
	})

	t.Run("counter", func(t *testing.T) {
		goOut, goState := run(t, guestbuild.Go(t, "testguests/counter"))
		rustOut, rustState := run(t, guestbuild.Rust(t, "testguests/counter-rust"))
		if len(goOut) != records {
			t.Fatalf("the Go counter emitted %d outputs, want %d", len(goOut), records)
		}
		last := goOut[records/keys-1] // k0's last output: its count is the records of k0
		if want := fmt.Sprintf(`"key":"k0","value":"%d"`, records/keys); !strings.Contains(last, want) {
			t.Errorf("the Go counter's last output for k0 is %s, want it to contain %s", last, want)
		}
		if g, w := strings.Join(rustOut, "\n"), strings.Join(goOut, "\n"); g != w {
			t.Errorf("the Rust counter's outputs differ from the Go counter's\nrust:\n%s\ngo:\n%s", g, w)
		}
		if rustState != goState {
			t.Errorf("the Rust counter's state differs from the Go counter's\nrust:\n%s\ngo:\n%s", rustState, goState)
		}
		if want := fmt.Sprintf("k0\tn\t%d\n", records/keys); !strings.HasPrefix(goState, want) {
			t.Errorf("state %q; want it to start with %q", goState, want)
		}
	})
	t.Run("cpuheavy", func(t *testing.T) {
		// The value of every record is "x": rounds × FNV-1a over one byte, chained.
		fnv := func(rounds int) string {
			h := uint64(14695981039346656037)
			for i := 0; i < rounds; i++ {
				h = (h ^ 'x') * 1099511628211
			}
			return fmt.Sprintf("%016x", h)
		}
		for _, rounds := range []int{0, 3} { // 0: the default, 220
			var config map[string]any
			want := fnv(220)
			if rounds > 0 {
				config = map[string]any{"rounds": rounds}
				want = fnv(rounds)
			}
			goOut, goState := run(t, guestbuild.Go(t, "testguests/cpuheavy"), config)
			rustOut, rustState := run(t, guestbuild.Rust(t, "testguests/cpuheavy-rust"), config)
			if len(goOut) != records {
				t.Fatalf("rounds %d: the Go guest emitted %d outputs, want %d", rounds, len(goOut), records)
			}
			for _, o := range goOut {
				if !strings.Contains(o, `"value":"`+want+`"`) {
					t.Fatalf("rounds %d: output %s; want the value %s", rounds, o, want)
				}
			}
			if g, w := strings.Join(rustOut, "\n"), strings.Join(goOut, "\n"); g != w {
				t.Errorf("rounds %d: the Rust guest's outputs differ from the Go guest's\nrust:\n%s\ngo:\n%s", rounds, g, w)
			}
			if goState != "\n" || rustState != "\n" {
				t.Errorf("rounds %d: state go %q, rust %q; want none", rounds, goState, rustState)
			}
		}
	})
}
