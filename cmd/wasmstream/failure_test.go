package main

// Tests of what a failing module takes down (docs/deploy.md, "When a task fails"): a task that cannot
// start halts alone, a start version whose init fails is rolled back automatically, and the
// registry of a stopped host is read and rolled back offline.

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/wasmstream/wasmstream/host"
	"github.com/wasmstream/wasmstream/internal/guestbuild"
	"github.com/wasmstream/wasmstream/internal/hosttest"
	"github.com/wasmstream/wasmstream/store"
)

// modrtFixture returns the path of one of modrt's hostile fixtures.
func modrtFixture(name string) string {
	return filepath.Join(guestbuild.Root(), "host", "internal", "modrt", "testdata", name)
}

// twoTaskConfig writes a configuration with a task "bad" running badModule (listed first)
// and the wordcount example, both on the example's input, and returns the configuration
// file and the wordcount output's path.
func twoTaskConfig(t *testing.T, badModule, extra string) (cfg, out string) {
	t.Helper()
	input, _, _ := wordcountFiles(t)
	dir := t.TempDir()
	copyWordcount(t, dir)
	in := fmt.Sprintf("    inputs:\n      - path: %s\n        key_field: user\n        value_field: text\n        timestamp_field: ts\n", input)
	yaml := "checkpoint_interval: 50ms\n" + extra + `
tasks:
  - name: bad
    module: ` + badModule + `
    init_fuel: 10000000
` + in + `    output: {type: file, path: bad.ndjson}
  - name: wordcount
    module: wordcount.wasm
    config: {min_len: 2}
` + in + `    output: {type: file, path: out.ndjson}
`
	cfg = filepath.Join(dir, "ws.yaml")
	if err := os.WriteFile(cfg, []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	return cfg, filepath.Join(dir, "out.ndjson")
}

// TestFailingTaskHaltsAlone: a task whose init loops, exits or traps halts with its reason
// logged; the other task processes all its input; the host then exits 1. With
// on_task_failure: halt_host the first failure stops the host before the other task ran.
func TestFailingTaskHaltsAlone(t *testing.T) {
	_, wantOut, _ := wordcountFiles(t)
	cache := "cache_dir: " + t.TempDir() + "\n" // wordcount compiles once
	for _, c := range []struct{ name, fixture, reason string }{
		{"init loops", "initloop.wasm", "fuel"},
		{"init calls proc_exit", "initexit.wasm", "exit"},
		{"start-up traps", "inittrap.wasm", "_initialize trapped"},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg, out := twoTaskConfig(t, modrtFixture(c.fixture), cache)
			code, _, stderr := runCLI(t, "run", "-c", cfg)
			if code != exitFailure {
				t.Fatalf("run: exit %d, want %d\n%s", code, exitFailure, stderr)
			}
			got, err := os.ReadFile(out)
			if err != nil {
				t.Fatalf("the healthy task wrote no output: %v\n%s", err, stderr)
			}
			if sortOutputs(t, got) != string(wantOut) {
				t.Errorf("the healthy task's outputs are incomplete:\n%s\nstderr:\n%s", got, stderr)
			}
			for _, want := range []string{"task halted", "task=bad", c.reason} {
				if !strings.Contains(stderr, want) {
					t.Errorf("stderr lacks %q:\n%s", want, stderr)
				}
			}

			cfg, out = twoTaskConfig(t, modrtFixture(c.fixture), cache+"on_task_failure: halt_host\n")
			code, _, stderr = runCLI(t, "run", "-c", cfg)
			if code != exitFailure || !strings.Contains(stderr, "task bad") || !strings.Contains(stderr, c.reason) {
				t.Errorf("halt_host: exit %d, stderr:\n%s", code, stderr)
			}
			if _, err := os.Stat(out); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("halt_host: the other task ran (%v)", err)
			}
		})
	}
}

