package main

// Tests of run, check and state against the real host and the real wordcount module, built
// from source.

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/wasmstream/wasmstream/abi"
	"github.com/wasmstream/wasmstream/internal/guestbuild"
)

// wordcountFiles returns the example's input, expected outputs and expected state.
func wordcountFiles(t *testing.T) (input string, outputs, state []byte) {
	t.Helper()
	dir := filepath.Join(guestbuild.Root(), "examples", "wasm", "wordcount")
	outputs, err := os.ReadFile(filepath.Join(dir, "expected.ndjson"))
	if err != nil {
		t.Fatal(err)
	}
	state, err = os.ReadFile(filepath.Join(dir, "expected-state.txt"))
	if err != nil {
		t.Fatal(err)
	}
	return filepath.Join(dir, "input.ndjson"), outputs, state
}

// copyWordcount copies the wordcount example's module to dir/wordcount.wasm, for a
// configuration that names it by a path relative to dir.
func copyWordcount(t *testing.T, dir string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(dir, "wordcount.wasm"), must(os.ReadFile(guestbuild.Go(t, "wordcount"))), 0o644); err != nil {
		t.Fatal(err)
	}
}

// sortOutputs sorts output lines by key, bytewise, keeping the emit order within a key: the
// order of the example's expected.ndjson.
func sortOutputs(t *testing.T, out []byte) string {
	t.Helper()
	lines := strings.SplitAfter(string(out), "\n")
	if lines[len(lines)-1] == "" {
		lines = lines[:len(lines)-1]
	}
	key := func(line string) string {
		var o struct{ Key string }
		if err := json.Unmarshal([]byte(line), &o); err != nil {
			t.Fatalf("output line %q: %v", line, err)
		}
		return o.Key
	}
	slices.SortStableFunc(lines, func(a, b string) int { return cmp.Compare(key(a), key(b)) })
	return strings.Join(lines, "")
}

// sortOutputsFully sorts output lines by key, output, timestamp and value.
func sortOutputsFully(t *testing.T, out []byte) string {
	t.Helper()
	lines := strings.SplitAfter(string(out), "\n")
	if lines[len(lines)-1] == "" {
		lines = lines[:len(lines)-1]
	}
	type sinkLine struct {
		Output, Key, Value string
		Ts                 int64
	}
	parse := func(line string) sinkLine {
		var o sinkLine
		if err := json.Unmarshal([]byte(line), &o); err != nil {
			t.Fatalf("output line %q: %v", line, err)
		}
		return o
	}
	slices.SortStableFunc(lines, func(a, b string) int {
		x, y := parse(a), parse(b)
		return cmp.Or(cmp.Compare(x.Key, y.Key), cmp.Compare(x.Output, y.Output), cmp.Compare(x.Ts, y.Ts), cmp.Compare(x.Value, y.Value))
	})
	return strings.Join(lines, "")
}

