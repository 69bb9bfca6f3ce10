package e2e

// Input edges through the real binary: keys that are not valid UTF-8, lines over the limit,
// a guest that prints its panic to stdout (TinyGo), and stdin fed twice to one data directory.

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/wasmstream/wasmstream/internal/guestbuild"
)

// runBinary runs the binary with args and stdin and returns its exit status and stderr.
func runBinary(t *testing.T, bin string, stdin []byte, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	cmd := exec.Command(bin, args...)
	var out, errOut bytes.Buffer
	cmd.Stdin, cmd.Stdout, cmd.Stderr = bytes.NewReader(stdin), &out, &errOut
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		code = ee.ExitCode()
	case err != nil:
		t.Fatal(err)
	}
	return code, out.String(), errOut.String()
}

// field returns a JSON line's bytes field name, from name or name+suffix (base64).
func field(t *testing.T, obj map[string]any, name, suffix string) ([]byte, bool) {
	t.Helper()
	if s, ok := obj[name].(string); ok {
		return []byte(s), true
	}
	if s, ok := obj[name+suffix].(string); ok {
		b, err := base64.StdEncoding.DecodeString(s)
		if err != nil {
			t.Fatalf("%s%s: %v", name, suffix, err)
		}
		return b, true
	}
	return nil, false
}

// readJSONLines reads a file of JSON objects, one per line.
func readJSONLines(t *testing.T, path string) []map[string]any {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return parseJSONLines(t, data)
}

func parseJSONLines(t *testing.T, data []byte) []map[string]any {
	t.Helper()
	var out []map[string]any
	for line := range bytes.Lines(data) {
		var obj map[string]any
		if err := json.Unmarshal(line, &obj); err != nil {
			t.Fatalf("line %.80q: %v", line, err)
		}
		out = append(out, obj)
	}
	return out
}

// stateKeys returns the distinct keys of a task's state, as the state command prints them.
func stateKeys(t *testing.T, bin, dataDir, task string) []string {
	t.Helper()
	code, stdout, stderr := runBinary(t, bin, nil, "state", "--data-dir", dataDir, "--task", task, "--format", "json")
	if code != 0 {
		t.Fatalf("state: exit %d\n%s", code, stderr)
	}
	var keys []string
	for _, e := range parseJSONLines(t, []byte(stdout)) {
		k, _ := field(t, e, "key", "_base64")
		if !slices.Contains(keys, string(k)) {
			keys = append(keys, string(k))
		}
	}
	slices.Sort(keys)
	return keys
}

