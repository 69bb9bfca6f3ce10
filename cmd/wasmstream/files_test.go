package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestMissingFilesAllAtOnce: check and run name every missing module and input file at once,
// each with its key, as a configuration error (exit 2), before compiling anything: the module
// that exists is not wasm, and nothing says it was refused.
func TestMissingFilesAllAtOnce(t *testing.T) {
	path := writeConfig(t, `
tasks:
  - name: a
    module: a.wasm
    inputs:
      - path: in1.ndjson
      - path: here.ndjson
      - path: in2.ndjson
  - name: b
    module: nowhere.wasm
    inputs:
      - path: in3.ndjson
`)
	dir := filepath.Dir(path)
	for _, f := range []string{"a.wasm", "here.ndjson"} {
		if err := os.WriteFile(filepath.Join(dir, f), []byte("not wasm\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	inputs := []string{
		"tasks[0].inputs[0].path: " + filepath.Join(dir, "in1.ndjson") + ": no such file",
		"tasks[0].inputs[2].path: " + filepath.Join(dir, "in2.ndjson") + ": no such file",
		"tasks[1].inputs[0].path: " + filepath.Join(dir, "in3.ndjson") + ": no such file",
	}
	module := "tasks[1].module: " + filepath.Join(dir, "nowhere.wasm") + ": no such file"
	for _, c := range []struct {
		cmd  string
		want []string
	}{
		{"check", append([]string{module}, inputs...)},
		{"run", inputs}, // a task may run a deployed version whatever its module file holds
	} {
		code, _, stderr := runCLI(t, c.cmd, "-c", path, "--data-dir", filepath.Join(dir, "data"))
		if code != exitUsage {
			t.Errorf("%s: exit %d, want %d\n%s", c.cmd, code, exitUsage, stderr)
		}
		for _, want := range c.want {
			if !strings.Contains(stderr, want) {
				t.Errorf("%s: stderr lacks %q:\n%s", c.cmd, want, stderr)
			}
		}
		if strings.Contains(stderr, "refused") || strings.Contains(stderr, "here.ndjson") {
			t.Errorf("%s: the module was compiled, or an existing file reported:\n%s", c.cmd, stderr)
		}
	}

	// The task given by flags names the flag.
	code, _, stderr := runCLI(t, "run", "--module", filepath.Join(dir, "a.wasm"), "--input", filepath.Join(dir, "gone.ndjson"), "--data-dir", filepath.Join(dir, "data"))
	if want := "--input: " + filepath.Join(dir, "gone.ndjson") + ": no such file"; code != exitUsage || !strings.Contains(stderr, want) {
		t.Errorf("run --module: exit %d, stderr %q; want %d and %q", code, stderr, exitUsage, want)
	}
}

// TestCheckDev: a configuration meant for `wasmstream dev` names no brokers. check says how to
// check it as dev runs it, and check --dev does.
func TestCheckDev(t *testing.T) {
	path := writeConfig(t, `
tasks:
  - name: wc
    module: wc.wasm
    inputs:
      - {type: kafka, topics: [words]}
    output: {type: kafka, topic: counts}
`)
	code, _, stderr := runCLI(t, "check", "-c", path)
	if code != exitUsage || !strings.Contains(stderr, "kafka.brokers: task wc uses Kafka") || !strings.Contains(stderr, "check it with 'wasmstream check --dev'") {
		t.Errorf("check: exit %d, want %d, the kafka.brokers problem and the --dev hint:\n%s", code, exitUsage, stderr)
	}
	// With --dev the brokers are not missing; the module file still is.
	code, _, stderr = runCLI(t, "check", "--dev", "-c", path)
	if code != exitUsage || strings.Contains(stderr, "kafka.brokers") || !strings.Contains(stderr, "tasks[0].module: ") {
		t.Errorf("check --dev: exit %d, want %d, no kafka.brokers problem, the missing module:\n%s", code, exitUsage, stderr)
	}
}

// TestRunMissingModule: run with a module file that does not exist, on a data directory that
// holds no version of the task, is a configuration error (exit 2) naming the file (and the
// flag, for a task given by --module), every such task at once, before any task starts. Once
// the data directory holds an active version, the same missing file runs that version
// (exit 0), as before. Before, the fresh data directory's task halted: exit 1.
func TestRunMissingModule(t *testing.T) {
	input, _, _ := wordcountFiles(t)
	dir := t.TempDir()
	data := filepath.Join(dir, "data")
	module := filepath.Join(dir, "wordcount.wasm")
	quick := func() (int, string) {
		code, _, stderr := runCLI(t, "run", "--module", module, "--input", input, "--output", filepath.Join(dir, "out.ndjson"), "--data-dir", data)
		return code, stderr
	}
	code, stderr := quick()
	if want := "--module: " + module + ": no such file"; code != exitUsage || !strings.Contains(stderr, want) {
		t.Fatalf("run --module, fresh data directory: exit %d, want %d and %q:\n%s", code, exitUsage, want, stderr)
	}

	path := writeConfig(t, `
tasks:
  - name: a
    module: a.wasm
    inputs:
      - path: `+input+`
    output:
      path: a.ndjson
  - name: b
    module: b.wasm
    inputs:
      - path: `+input+`
    output:
      path: b.ndjson
`)
	code, _, stderr = runCLI(t, "run", "-c", path, "--data-dir", filepath.Join(dir, "data2"))
	for _, want := range []string{"tasks[0].module: " + filepath.Join(filepath.Dir(path), "a.wasm") + ": no such file",
		"tasks[1].module: " + filepath.Join(filepath.Dir(path), "b.wasm") + ": no such file"} {
		if code != exitUsage || !strings.Contains(stderr, want) {
			t.Errorf("run -c: exit %d, want %d and %q:\n%s", code, exitUsage, want, stderr)
		}
	}

	// A run registers the module as the task's active version; without its file, the next
	// run runs that version.
	copyWordcount(t, dir)
	if code, stderr := quick(); code != 0 {
		t.Fatalf("run with the module: exit %d\n%s", code, stderr)
	}
	if err := os.Remove(module); err != nil {
		t.Fatal(err)
	}
	if code, stderr := quick(); code != 0 || !strings.Contains(stderr, "running the active version") {
		t.Fatalf("run without the module file, an active version in the data directory: exit %d, want 0 and the active version run:\n%s", code, stderr)
	}
}
