package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/wasmstream/wasmstream/host"
)

// TestResetFileInput resets a file task with `wasmstream reset`: to earliest, the next run
// emits every output again and its state is one pass over the file (the outputs equal the
// first run's, not counts going on from them); to latest, the next run emits nothing; a time or
// partition offsets are refused for a file; the old state is kept under the backup name, which
// `state` prints and --drop-backup deletes.
func TestResetFileInput(t *testing.T) {
	input, wantOut, _ := wordcountFiles(t)
	dir := t.TempDir()
	copyWordcount(t, dir)
	cfg := filepath.Join(dir, "ws.yaml")
	writeWordcountConfig(t, cfg, input)
	outPath := filepath.Join(dir, "out.ndjson")
	var lastLog string
	run := func() string {
		t.Helper()
		before, _ := os.ReadFile(outPath)
		code, _, stderr := runCLI(t, "run", "-c", cfg, "--log-level", "info")
		if code != 0 {
			t.Fatalf("run: exit %d\n%s", code, stderr)
		}
		lastLog = stderr
		after, _ := os.ReadFile(outPath)
		return string(after[len(before):])
	}
	if got := sortOutputs(t, []byte(run())); got != string(wantOut) {
		t.Fatalf("first run's outputs:\n%s\nwant:\n%s", got, wantOut)
	}
	if got := run(); got != "" {
		t.Fatalf("a second run without a reset emitted:\n%s", got)
	}

	code, stdout, stderr := runCLI(t, "reset", "-c", cfg, "--task", "wordcount", "--to", "earliest", "--dry-run")
	if code != 0 || !strings.Contains(stdout, "dry run") || !strings.Contains(stdout, "file:input0/0") {
		t.Fatalf("dry run: exit %d\n%s%s", code, stdout, stderr)
	}
	if got := run(); got != "" {
		t.Fatalf("a run after a dry run emitted:\n%s", got)
	}
	code, stdout, stderr = runCLI(t, "reset", "-c", cfg, "--task", "wordcount", "--to", "earliest")
	if code != 0 {
		t.Fatalf("reset: exit %d\n%s%s", code, stdout, stderr)
	}
	backup := regexp.MustCompile(`wordcount\.reset-[0-9TZ]+`).FindString(stdout)
	if backup == "" {
		t.Fatalf("the reset does not name its backup:\n%s", stdout)
	}
	if got := sortOutputs(t, []byte(run())); got != string(wantOut) {
		t.Fatalf("outputs after a reset to earliest:\n%s\nwant (one pass):\n%s", got, wantOut)
	}
	if !strings.Contains(lastLog, "replay caught up with the head at the reset") {
		t.Fatalf("the replay's end is not logged:\n%s", lastLog)
	}

	if code, stdout, stderr = runCLI(t, "reset", "-c", cfg, "--task", "wordcount", "--to", "latest"); code != 0 {
		t.Fatalf("reset to latest: exit %d\n%s%s", code, stdout, stderr)
	}
	if got := run(); got != "" {
		t.Fatalf("a run after a reset to latest emitted:\n%s", got)
	}

	for _, to := range []string{"0:5", "2026-11-27T10:00:00Z"} {
		code, _, stderr = runCLI(t, "reset", "-c", cfg, "--task", "wordcount", "--to", to)
		if code != exitFailure || !strings.Contains(stderr, "resets to earliest (its first line) or latest") {
			t.Errorf("reset of a file to %s: exit %d\n%s", to, code, stderr)
		}
	}
	code, _, stderr = runCLI(t, "reset", "-c", cfg, "--task", "wordcount", "--to", "0:x")
	if code != exitUsage {
		t.Errorf("--to 0:x: exit %d, want %d\n%s", code, exitUsage, stderr)
	}

	code, stdout, stderr = runCLI(t, "state", "-c", cfg, "--task", backup)
	if code != 0 || stdout == "" {
		t.Fatalf("state of the backup: exit %d\n%s%s", code, stdout, stderr)
	}
	if code, stdout, stderr = runCLI(t, "reset", "-c", cfg, "--drop-backup", backup); code != 0 {
		t.Fatalf("drop-backup: exit %d\n%s%s", code, stdout, stderr)
	}
	code, stdout, _ = runCLI(t, "state", "-c", cfg)
	if code != 0 || strings.Contains(stdout, backup) {
		t.Fatalf("tasks after the backup was dropped: exit %d\n%s", code, stdout)
	}
}

func TestParseResetTo(t *testing.T) {
	for in, want := range map[string]string{
		"earliest": "earliest", "latest": "latest", "2026-11-27T10:00:00Z": "2026-11-27T10:00:00Z",
		"0:10,3:7": "0:10,3:7", "words:1:5": "words:1:5",
	} {
		r, err := host.ParseResetTo(in)
		if err != nil || r.String() != want {
			t.Errorf("ParseResetTo(%q) = %v, %v; want %s", in, r, err, want)
		}
	}
	for _, in := range []string{"", "yesterday", "0:-1", "a:b:c:d", "0:1,0:2", "x:1"} {
		if _, err := host.ParseResetTo(in); err == nil {
			t.Errorf("ParseResetTo(%q): no error", in)
		}
	}
}

