package e2e

// TinyGo guests through the real binary: the Go examples built with TinyGo produce the example's
// expected outputs and state, and a TinyGo guest's panic, which TinyGo prints to stdout, reaches
// the dead letter. They need TinyGo (guestbuild.TinyGoTool): `make deps` installs it and
// `make test-tinygo` runs them with WASMSTREAM_TINYGO set; without it they are skipped, or fail
// if CI is set.

import (
	"cmp"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/wasmstream/wasmstream/internal/guestbuild"
)

// sortByKey sorts output lines by key, bytewise, keeping the emit order within a key: the
// order of the examples' expected.ndjson.
func sortByKey(t *testing.T, out string, fully bool) string {
	t.Helper()
	lines := strings.SplitAfter(out, "\n")
	if lines[len(lines)-1] == "" {
		lines = lines[:len(lines)-1]
	}
	type line struct {
		Output, Key, Value string
		Ts                 int64
	}
	parse := func(s string) line {
		var o line
		if err := json.Unmarshal([]byte(s), &o); err != nil {
			t.Fatalf("output line %q: %v", s, err)
		}
		return o
	}
	slices.SortStableFunc(lines, func(a, b string) int {
		x, y := parse(a), parse(b)
		if !fully {
			return strings.Compare(x.Key, y.Key)
		}
		// By output, timestamp and value too: the order of a key's outputs may depend on how
		// far the host read ahead (sessions: late events and summaries, ABI.md §4.12).
		return cmp.Or(strings.Compare(x.Key, y.Key), strings.Compare(x.Output, y.Output), cmp.Compare(x.Ts, y.Ts), strings.Compare(x.Value, y.Value))
	})
	return strings.Join(lines, "")
}

func sortedLines(s string) string {
	lines := strings.SplitAfter(s, "\n")
	slices.Sort(lines)
	return strings.Join(lines, "")
}

// TestTinyGoExamples runs wordcount, sessions and dedupe built with TinyGo through the binary,
// each as its README runs it (wordcount with the quick form, the timer examples with their
// config.yaml), and compares the outputs and the final state with the example's expected files.
func TestTinyGoExamples(t *testing.T) {
	guestbuild.TinyGo(t, "wordcount") // skips without TinyGo before building the binary
	bin := guestbuild.Binary(t)
	for _, name := range []string{"wordcount", "sessions", "dedupe"} {
		t.Run(name, func(t *testing.T) {
			module := guestbuild.TinyGo(t, name)
			dir := filepath.Join(guestbuild.Root(), "examples", "wasm", name)
			read := func(f string) string {
				b, err := os.ReadFile(filepath.Join(dir, f))
				if err != nil {
					t.Fatal(err)
				}
				return string(b)
			}
			dataDir := filepath.Join(t.TempDir(), "data")
			var args []string
			var stdin []byte
			if name == "wordcount" {
				stdin = []byte(read("input.ndjson"))
				args = []string{"run", "--module", module, "--input", "-", "--key-field", "user",
					"--value-field", "text", "--timestamp-field", "ts", "--task-config", read("config.json"),
					"--data-dir", dataDir, "--log-level", "warn"}
			} else {
				// The example's own config.yaml, with the module built here, a fresh data
				// directory and the input by absolute path.
				cfg := read("config.yaml")
				for _, r := range [][2]string{
					{"data_dir: ../../../.build/" + name + "-data", "data_dir: " + dataDir},
					{"module: ../../../.build/" + name + ".wasm", "module: " + module},
					{"path: input.ndjson", "path: " + filepath.Join(dir, "input.ndjson")},
				} {
					if !strings.Contains(cfg, r[0]) {
						t.Fatalf("%s/config.yaml lacks %q", name, r[0])
					}
					cfg = strings.Replace(cfg, r[0], r[1], 1)
				}
				path := filepath.Join(t.TempDir(), "config.yaml")
				if err := os.WriteFile(path, []byte(cfg), 0o644); err != nil {
					t.Fatal(err)
				}
				args = []string{"run", "-c", path, "--log-level", "warn"}
			}
			code, stdout, stderr := runBinary(t, bin, stdin, args...)
			if code != 0 {
				t.Fatalf("run: exit %d\n%s", code, stderr)
			}
			if got, want := sortByKey(t, stdout, name == "sessions"), read("expected.ndjson"); got != want {
				t.Errorf("outputs, sorted by key:\n%s\nwant:\n%s", got, want)
			}
			code, stdout, stderr = runBinary(t, bin, nil, "state", "--data-dir", dataDir, "--task", name)
			if want := read("expected-state.txt"); code != 0 || sortedLines(stdout) != want {
				t.Errorf("state: exit %d, stdout:\n%s\nwant:\n%s\nstderr:\n%s", code, stdout, want, stderr)
			}
			if dead, err := os.ReadFile(filepath.Join(dataDir, name+".deadletter.ndjson")); len(dead) > 0 || (err != nil && !os.IsNotExist(err)) {
				t.Errorf("dead letters: %v\n%s", err, dead)
			}
		})
	}
}