// TestWordcountConfigFile runs check, run and state on the wordcount example through a
// configuration file, as a user would.
func TestWordcountConfigFile(t *testing.T) {
	input, wantOut, wantState := wordcountFiles(t)
	// The module and the output are relative paths: resolved against the configuration
	// file's directory, as is the default data directory.
	cfgDir := t.TempDir()
	copyWordcount(t, cfgDir)
	cfg := filepath.Join(cfgDir, "ws.yaml")
	writeWordcountConfig(t, cfg, input)

	code, stdout, stderr := runCLI(t, "check", "-c", cfg)
	if code != 0 {
		t.Fatalf("check: exit %d\n%s", code, stderr)
	}
	for _, want := range []string{"task wordcount", "abi      " + abi.VersionString(abi.Version), abi.ModuleName + ".", "  grants   none\n", "ok: 1 task(s) valid"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("check output lacks %q:\n%s", want, stdout)
		}
	}

	code, _, stderr = runCLI(t, "run", "-c", cfg, "--log-format", "json")
	if code != 0 {
		t.Fatalf("run: exit %d\n%s", code, stderr)
	}
	if !strings.Contains(stderr, `"msg":"starting"`) {
		t.Errorf("run did not log JSON to stderr:\n%s", stderr)
	}
	gotOut, err := os.ReadFile(filepath.Join(cfgDir, "out.ndjson"))
	if err != nil {
		t.Fatal(err)
	}
	if got := sortOutputs(t, gotOut); got != string(wantOut) {
		t.Errorf("outputs, sorted by key:\n%s\nwant:\n%s", got, wantOut)
	}

	// The data directory defaults to "data" next to the configuration file.
	// expected-state.txt is sorted bytewise.
	// The state command prints in store order (shorter keys first), so sort before comparing.
	code, stdout, stderr = runCLI(t, "state", "-c", cfg, "--task", "wordcount")
	if code != 0 || sortLines(stdout) != string(wantState) {
		t.Errorf("state: exit %d, stdout:\n%s\nwant:\n%s\nstderr:\n%s", code, stdout, wantState, stderr)
	}
	code, stdout, _ = runCLI(t, "state", "--data-dir", filepath.Join(cfgDir, "data"))
	if code != 0 || stdout != "wordcount\n" {
		t.Errorf("state listing: exit %d, stdout %q", code, stdout)
	}
	var alice []string
	for line := range strings.SplitAfterSeq(string(wantState), "\n") {
		if strings.HasPrefix(line, "alice\t") {
			alice = append(alice, line)
		}
	}
	code, stdout, _ = runCLI(t, "state", "-c", cfg, "--task", "wordcount", "--key", "alice")
	if code != 0 || sortLines(stdout) != strings.Join(alice, "") {
		t.Errorf("state --key alice: exit %d, stdout:\n%s\nwant:\n%s", code, stdout, strings.Join(alice, ""))
	}
	code, stdout, _ = runCLI(t, "state", "-c", cfg, "--task", "wordcount", "--prefix", "ali", "--format", "json")
	if n := strings.Count(stdout, "\n"); code != 0 || n != len(alice) || !strings.Contains(stdout, `"key":"alice","name":"hello","value":"8"`) {
		t.Errorf("state --prefix ali --format json: exit %d, %d lines:\n%s", code, n, stdout)
	}
	code, _, stderr = runCLI(t, "state", "-c", cfg, "--task", "nope")
	if code != exitFailure || !strings.Contains(stderr, "task nope has no state") || !strings.Contains(stderr, "wordcount") {
		t.Errorf("state of an unknown task: exit %d, stderr:\n%s", code, stderr)
	}
}

// TestWordcountQuickForm runs the single-task form, outputs on the command's stdout.
func TestWordcountQuickForm(t *testing.T) {
	module := guestbuild.Go(t, "wordcount")
	input, wantOut, _ := wordcountFiles(t)
	var stdout, stderr bytes.Buffer
	code := execute(context.Background(), []string{"run", "--module", module, "--input", "-",
		"--key-field", "user", "--value-field", "text", "--timestamp-field", "ts",
		"--task-config", `{"min_len": 2}`, "--data-dir", t.TempDir(), "--log-level", "warn"},
		bytes.NewReader(must(os.ReadFile(input))), &stdout, &stderr)
	if code != 0 {
		t.Fatalf("exit %d\n%s", code, stderr.String())
	}
	if got := sortOutputs(t, stdout.Bytes()); got != string(wantOut) {
		t.Errorf("outputs, sorted by key:\n%s\nwant:\n%s", got, wantOut)
	}
}