// A reset through a running host of a group prints the other hosts reset with it (what each
// moved aside, its backup) and the warnings of what is not done yet.
func TestPrintResetGroup(t *testing.T) {
	var b strings.Builder
	printReset(&b, &host.ResetReport{Task: "wc", To: "earliest", DataDir: "data", Backup: "wc.reset-20261128T010000Z",
		Streams: []host.ResetStream{{Stream: "kafka:words/0", From: 10, Committed: 10, Keys: 3}},
		Hosts: []host.HostReset{{Addr: "10.0.0.7:7070", Member: "wasmstream@/10.0.0.7", Backup: "wc.reset-20261128T010001Z", Keys: 5},
			{Addr: "10.0.0.8:7070", Member: "wasmstream@/10.0.0.8", Error: "the host at 10.0.0.8:7070 cannot be reached"}},
		Warnings: []string{"host 10.0.0.8:7070 was not told the reset"}}, true)
	out := b.String()
	for _, want := range []string{
		"the other hosts of the group, reset with it",
		"10.0.0.7:7070  wasmstream@/10.0.0.7  5     0       wc.reset-20261128T010001Z",
		"not told: the host at 10.0.0.8:7070 cannot be reached",
		"warning: host 10.0.0.8:7070 was not told the reset",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}

// A dry run through a host of a group names the other hosts it would ask.
func TestPrintResetGroupDryRun(t *testing.T) {
	var b strings.Builder
	printReset(&b, &host.ResetReport{Task: "wc", To: "earliest", DryRun: true,
		Hosts: []host.HostReset{{Addr: "10.0.0.7:7070", Member: "wasmstream@/10.0.0.7"}}}, true)
	if out := b.String(); !strings.Contains(out, "would reset with it") || !strings.Contains(out, "10.0.0.7:7070  wasmstream@/10.0.0.7") {
		t.Fatalf("dry run output:\n%s", out)
	}
}

// TestResetModuleTask resets a task that `run --module` ran, without a configuration file:
// `reset --module M --input IN --to earliest` (the task named as run names it, after the
// module) moves it back like a task of a file, and the next run emits every output again, one
// pass over the input. Without a configuration file and without --module, the error says what
// to pass; --module without --input and --input without --module are usage errors. Before,
// reset had no --module ("unknown flag: --module"), and its error without a configuration
// suggested --module all the same.
func TestResetModuleTask(t *testing.T) {
	input, wantOut, _ := wordcountFiles(t)
	dir := t.TempDir()
	copyWordcount(t, dir)
	module := filepath.Join(dir, "wordcount.wasm")
	data := filepath.Join(dir, "data")
	outPath := filepath.Join(dir, "out.ndjson")
	run := func() string {
		t.Helper()
		before, _ := os.ReadFile(outPath)
		code, _, stderr := runCLI(t, "run", "--module", module, "--input", input, "--key-field", "user", "--value-field", "text",
			"--timestamp-field", "ts", "--task-config", `{"min_len": 2}`, "--output", outPath, "--data-dir", data, "--log-level", "warn")
		if code != 0 {
			t.Fatalf("run: exit %d\n%s", code, stderr)
		}
		after, _ := os.ReadFile(outPath)
		return string(after[len(before):])
	}
	if got := sortOutputs(t, []byte(run())); got != string(wantOut) {
		t.Fatalf("first run's outputs:\n%s\nwant:\n%s", got, wantOut)
	}
	if got := run(); got != "" {
		t.Fatalf("a second run without a reset emitted:\n%s", got)
	}

	code, _, stderr := runCLI(t, "reset", "--task", "wordcount", "--to", "earliest", "--data-dir", data)
	if code != exitUsage || !strings.Contains(stderr, "pass the same --module and --input flags") {
		t.Errorf("reset without a configuration or --module: exit %d\n%s", code, stderr)
	}
	code, _, stderr = runCLI(t, "reset", "--module", module, "--to", "earliest", "--data-dir", data)
	if code != exitUsage || !strings.Contains(stderr, "--module needs the task's --input flags") {
		t.Errorf("reset --module without --input: exit %d\n%s", code, stderr)
	}
	code, _, stderr = runCLI(t, "reset", "--task", "wordcount", "--input", input, "--to", "earliest", "--data-dir", data)
	if code != exitUsage || !strings.Contains(stderr, "--input needs --module") {
		t.Errorf("reset --input without --module: exit %d\n%s", code, stderr)
	}

	code, stdout, stderr := runCLI(t, "reset", "--module", module, "--input", input, "--to", "earliest", "--data-dir", data)
	if code != 0 || !strings.Contains(stdout, "task wordcount reset to earliest") || !strings.Contains(stdout, "file:input0/0") {
		t.Fatalf("reset --module: exit %d\n%s%s", code, stdout, stderr)
	}
	if got := sortOutputs(t, []byte(run())); got != string(wantOut) {
		t.Fatalf("outputs after the reset to earliest:\n%s\nwant the first run's (one pass):\n%s", got, wantOut)
	}
}