// A real TinyGo guest that panics (testguests/trapper on a value containing "boom"): TinyGo
// prints the panic to stdout and traps; the dead letter's error and the log quote it.
func TestTinyGoRealPanicReachesDeadLetter(t *testing.T) {
	module := guestbuild.TinyGo(t, "testguests/trapper")
	bin := guestbuild.Binary(t)
	dir := t.TempDir()
	input := filepath.Join(dir, "in.ndjson")
	if err := os.WriteFile(input, []byte(`{"user":"a","text":"fine"}`+"\n"+`{"user":"b","text":"boom"}`+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	output := filepath.Join(dir, "out.ndjson")
	cfg := writeConfig(t, dir, module, input, output, "    retry: {max_attempts: 1}\n")
	code, _, stderr := runBinary(t, bin, nil, "run", "-c", cfg, "--log-level", "warn")
	if code != 0 {
		t.Fatalf("run: exit %d\n%s", code, stderr)
	}
	const panicMsg = "panic: trapper: boom"
	dead := readJSONLines(t, filepath.Join(dir, "data", "wc.deadletter.ndjson"))
	if len(dead) != 1 || dead[0]["key"] != "b" {
		t.Fatalf("dead letters %v, want the record of key b", dead)
	}
	if msg, _ := dead[0]["error"].(string); !strings.Contains(msg, "trapped") || !strings.Contains(msg, "guest stdout") || !strings.Contains(msg, panicMsg) {
		t.Errorf("dead letter error %q lacks the guest's panic from stdout", msg)
	}
	if !strings.Contains(stderr, panicMsg) {
		t.Errorf("the log lacks the guest's panic:\n%s", stderr)
	}
	if out := readJSONLines(t, output); len(out) != 1 || out[0]["value"] != "fine" {
		t.Errorf("outputs %v, want the record of key a echoed", out)
	}
}

// A module built with TinyGo's default scheduler (asyncify) works but costs about a millisecond
// and millions of fuel units a call: check notes it and run warns, both saying to rebuild with
// -scheduler=none. (A .wat fixture with asyncify's exports, so this runs without TinyGo.)
func TestAsyncifyModuleNoted(t *testing.T) {
	bin := guestbuild.Binary(t)
	dir := t.TempDir()
	module := filepath.Join(guestbuild.Root(), "host", "internal", "modrt", "testdata", "asyncify.wasm")
	input := filepath.Join(dir, "in.ndjson")
	if err := os.WriteFile(input, []byte(`{"user":"a","text":"x"}`+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := writeConfig(t, dir, module, input, filepath.Join(dir, "out.ndjson"), "")
	code, stdout, stderr := runBinary(t, bin, nil, "check", "-c", cfg)
	if code != 0 || !strings.Contains(stdout, "note") || !strings.Contains(stdout, "asyncify") || !strings.Contains(stdout, "-scheduler=none") {
		t.Errorf("check: exit %d, want 0 and a note saying to rebuild with -scheduler=none; stdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	}
	code, _, stderr = runBinary(t, bin, nil, "run", "-c", cfg, "--log-level", "warn")
	if code != 0 || !strings.Contains(stderr, "level=WARN") || !strings.Contains(stderr, "-scheduler=none") || !strings.Contains(stderr, "task=wc") {
		t.Errorf("run: exit %d, want 0 and a warning naming the task and -scheduler=none; stderr:\n%s", code, stderr)
	}
	// The same task with a module without asyncify: no such note.
	plain := guestbuild.Go(t, "wordcount")
	cfg = writeConfig(t, dir, plain, input, filepath.Join(dir, "out2.ndjson"), "")
	if code, stdout, _ := runBinary(t, bin, nil, "check", "-c", cfg); code != 0 || strings.Contains(stdout, "asyncify") {
		t.Errorf("check of a standard Go module: exit %d, stdout:\n%s", code, stdout)
	}
}
