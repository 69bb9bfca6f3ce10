package host_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/wasmstream/wasmstream/host"
	"github.com/wasmstream/wasmstream/internal/guestbuild"
	"github.com/wasmstream/wasmstream/internal/hosttest"
)

// A file input resumes after its last committed line, at a byte position. The position is only
// right for the file it was taken in: a file replaced by another one as long or longer (an
// export written again, a rotated log, an edit of its first lines) must be refused with a clear
// error, not read from the middle with its first lines skipped silently. One grown by appending
// resumes; one truncated below the position is refused.
func TestFileInputReplacedBetweenRuns(t *testing.T) {
	module := guestbuild.Go(t, "testguests/order")
	dir := t.TempDir()
	input := filepath.Join(dir, "in.txt")
	out := filepath.Join(dir, "out.ndjson")
	tc := host.TaskConfig{
		Name: "files", Module: module,
		Inputs: []host.InputConfig{{Name: "in", Path: input, Format: "text", KeySeparator: "\t"}},
		Output: host.OutputConfig{Type: "file", Path: out},
	}
	cfg := host.Config{DataDir: filepath.Join(dir, "data"), CacheDir: hosttest.CompileCache(t), Logger: testLogger(t), Tasks: []host.TaskConfig{tc}}
	// lines returns the records from..to-1 of keys k0..k4 ("k<i%5>\t<seq> 0"), padded so that
	// the first run's file is over the 4 KiB a fingerprint covers.
	lines := func(prefix string, from, to int) string {
		var b strings.Builder
		for i := from; i < to; i++ {
			fmt.Fprintf(&b, "%sk%d\t%d 0 %s\n", prefix, i%5, i/5+1, strings.Repeat("x", 40))
		}
		return b.String()
	}
	write := func(text string) {
		t.Helper()
		if err := os.WriteFile(input, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	run := func() error {
		t.Helper()
		h, err := host.New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		return h.Run(context.Background())
	}
	first := lines("", 0, 100) // 5.2 KB
	write(first)
	if err := run(); err != nil {
		t.Fatal(err)
	}
	write(first + lines("", 100, 120)) // grown: the 20 new lines only
	if err := run(); err != nil {
		t.Fatalf("after appending: %v", err)
	}
	checkOrder(t, readOutputs(t, out), map[string]int{"k0": 24, "k1": 24, "k2": 24, "k3": 24, "k4": 24})

	// Replaced by another file, longer than what was read: its first lines differ.
	write(lines("new-", 0, 200))
	err := run()
	if err == nil || !strings.Contains(err.Error(), "is not the file the last checkpoint read") || !strings.Contains(err.Error(), "--to earliest") {
		t.Fatalf("a replaced file: Run = %v; want it refused, naming the reset", err)
	}
	if outs := readOutputs(t, out); len(outs) != 120 {
		t.Fatalf("%d outputs after the replaced file, want the 120 of the first two runs", len(outs))
	}
	// An edit of one byte of the first line, the length kept, is a replaced file too.
	edited := []byte(first + lines("", 100, 120))
	edited[0] = 'K'
	write(string(edited))
	if err := run(); err == nil || !strings.Contains(err.Error(), "replaced or rewritten") {
		t.Fatalf("a file edited in its first line: Run = %v; want it refused", err)
	}
	// The same first 4 KiB, the lines after them rewritten longer: the position falls inside a
	// line.
	write(first + lines("zz", 100, 130))
	if err := run(); err == nil || !strings.Contains(err.Error(), "a line ending moved") {
		t.Fatalf("a file rewritten after its first 4 KiB: Run = %v; want it refused", err)
	}
	// Truncated below the position.
	write(first)
	if err := run(); err == nil || !strings.Contains(err.Error(), "replaced or truncated") {
		t.Fatalf("a truncated file: Run = %v; want it refused", err)
	}
	// Back to what was read, grown: it resumes after the 120 lines.
	write(first + lines("", 100, 125))
	if err := run(); err != nil {
		t.Fatalf("the same file grown again: %v", err)
	}
	checkOrder(t, readOutputs(t, out), map[string]int{"k0": 25, "k1": 25, "k2": 25, "k3": 25, "k4": 25})
}

// A short file (the fingerprint covers fewer bytes than the usual 4 KiB) replaced by a longer
// one is refused too. A last line without a line ending that a writer then extends was read
// part way: the run after reads on and warns.
func TestFileInputShortReplaced(t *testing.T) {
	module := guestbuild.Go(t, "testguests/order")
	dir := t.TempDir()
	input := filepath.Join(dir, "in.txt")
	out := filepath.Join(dir, "out.ndjson")
	tc := host.TaskConfig{
		Name: "short", Module: module,
		Inputs: []host.InputConfig{{Name: "in", Path: input, Format: "text", KeySeparator: "\t"}},
		Output: host.OutputConfig{Type: "file", Path: out},
		// The rest of the extended line, " 0", is no "<seq> <spin>": it fails, once.
		Retry: host.RetryConfig{MaxAttempts: 1, Backoff: time.Millisecond},
	}
	var logs syncBuffer
	cfg := host.Config{DataDir: filepath.Join(dir, "data"), CacheDir: hosttest.CompileCache(t), Logger: slog.New(slog.NewTextHandler(&logs, nil)), Tasks: []host.TaskConfig{tc}}
	if err := os.WriteFile(input, []byte("a\t1 0\nb\t1 0\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	hosttest.RunToEnd(t, cfg)
	// As many bytes per line, other keys: only the fingerprint tells them apart.
	if err := os.WriteFile(input, []byte("c\t1 0\nd\t1 0\ne\t1 0\nf\t1 0\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	h, err := host.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Run(context.Background()); err == nil || !strings.Contains(err.Error(), "is not the file the last checkpoint read 12 bytes of") {
		t.Fatalf("a replaced short file: Run = %v; want it refused", err)
	}
	checkOrder(t, readOutputs(t, out), map[string]int{"a": 1, "b": 1})

	// A last line without its line ending, then extended.
	if err := os.WriteFile(input, []byte("a\t1 0\nb\t1 0\na\t2"), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg.DataDir = filepath.Join(dir, "data2")
	os.Remove(out)
	hosttest.RunToEnd(t, cfg)
	if strings.Contains(logs.String(), "middle of a line") {
		t.Fatalf("a warning before the file grew: %s", logs.String())
	}
	f, err := os.OpenFile(input, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteString(" 0\nb\t2 0\n")
	f.Close()
	hosttest.RunToEnd(t, cfg)
	if !strings.Contains(logs.String(), "input resumes in the middle of a line") {
		t.Fatalf("no warning of the line read part way; logs:\n%s", logs.String())
	}
}

// An output or dead-letter file that cannot be opened (its directory missing) halts the task with
// an error naming which of the two it is: before, only "open <path>: no such file or directory".
func TestSinkFileErrorsNameTheSink(t *testing.T) {
	module := guestbuild.Go(t, "testguests/order")
	dir := t.TempDir()
	input := filepath.Join(dir, "in.txt")
	if err := os.WriteFile(input, []byte("a\t1 0\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ out, dead, want string }{
		{filepath.Join(dir, "missing", "out.ndjson"), "", "output: open "},
		{filepath.Join(dir, "out.ndjson"), filepath.Join(dir, "missing", "dead.ndjson"), "dead letters: open "},
	} {
		tc := host.TaskConfig{
			Name: "sinks", Module: module,
			Inputs:     []host.InputConfig{{Name: "in", Path: input, Format: "text", KeySeparator: "\t"}},
			Output:     host.OutputConfig{Type: "file", Path: c.out},
			DeadLetter: host.DeadLetterConfig{Path: c.dead},
		}
		h, err := host.New(host.Config{DataDir: filepath.Join(dir, "data"), CacheDir: hosttest.CompileCache(t), Logger: testLogger(t), Tasks: []host.TaskConfig{tc}})
		if err != nil {
			t.Fatal(err)
		}
		if err := h.Run(context.Background()); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Run with output %s, dead letters %s: %v; want %q", c.out, c.dead, err, c.want)
		}
	}
}

// A sink on a file input's file makes the task read what it writes: Validate refuses it, naming
// the other key. Before, it was accepted. Two sinks may share a file (each flush is appended
// whole; before, each writer wrote at its own offset and two tasks' 20,000 outputs each to one
// output file left 20,000 lines: sink's TestTwoWritersOfOneFileKeepEveryLine).
func TestValidateSharedFiles(t *testing.T) {
	dir := t.TempDir()
	p := func(name string) string { return filepath.Join(dir, name) }
	task := func(name, in, out, dead string) host.TaskConfig {
		return host.TaskConfig{Name: name, Module: "m.wasm",
			Inputs:     []host.InputConfig{{Name: "in", Path: in}},
			Output:     host.OutputConfig{Type: "file", Path: out},
			DeadLetter: host.DeadLetterConfig{Path: dead}}
	}
	for _, c := range []struct {
		name  string
		tasks []host.TaskConfig
		want  string // "" = valid
	}{
		{"apart", []host.TaskConfig{task("a", p("in"), p("a.out"), ""), task("b", p("in"), p("b.out"), "")}, ""},
		{"one output", []host.TaskConfig{task("a", p("in"), p("out"), ""), task("b", p("in"), filepath.Join(dir, ".", "out"), "")}, ""},
		{"output is dead letters", []host.TaskConfig{task("a", p("in"), p("out"), p("out"))}, ""},
		{"reads another's output", []host.TaskConfig{task("a", p("in"), p("out"), ""), task("b", filepath.Join(dir, ".", "out"), p("b.out"), "")},
			"tasks[0].output.path: " + p("out") + " is also the file of tasks[1].inputs[0].path"},
		{"reads its output", []host.TaskConfig{task("a", p("in"), p("in"), "")},
			"tasks[0].output.path: " + p("in") + " is also the file of tasks[0].inputs[0].path"},
		{"reads another's dead letters", []host.TaskConfig{task("a", p("in"), p("a.out"), p("dead")), task("b", p("dead"), p("b.out"), "")},
			"tasks[0].dead_letter.path: " + p("dead") + " is also the file of tasks[1].inputs[0].path"},
	} {
		err := host.Config{DataDir: p("data"), Tasks: c.tasks}.Validate()
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%s: Validate() = %v; want nil", c.name, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%s: Validate() = %v; want %q", c.name, err, c.want)
		}
	}
}

// A JSON input whose key_field no line has (a nested "user.id", a misspelt name) gives every
// record the empty key: the first such line is logged, once, with the hint about nested fields.
// Before, nothing said so.
func TestMissingKeyFieldLoggedOnce(t *testing.T) {
	module := guestbuild.Go(t, "testguests/order")
	dir := t.TempDir()
	input := filepath.Join(dir, "in.ndjson")
	if err := os.WriteFile(input, []byte(`{"k":"a","v":"1 0"}`+"\n"+`{"user":{"id":"a"},"v":"1 0"}`+"\n"+`{"v":"2 0"}`+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	var logs syncBuffer
	for _, kf := range []string{"k", "user.id"} {
		tc := host.TaskConfig{Name: "nokey", Module: module,
			Inputs: []host.InputConfig{{Name: "in", Path: input, KeyField: kf, ValueField: "v"}},
			Output: host.OutputConfig{Type: "file", Path: filepath.Join(dir, kf+".ndjson")}}
		hosttest.RunToEnd(t, host.Config{DataDir: filepath.Join(dir, "data-"+kf), CacheDir: hosttest.CompileCache(t),
			Logger: slog.New(slog.NewTextHandler(&logs, nil)), Tasks: []host.TaskConfig{tc}})
	}
	got := logs.String()
	if n := strings.Count(got, "a line has no key field"); n != 2 {
		t.Fatalf("%d warnings of a missing key field, want one per run:\n%s", n, got)
	}
	if !strings.Contains(got, `at="input in line 2" key_field=k`) || !strings.Contains(got, `at="input in line 1" key_field=user.id`) ||
		!strings.Contains(got, `\"user.id\" names a top-level field of that name`) {
		t.Errorf("the warnings do not name the first line without the field, or the nested-field hint:\n%s", got)
	}
}

// A file input that is a directory halts its task saying so (before: "is not a regular file (a
// pipe or a device) ... feed a stream on stdin instead"). The CLI refuses it before (exit 2).
func TestFileInputDirectoryRefused(t *testing.T) {
	module := guestbuild.Go(t, "testguests/order")
	dir := t.TempDir()
	h, err := host.New(host.Config{DataDir: filepath.Join(dir, "data"), CacheDir: hosttest.CompileCache(t), Logger: testLogger(t),
		Tasks: []host.TaskConfig{{Name: "dir", Module: module,
			Inputs: []host.InputConfig{{Name: "in", Path: dir, Format: "text"}},
			Output: host.OutputConfig{Type: "file", Path: filepath.Join(dir, "out.ndjson")}}}})
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Run(context.Background()); err == nil || !strings.Contains(err.Error(), "input in: "+dir+" is a directory, not a file") {
		t.Fatalf("Run with a directory as a file input: %v; want it refused, saying it is a directory", err)
	}
}