// Keys "bin-\xff", "bin-\xfe" and "bin-\xc3" are three keys in state, not one merged into
// "bin-\ufffd", and a malformed line that is not valid UTF-8 reaches the dead letters exactly.
func TestInvalidUTF8KeysStayDistinct(t *testing.T) {
	bin := guestbuild.Binary(t)
	module := guestbuild.Go(t, "wordcount")
	dir := t.TempDir()
	input := filepath.Join(dir, "in.ndjson")
	bad := "{\"user\":\"bin-\xc3\",\"text\":\"hello\",\"ts\":\"\xff\"}"
	lines := "{\"user\":\"bin-\xff\",\"text\":\"hello\",\"ts\":1}\n" +
		"{\"user\":\"bin-\xfe\",\"text\":\"hello\",\"ts\":2}\n" +
		"{\"user\":\"bin-\xc3\",\"text\":\"hello\",\"ts\":3}\n" + bad + "\n"
	if err := os.WriteFile(input, []byte(lines), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := writeConfig(t, dir, module, input, filepath.Join(dir, "out.ndjson"), "")
	if code, _, stderr := runBinary(t, bin, nil, "run", "-c", cfg, "--log-level", "warn"); code != 0 {
		t.Fatalf("run: exit %d\n%s", code, stderr)
	}
	if got, want := stateKeys(t, bin, filepath.Join(dir, "data"), "wc"), []string{"bin-\xc3", "bin-\xfe", "bin-\xff"}; !slices.Equal(got, want) {
		t.Errorf("state keys %q, want %q", got, want)
	}
	var outKeys []string
	for _, o := range readJSONLines(t, filepath.Join(dir, "out.ndjson")) {
		k, _ := field(t, o, "key", "_b64")
		outKeys = append(outKeys, string(k))
	}
	slices.Sort(outKeys)
	if want := []string{"bin-\xc3", "bin-\xfe", "bin-\xff"}; !slices.Equal(outKeys, want) {
		t.Errorf("output keys %q, want %q", outKeys, want)
	}
	dead := readJSONLines(t, filepath.Join(dir, "data", "wc.deadletter.ndjson"))
	if len(dead) != 1 {
		t.Fatalf("%d dead letters, want 1", len(dead))
	}
	if rec, _ := field(t, dead[0], "record", "_b64"); string(rec) != bad {
		t.Errorf("dead letter record %q, want the line %q", rec, bad)
	}
}

// A line over max_line_bytes goes to the dead letters whole, and the lines after it run.
func TestLongLineDeadLetterIsWhole(t *testing.T) {
	bin := guestbuild.Binary(t)
	module := guestbuild.Go(t, "wordcount")
	dir := t.TempDir()
	input := filepath.Join(dir, "in.ndjson")
	long := `{"user":"big","text":"` + strings.Repeat("z", 5<<20) + `"}`
	if err := os.WriteFile(input, []byte(long+"\n\n"+`{"user":"small","text":"hello"}`+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := filepath.Join(dir, "wasmstream.yaml")
	yaml := `data_dir: ` + filepath.Join(dir, "data") + `
tasks:
  - name: wc
    module: ` + module + `
    inputs:
      - path: ` + input + `
        key_field: user
        value_field: text
        max_line_bytes: 4194304
    output: {type: file, path: ` + filepath.Join(dir, "out.ndjson") + `}
`
	if err := os.WriteFile(cfg, []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	if code, _, stderr := runBinary(t, bin, nil, "run", "-c", cfg, "--log-level", "warn"); code != 0 {
		t.Fatalf("run: exit %d\n%s", code, stderr)
	}
	dead := readJSONLines(t, filepath.Join(dir, "data", "wc.deadletter.ndjson"))
	if len(dead) != 1 {
		t.Fatalf("%d dead letters, want 1", len(dead))
	}
	if rec, _ := field(t, dead[0], "record", "_b64"); string(rec) != long || dead[0]["truncated"] != nil {
		t.Errorf("dead letter record holds %d bytes (truncated %v), want the whole line of %d", len(rec), dead[0]["truncated"], len(long))
	}
	if msg, _ := dead[0]["error"].(string); !strings.Contains(msg, "max_line_bytes (4194304)") || dead[0]["line"] != 1.0 {
		t.Errorf("dead letter error %q line %v; want the limit named, line 1", msg, dead[0]["line"])
	}
	if got := stateKeys(t, bin, filepath.Join(dir, "data"), "wc"); !slices.Equal(got, []string{"small"}) {
		t.Errorf("state keys %q, want the line after the long one", got)
	}
}

// A guest that prints its panic to stdout and traps, as TinyGo does: the dead letter's error
// holds the panic message.
func TestTinyGoPanicReachesDeadLetter(t *testing.T) {
	bin := guestbuild.Binary(t)
	module := filepath.Join(guestbuild.Root(), "host", "internal", "modrt", "testdata", "tinygopanic.wasm")
	dir := t.TempDir()
	input := filepath.Join(dir, "in.ndjson")
	if err := os.WriteFile(input, []byte(`{"user":"a","text":"x"}`+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := writeConfig(t, dir, module, input, filepath.Join(dir, "out.ndjson"), "    retry: {max_attempts: 1}\n")
	code, _, stderr := runBinary(t, bin, nil, "run", "-c", cfg, "--log-level", "warn")
	if code != 1 || !strings.Contains(stderr, "task wc: every record failed: 1 of 1 went to the dead letters") {
		t.Fatalf("run: exit %d, want 1 saying every record failed\n%s", code, stderr) // its only record failed
	}
	const panicMsg = "panic: runtime error: index out of range [3] with length 2"
	dead := readJSONLines(t, filepath.Join(dir, "data", "wc.deadletter.ndjson"))
	if len(dead) != 1 {
		t.Fatalf("%d dead letters, want 1", len(dead))
	}
	if msg, _ := dead[0]["error"].(string); !strings.Contains(msg, "trapped") || !strings.Contains(msg, "guest stdout") || !strings.Contains(msg, panicMsg) {
		t.Errorf("dead letter error %q lacks the guest's panic from stdout", msg)
	}
	if !strings.Contains(stderr, panicMsg) {
		t.Errorf("the log lacks the guest's panic:\n%s", stderr)
	}
}

// Stdin fed a second time to the same data directory is refused (it would count twice) unless
// --continue-stdin says the lines continue the earlier ones.
func TestStdinRerunRefused(t *testing.T) {
	bin := guestbuild.Binary(t)
	module := guestbuild.Go(t, "wordcount")
	dataDir := filepath.Join(t.TempDir(), "data")
	data := []byte(`{"user":"a","text":"hello"}` + "\n" + `{"user":"a","text":"hello"}` + "\n")
	args := []string{"run", "--module", module, "--input", "-", "--key-field", "user", "--value-field", "text", "--data-dir", dataDir, "--log-level", "warn"}
	count := func() string {
		code, stdout, stderr := runBinary(t, bin, nil, "state", "--data-dir", dataDir, "--task", "wordcount", "--key", "a")
		if code != 0 {
			t.Fatalf("state: exit %d\n%s", code, stderr)
		}
		return stdout
	}
	if code, _, stderr := runBinary(t, bin, data, args...); code != 0 {
		t.Fatalf("first run: exit %d\n%s", code, stderr)
	}
	if got := count(); got != "a\thello\t2\n" {
		t.Fatalf("after the first run: %q", got)
	}
	code, _, stderr := runBinary(t, bin, data, args...)
	if code != 2 || !strings.Contains(stderr, "already read stdin up to line 2") || !strings.Contains(stderr, "--continue-stdin") || !strings.Contains(stderr, "--data-dir") {
		t.Errorf("second run: exit %d, want 2 and a message saying what to do:\n%s", code, stderr)
	}
	if got := count(); got != "a\thello\t2\n" {
		t.Errorf("the refused run changed the state: %q", got)
	}
	if code, _, stderr := runBinary(t, bin, data, append(args, "--continue-stdin")...); code != 0 {
		t.Fatalf("run with --continue-stdin: exit %d\n%s", code, stderr)
	}
	if got := count(); got != "a\thello\t4\n" {
		t.Errorf("after --continue-stdin: %q, want the lines counted after the first run's", got)
	}
}