// TestStatusShowsHaltedTask: while the other task runs, status names the halted task and why;
// pause is refused with what to do; a deploy of a module that works restarts it, and it
// processes its input.
func TestStatusShowsHaltedTask(t *testing.T) {
	dir := t.TempDir()
	pr, pw := io.Pipe()
	defer pw.Close()
	badIn := filepath.Join(dir, "bad.ndjson")
	if err := os.WriteFile(badIn, []byte("{\"k\":\"a\",\"v\":\"1\"}\n{\"k\":\"a\",\"v\":\"2\"}\n{\"k\":\"b\",\"v\":\"1\"}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	good := filepath.Join(dir, "good.wasm")
	if err := os.WriteFile(good, must(os.ReadFile(guestbuild.Go(t, "testguests/versioned"))), 0o644); err != nil {
		t.Fatal(err)
	}
	badOut := filepath.Join(dir, "bad-out.ndjson")
	h, err := host.New(host.Config{
		DataDir: filepath.Join(dir, "data"),
		Stdin:   pr,
		Logger:  slog.New(slog.NewTextHandler(io.Discard, nil)),
		Admin:   host.AdminConfig{Addr: "127.0.0.1:0"},
		Tasks: []host.TaskConfig{{
			Name: "bad", Module: modrtFixture("initexit.wasm"),
			Inputs: []host.InputConfig{{Path: badIn, KeyField: "k", ValueField: "v"}},
			Output: host.OutputConfig{Type: "file", Path: badOut},
		}, {
			Name: "wordcount", Module: guestbuild.Go(t, "wordcount"),
			Inputs: []host.InputConfig{{Type: "stdin", KeyField: "user", ValueField: "text"}},
			Output: host.OutputConfig{Type: "file", Path: filepath.Join(dir, "out.ndjson")},
		}},
	})
	if err != nil {
		t.Fatal(err)
	}
	wait := hosttest.Go(t, h).Wait
	addr := h.AdminAddr()
	code, stdout, stderr := runCLI(t, "status", "--admin-addr", addr)
	if code != 0 || !strings.Contains(stdout, "task bad: HALTED (") || !strings.Contains(stdout, "exit") ||
		!strings.Contains(stdout, "task wordcount: running") {
		t.Errorf("status: exit %d\n%s%s", code, stdout, stderr)
	}
	code, _, stderr = runCLI(t, "pause", "--admin-addr", addr, "--task", "bad")
	if code != exitFailure || !strings.Contains(stderr, "halted") || !strings.Contains(stderr, "deploy or roll back") {
		t.Errorf("pause of a halted task: exit %d\n%s", code, stderr)
	}
	code, stdout, stderr = runCLI(t, "versions", "--admin-addr", addr, "--task", "bad")
	if code != 0 || !strings.Contains(stdout, "version 1 is bad: init:") {
		t.Errorf("versions of a halted task: exit %d\n%s%s", code, stdout, stderr)
	}
	code, stdout, stderr = runCLI(t, "deploy", "--admin-addr", addr, "--task", "bad", good)
	if code != 0 || !strings.Contains(stdout, "version 2 active") || !strings.Contains(stdout, "the halted task restarted") {
		t.Fatalf("deploy to a halted task: exit %d\n%s%s", code, stdout, stderr)
	}
	pw.Close()
	if err := wait(); err != nil {
		t.Errorf("Run = %v, want nil: the halted task was restarted and finished", err)
	}
	if got := strings.Count(string(must(os.ReadFile(badOut))), "\n"); got != 3 {
		t.Errorf("the restarted task wrote %d outputs, want 3", got)
	}
}

// TestAutoRollbackAtStart: the active version, deployed, cannot start any more (its init
// exits): the next start marks it bad, runs the version before it and processes the input;
// versions and rollback work on the stopped host's data directory.
func TestAutoRollbackAtStart(t *testing.T) {
	input, wantOut, _ := wordcountFiles(t)
	dir := t.TempDir()
	copyWordcount(t, dir)
	in := filepath.Join(dir, "in.ndjson")
	if err := os.WriteFile(in, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := filepath.Join(dir, "ws.yaml")
	yaml := `
checkpoint_interval: 50ms
tasks:
  - name: wordcount
    module: wordcount.wasm
    config: {min_len: 2}
    inputs:
      - path: in.ndjson
        key_field: user
        value_field: text
        timestamp_field: ts
    output: {type: file, path: out.ndjson}
`
	if err := os.WriteFile(cfg, []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	if code, _, stderr := runCLI(t, "run", "-c", cfg); code != 0 {
		t.Fatalf("first run: exit %d\n%s", code, stderr)
	}
	// A version deployed while the host ran, that passed its trial then and whose init fails
	// now: put it in the registry as the active version, as a deploy does.
	dataDir := filepath.Join(dir, "data")
	db, err := store.Open(filepath.Join(dataDir, "state"), store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	mv, err := db.AddModule("wordcount", must(os.ReadFile(modrtFixture("initexit.wasm"))), store.ModuleVersion{Origin: host.OriginDeploy}, 0)
	if err == nil {
		err = db.SetActiveModule("wordcount", store.ActiveModule{Version: mv.Version, Origin: host.OriginDeploy})
	}
	if err != nil || mv.Version != 2 {
		t.Fatalf("injecting version %d: %v", mv.Version, err)
	}
	// A running host holds the data directory: offline commands refuse.
	code, _, stderr := runCLI(t, "versions", "--task", "wordcount", "--data-dir", dataDir)
	if code != exitFailure || !strings.Contains(stderr, "a running host holds the data directory") {
		t.Errorf("versions --data-dir while the store is held: exit %d\n%s", code, stderr)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}

	if err := os.WriteFile(in, must(os.ReadFile(input)), 0o644); err != nil {
		t.Fatal(err)
	}
	code, _, stderr = runCLI(t, "run", "-c", cfg)
	if code != 0 {
		t.Fatalf("run with a bad active version: exit %d\n%s", code, stderr)
	}
	if !strings.Contains(stderr, "module rolled back automatically") || !strings.Contains(stderr, "version 2") {
		t.Errorf("the rollback is not logged:\n%s", stderr)
	}
	if got := sortOutputs(t, must(os.ReadFile(filepath.Join(dir, "out.ndjson")))); got != string(wantOut) {
		t.Errorf("outputs after the rollback:\n%s\nwant:\n%s", got, wantOut)
	}

	code, stdout, stderr := runCLI(t, "versions", "--task", "wordcount", "--data-dir", dataDir)
	if code != 0 || !strings.Contains(stdout, "* (auto-rollback)  file    good") ||
		!strings.Contains(stdout, "version 2 is bad: init:") {
		t.Errorf("versions --data-dir: exit %d\n%s%s", code, stdout, stderr)
	}
	code, stdout, stderr = runCLI(t, "rollback", "--task", "wordcount", "--to", "2", "--data-dir", dataDir)
	if code != 0 || !strings.Contains(stdout, "version 2 active (was 1)") || !strings.Contains(stdout, "next start") {
		t.Errorf("rollback --to 2 --data-dir: exit %d\n%s%s", code, stdout, stderr)
	}
	code, stdout, stderr = runCLI(t, "rollback", "--task", "wordcount", "--data-dir", dataDir)
	if code != 0 || !strings.Contains(stdout, "version 1 active (was 2)") {
		t.Errorf("rollback --data-dir: exit %d\n%s%s", code, stdout, stderr)
	}
	code, _, stderr = runCLI(t, "rollback", "--task", "wordcount", "--data-dir", dataDir)
	if code != exitFailure || !strings.Contains(stderr, "no earlier module version") {
		t.Errorf("rollback past the oldest: exit %d\n%s", code, stderr)
	}
	code, _, stderr = runCLI(t, "versions", "--task", "nosuch", "--data-dir", dataDir)
	if code != exitFailure || !strings.Contains(stderr, "no module version") {
		t.Errorf("versions of an unknown task: exit %d\n%s", code, stderr)
	}
}