// TestRunStopsOnCancel: a cancelled context (what SIGINT and SIGTERM do) makes run return
// cleanly.
func TestRunStopsOnCancel(t *testing.T) {
	module := guestbuild.Go(t, "wordcount")
	input, _, _ := wordcountFiles(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	var stdout, stderr bytes.Buffer
	code := execute(ctx, []string{"run", "--module", module, "--input", input, "--key-field", "user",
		"--data-dir", t.TempDir()}, strings.NewReader(""), &stdout, &stderr)
	if code != 0 {
		t.Fatalf("exit %d\n%s", code, stderr.String())
	}
}

func TestCheckRefusesBadModule(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.wasm")
	if err := os.WriteFile(bad, []byte("not wasm"), 0o644); err != nil {
		t.Fatal(err)
	}
	input := filepath.Join(dir, "in.ndjson")
	if err := os.WriteFile(input, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	code, _, stderr := runCLI(t, "check", "--module", bad, "--input", input, "--task", "broken")
	if code != exitFailure || !strings.Contains(stderr, "task broken") {
		t.Errorf("exit %d, want %d; stderr:\n%s", code, exitFailure, stderr)
	}
}

func TestStateWithoutStore(t *testing.T) {
	code, _, stderr := runCLI(t, "state", "--data-dir", t.TempDir())
	if code != exitFailure || !strings.Contains(stderr, "no state store") {
		t.Errorf("exit %d, want %d; stderr:\n%s", code, exitFailure, stderr)
	}
}

// TestTimerExamples runs the timer examples (examples/wasm/sessions and dedupe) with their own
// config.yaml, the module built from source and a temporary data directory, and compares the
// outputs, sorted by key, and the final state with the example's expected files.
func TestTimerExamples(t *testing.T) {
	for _, name := range []string{"sessions", "dedupe"} {
		t.Run(name, func(t *testing.T) {
			runTimerExample(t, name, guestbuild.Go(t, name), nil)
		})
	}
	// The Rust port on the SDK's Rust windows: the same files, the same outputs and state.
	t.Run("sessions-rust", func(t *testing.T) {
		runTimerExample(t, "sessions", guestbuild.Rust(t, "sessions-rust"), nil)
	})
	// The same sessions fed one line at a time through stdin: the host reads a record per chunk
	// and runs firings between them, as a live stream would; the result does not change.
	t.Run("sessions line by line", func(t *testing.T) {
		input := must(os.ReadFile(filepath.Join(guestbuild.Root(), "examples", "wasm", "sessions", "input.ndjson")))
		r, w := io.Pipe()
		done := make(chan struct{})
		go func() {
			defer close(done)
			for line := range strings.SplitAfterSeq(string(input), "\n") {
				if _, err := io.WriteString(w, line); err != nil {
					return
				}
			}
			w.Close()
		}()
		defer func() { r.Close(); <-done }()
		runTimerExample(t, "sessions", guestbuild.Go(t, "sessions"), r)
	})
}

// runTimerExample runs examples/wasm/<name> as its config.yaml says with module, reading its
// input from stdin instead when stdin is not nil.
func runTimerExample(t *testing.T, name, module string, stdin io.Reader) {
	t.Helper()
	dir := filepath.Join(guestbuild.Root(), "examples", "wasm", name)
	s, err := loadFile(filepath.Join(dir, "config.yaml"), nil, false)
	if err != nil {
		t.Fatal(err)
	}
	if len(s.Host.Tasks) != 1 || s.Host.Tasks[0].Name != name || s.Host.Tasks[0].Output.Type != "stdout" {
		t.Fatalf("%s/config.yaml: want one task %s writing to stdout, got %+v", name, name, s.Host.Tasks)
	}
	s.Host.DataDir = t.TempDir()
	s.Host.Tasks[0].Module = module
	if stdin != nil {
		s.Host.Tasks[0].Inputs[0].Type, s.Host.Tasks[0].Inputs[0].Path = "stdin", ""
	} else {
		stdin = strings.NewReader("")
	}
	var stdout, stderr bytes.Buffer
	if err := runHost(context.Background(), s, false, stdin, &stdout, &stderr); err != nil {
		t.Fatalf("run: %v\n%s", err, stderr.String())
	}
	want := must(os.ReadFile(filepath.Join(dir, "expected.ndjson")))
	sorted := sortOutputs
	if name == "sessions" {
		// Its late events and summaries of one user come in an order that depends on how far
		// the host read ahead (ABI.md §4.12): compared in the order of its expected file.
		sorted = sortOutputsFully
	}
	if got := sorted(t, stdout.Bytes()); got != string(want) {
		t.Errorf("outputs, sorted:\n%s\nwant:\n%s", got, want)
	}
	// Empty for sessions: every session closes at the end of the input. dedupe keeps its ids
	// until their processing-time timers fire.
	wantState := string(must(os.ReadFile(filepath.Join(dir, "expected-state.txt"))))
	code, out, errOut := runCLI(t, "state", "--data-dir", s.Host.DataDir, "--task", name)
	if code != 0 || sortLines(out) != wantState {
		t.Errorf("state: exit %d, stdout:\n%s\nwant:\n%s\nstderr:\n%s", code, out, wantState, errOut)
	}
}

func sortLines(s string) string {
	lines := strings.SplitAfter(s, "\n")
	slices.Sort(lines)
	return strings.Join(lines, "")
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

// writeWordcountConfig writes a configuration file at cfg that runs the wordcount example
// (wordcount.wasm beside it) over input into out.ndjson.
func writeWordcountConfig(t *testing.T, cfg, input string) {
	t.Helper()
	yaml := `
checkpoint_interval: 50ms
tasks:
  - name: wordcount
    module: wordcount.wasm
    config: {min_len: 2}
    inputs:
      - path: ` + input + `
        key_field: user
        value_field: text
        timestamp_field: ts
    output:
      type: file
      path: out.ndjson
`
	if err := os.WriteFile(cfg, []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
}
