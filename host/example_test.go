package host_test

import (
	"bytes"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/wasmstream/wasmstream/host"
	"github.com/wasmstream/wasmstream/internal/guestbuild"
	"github.com/wasmstream/wasmstream/internal/hosttest"
)

// wordcountTask is the example's task over its sample input.
func wordcountTask(module, dir string) host.TaskConfig {
	return host.TaskConfig{
		Name:   "wordcount",
		Module: module,
		Config: map[string]any{"min_len": 2},
		Inputs: []host.InputConfig{{
			Name: "words", Path: filepath.Join(guestbuild.Root(), "examples", "wasm", "wordcount", "input.ndjson"),
			KeyField: "user", ValueField: "text", TimestampField: "ts",
		}},
		Output: host.OutputConfig{Type: host.OutputFile, Path: filepath.Join(dir, "out.ndjson")},
	}
}

func testLogger(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelInfo}))
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Helper()
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// sortByKey orders output lines by their key, keeping the order within a key: the order across
// keys depends on scheduling, the order within a key may not (S1).
func sortByKey(t *testing.T, data []byte) []string {
	lines := strings.Split(strings.TrimSpace(string(data)), "\n")
	key := func(l string) string {
		i := strings.Index(l, `"key":`)
		if i < 0 {
			t.Fatalf("output line without a key: %s", l)
		}
		return l[i:]
	}
	sort.SliceStable(lines, func(i, j int) bool {
		ki, kj := key(lines[i]), key(lines[j])
		ki, kj = ki[:strings.Index(ki, `,"value"`)], kj[:strings.Index(kj, `,"value"`)]
		return ki < kj
	})
	return lines
}

func dumpState(t *testing.T, dataDir, task string) string {
	t.Helper()
	r, err := host.OpenState(dataDir)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	var lines []string
	err = r.Scan(task, nil, false, func(e host.StateEntry) bool {
		lines = append(lines, fmt.Sprintf("%s\t%s\t%s", e.Key, e.Name, e.Value))
		return true
	})
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(lines)
	return strings.Join(lines, "\n") + "\n"
}

func TestWordcountExample(t *testing.T) {
	module := guestbuild.Go(t, "wordcount")
	for _, workers := range []int{1, 4} {
		t.Run(fmt.Sprintf("workers=%d", workers), func(t *testing.T) {
			dir := t.TempDir()
			tc := wordcountTask(module, dir)
			tc.Workers = workers
			tc.MaxBatchRecords = 3
			hosttest.RunToEnd(t, host.Config{DataDir: filepath.Join(dir, "data"), Logger: testLogger(t), Tasks: []host.TaskConfig{tc}})

			got, err := os.ReadFile(filepath.Join(dir, "out.ndjson"))
			if err != nil {
				t.Fatal(err)
			}
			want, err := os.ReadFile(filepath.Join(guestbuild.Root(), "examples", "wasm", "wordcount", "expected.ndjson"))
			if err != nil {
				t.Fatal(err)
			}
			if g, w := strings.Join(sortByKey(t, got), "\n"), strings.Join(sortByKey(t, want), "\n"); g != w {
				t.Errorf("outputs differ from expected.ndjson\ngot:\n%s\nwant:\n%s", g, w)
			}
			wantState, err := os.ReadFile(filepath.Join(guestbuild.Root(), "examples", "wasm", "wordcount", "expected-state.txt"))
			if err != nil {
				t.Fatal(err)
			}
			if g := dumpState(t, filepath.Join(dir, "data"), "wordcount"); g != string(wantState) {
				t.Errorf("state differs from expected-state.txt\ngot:\n%s\nwant:\n%s", g, wantState)
			}

			// A second run over the same input resumes after the last line: nothing new.
			hosttest.RunToEnd(t, host.Config{DataDir: filepath.Join(dir, "data"), Logger: testLogger(t), Tasks: []host.TaskConfig{tc}})
			again, _ := os.ReadFile(filepath.Join(dir, "out.ndjson"))
			if !bytes.Equal(again, got) {
				t.Errorf("a second run over a finished input emitted %d more bytes", len(again)-len(got))
			}
		})
	}
}

// exampleCase runs an example module over its sample input and checks its expected files.
func exampleCase(t *testing.T, module, exampleDir string, config map[string]any, keyField, valueField, tsField string) {
	t.Helper()
	dir := t.TempDir()
	src := filepath.Join(guestbuild.Root(), "examples", "wasm", exampleDir)
	tc := host.TaskConfig{
		Name: "example", Module: module, Config: config, Workers: 2, MaxBatchRecords: 4,
		Inputs: []host.InputConfig{{Name: "in", Path: filepath.Join(src, "input.ndjson"),
			KeyField: keyField, ValueField: valueField, TimestampField: tsField}},
		Output: host.OutputConfig{Type: host.OutputFile, Path: filepath.Join(dir, "out.ndjson")},
	}
	hosttest.RunToEnd(t, host.Config{DataDir: filepath.Join(dir, "data"), Logger: testLogger(t), Tasks: []host.TaskConfig{tc}})
	got, err := os.ReadFile(filepath.Join(dir, "out.ndjson"))
	if err != nil {
		t.Fatal(err)
	}
	want, err := os.ReadFile(filepath.Join(src, "expected.ndjson"))
	if err != nil {
		t.Fatal(err)
	}
	if g, w := strings.Join(sortByKey(t, got), "\n"), strings.Join(sortByKey(t, want), "\n"); g != w {
		t.Errorf("outputs differ from %s/expected.ndjson\ngot:\n%s\nwant:\n%s", exampleDir, g, w)
	}
	wantState, err := os.ReadFile(filepath.Join(src, "expected-state.txt"))
	if err != nil {
		t.Fatal(err)
	}
	if g := dumpState(t, filepath.Join(dir, "data"), "example"); g != string(wantState) {
		t.Errorf("state differs from %s/expected-state.txt\ngot:\n%s\nwant:\n%s", exampleDir, g, wantState)
	}
}

// The Rust wordcount behaves exactly like the Go one: same expected files.
func TestWordcountRustExample(t *testing.T) {
	exampleCase(t, guestbuild.Rust(t, "wordcount-rust"), "wordcount-rust", map[string]any{"min_len": 2}, "user", "text", "ts")
}

func TestLogparseRustExample(t *testing.T) {
	exampleCase(t, guestbuild.Rust(t, "logparse-rust"), "logparse-rust",
		map[string]any{"output": "summary", "on_invalid": "count"}, "client", "line", "")
}
