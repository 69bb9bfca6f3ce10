package e2e

// Inputs as the world writes them, not as our producers do, through the real binary: Windows
// line endings and byte order marks, a line of exactly max_line_bytes, a last line without its
// line ending that a writer completes later, and timestamps that are strings, floats, negative,
// beyond int64, or in seconds or microseconds.

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/wasmstream/wasmstream/internal/guestbuild"
	"github.com/wasmstream/wasmstream/internal/hosttest"
)

// worldConfig writes the configuration of task wc (the Go wordcount) reading input with the
// input keys in extra (indented as an input's), and returns its path.
func worldConfig(t *testing.T, dir, module, input, extra string) string {
	t.Helper()
	yaml := `data_dir: ` + filepath.Join(dir, "data") + `
tasks:
  - name: wc
    module: ` + module + `
    inputs:
      - name: in
        path: ` + input + `
        key_field: user
        value_field: text
` + extra + `    output: {type: file, path: ` + filepath.Join(dir, "out.ndjson") + `}
`
	cfg := filepath.Join(dir, "wasmstream.yaml")
	if err := os.WriteFile(cfg, []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	return cfg
}

// appendFile appends s to the file at path, as another process writing to it would.
func appendFile(t *testing.T, path, s string) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteString(s); err != nil {
		t.Fatal(err)
	}
}

// deadLines returns the line numbers of the task's dead letters and their errors, by line.
func deadLines(t *testing.T, dir string) map[int]string {
	t.Helper()
	out := map[int]string{}
	path := filepath.Join(dir, "data", "wc.deadletter.ndjson")
	if _, err := os.Stat(path); os.IsNotExist(err) {
		return out
	}
	for _, d := range readJSONLines(t, path) {
		line, _ := d["line"].(float64)
		msg, _ := d["error"].(string)
		out[int(line)] = msg
	}
	return out
}

// A file saved on Windows ("UTF-8 with BOM", CRLF), with blank lines, a raw NUL byte, a line of
// exactly max_line_bytes and one a byte over it, another such file joined to it, and a last line
// without its line ending that a writer completes later: each line is read once, the byte order
// marks and the "\r" are not data, and the limit counts a line without its "\r\n" (before, the
// line of exactly the limit was a dead letter: "line of 32 bytes is longer than max_line_bytes
// (31)", and the joined file's first line one: "invalid character 'ï'").
func TestWorldLineEdges(t *testing.T) {
	bin := guestbuild.Binary(t)
	module := guestbuild.Go(t, "wordcount")
	dir := t.TempDir()
	input := filepath.Join(dir, "in.ndjson")
	exact := `{"user":"b","text":"exact fit"}`
	lines := "\xef\xbb\xbf" + `{"user":"a","text":"bom"}` + "\r\n" + // line 1
		`{"user":"a","text":"crlf"}` + "\r\n" + // 2
		"\r\n" + " \t\r\n" + // 3, 4: blank
		exact + "\r\n" + // 5: exactly max_line_bytes
		`{"user":"b","text":"exact fitx"}` + "\r\n" + // 6: one byte over
		`{"user":"a","text":"nul` + "\x00" + `"}` + "\r\n" + // 7: a raw NUL in a string
		"\xef\xbb\xbf" + `{"user":"a","text":"joined"}` + "\r\n" + // 8: another file's start, joined with cat
		`{"user":"a","text":"tail"}` // 9: no line ending
	if err := os.WriteFile(input, []byte(lines), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := worldConfig(t, dir, module, input, "        max_line_bytes: "+strconv.Itoa(len(exact))+"\n")
	if code, _, stderr := runBinary(t, bin, nil, "run", "-c", cfg, "--log-level", "warn"); code != 0 {
		t.Fatalf("run: exit %d\n%s", code, stderr)
	}
	want := wordcountExpect{"a": {"bom": 1, "crlf": 1, "joined": 1, "tail": 1}, "b": {"exact": 1, "fit": 1}}
	if diffs := diffState(want, readState(t, filepath.Join(dir, "data"), "wc")); len(diffs) > 0 {
		t.Errorf("state after the first run: %v", diffs)
	}
	dead := deadLines(t, dir)
	if len(dead) != 2 || !strings.Contains(dead[6], "line of 32 bytes is longer than max_line_bytes (31)") || !strings.Contains(dead[7], `invalid character '\x00'`) {
		t.Errorf("dead letters %v, want lines 6 (one byte over the limit) and 7 (the NUL)", dead)
	}

	// The writer ends the last line and appends another: the next run reads only the new one.
	appendFile(t, input, "\r\n"+`{"user":"a","text":"again"}`+"\r\n")
	code, _, stderr := runBinary(t, bin, nil, "run", "-c", cfg, "--log-level", "warn")
	if code != 0 || strings.Contains(stderr, "middle of a line") {
		t.Fatalf("run after the last line was ended: exit %d, want 0 and no warning\n%s", code, stderr)
	}
	want["a"]["again"] = 1
	if diffs := diffState(want, readState(t, filepath.Join(dir, "data"), "wc")); len(diffs) > 0 {
		t.Errorf("state after the file grew: %v", diffs)
	}
	if dead := deadLines(t, dir); len(dead) != 2 {
		t.Errorf("dead letters after the file grew: %v, want the first run's 2", dead)
	}

	// A file of blank lines alone is read to its end: no record, exit 0.
	blank := filepath.Join(dir, "blank.ndjson")
	if err := os.WriteFile(blank, []byte("\r\n\n \t \n\r\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	code, stdout, stderr := runBinary(t, bin, nil, "run", "--module", module, "--input", blank, "--data-dir", filepath.Join(dir, "data-blank"), "--log-level", "warn")
	if code != 0 || stdout != "" || stderr != "" {
		t.Errorf("a file of blank lines: exit %d, stdout %q, stderr %q; want 0 and nothing", code, stdout, stderr)
	}
}

// Timestamps as other programs write them: a string of digits (protobuf's JSON for an int64) is
// read as the number (before, a dead letter); a float and a number beyond int64 are dead letters
// naming the field; a negative one is no timestamp; a duplicated key
// field counts with its last value; a top-level array, a scalar and a nested key field are dead
// letters; seconds (Python's time.time(), Unix's date +%s) and microseconds are read as
// milliseconds, and the first line of each is logged as a warning naming it.
func TestWorldTimestamps(t *testing.T) {
	bin := guestbuild.Binary(t)
	module := guestbuild.Go(t, "wordcount")
	dir := t.TempDir()
	input := filepath.Join(dir, "in.ndjson")
	lines := []string{
		`{"user":"t","text":"ms","ts":1700000000000}`,
		`{"user":"t","text":"string","ts":"1700000000003"}`,
		`{"user":"t","text":"float","ts":1700000000000.5}`,
		`{"user":"t","text":"negative","ts":-5}`,
		`{"user":"t","text":"huge","ts":99999999999999999999}`,
		`{"user":"t","text":"seconds","ts":1700000000}`, // line 6
		`{"user":"t","text":"seconds again","ts":1700000001}`,
		`{"user":"first","user":"dup","text":"dupkey","ts":1700000000001}`,
		`[{"user":"t","text":"array"}]`,
		`42`,
		`{"user":{"id":"n"},"text":"nested","ts":1700000000002}`,
		`{"user":"t","text":"micro","ts":1700000000000000}`, // line 12
		`{"user":"t","text":"nano","ts":1700000000000000000}`,
	}
	if err := os.WriteFile(input, []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := worldConfig(t, dir, module, input, "        timestamp_field: ts\n")
	code, _, stderr := runBinary(t, bin, nil, "run", "-c", cfg, "--log-level", "warn")
	if code != 0 {
		t.Fatalf("run: exit %d\n%s", code, stderr)
	}
	want := wordcountExpect{
		"t":   {"ms": 1, "string": 1, "negative": 1, "seconds": 2, "again": 1, "micro": 1, "nano": 1},
		"dup": {"dupkey": 1},
	}
	if diffs := diffState(want, readState(t, filepath.Join(dir, "data"), "wc")); len(diffs) > 0 {
		t.Errorf("state: %v", diffs)
	}
	stamped := false
	for _, o := range readJSONLines(t, filepath.Join(dir, "out.ndjson")) {
		stamped = stamped || o["value"] == "string 1" && o["ts"] == 1700000000003.0
	}
	if !stamped {
		t.Errorf("no output \"string 1\" stamped 1700000000003, the time its line gave as a string")
	}
	dead := deadLines(t, dir)
	for line, msg := range map[int]string{
		3:  `timestamp field "ts" is not an integer of milliseconds (a JSON number, or a string of one): 1700000000000.5`,
		5:  `timestamp field "ts" is not an integer of milliseconds (a JSON number, or a string of one): 99999999999999999999`,
		9:  "an array, is not read",
		10: "not a JSON object",
		11: `field "user" is an object or array, not a key`,
	} {
		if !strings.Contains(dead[line], msg) {
			t.Errorf("dead letter of line %d: %q, want it to say %q", line, dead[line], msg)
		}
	}
	if len(dead) != 5 {
		t.Errorf("%d dead letters, want 5: %v", len(dead), dead)
	}
	if n := strings.Count(stderr, "a timestamp looks like seconds"); n != 1 || !strings.Contains(stderr, `at="input in line 6" timestamp_field=ts timestamp=1700000000 as_milliseconds=1970-01-20T16:13:20Z`) {
		t.Errorf("%d warnings of a timestamp in seconds, want one naming line 6:\n%s", n, stderr)
	}
	if n := strings.Count(stderr, "a timestamp looks like microseconds or nanoseconds"); n != 1 || !strings.Contains(stderr, `at="input in line 12"`) {
		t.Errorf("%d warnings of a timestamp in microseconds, want one naming line 12:\n%s", n, stderr)
	}
}

// A run fed on stdin and killed (SIGKILL) after a checkpoint, while more lines are in flight:
// the state is exactly the lines up to some line n at or past the checkpoint's (none half
// applied, none twice), and a run with --continue-stdin counts its new lines once after them.
// The lines the killed run read after its last checkpoint are gone: stdin cannot give them
// again (docs/getting-started.md says so).
func TestStdinKilledMidFeed(t *testing.T) {
	bin := guestbuild.Binary(t)
	module := guestbuild.Go(t, "wordcount")
	dir := t.TempDir()
	dataDir := filepath.Join(dir, "data")
	metrics := "127.0.0.1:" + strconv.Itoa(freePort(t))
	args := []string{"run", "--module", module, "--input", "-", "--key-field", "user", "--value-field", "text",
		"--data-dir", dataDir, "--checkpoint-interval", "20ms", "--log-level", "warn"}
	cmd := exec.Command(bin, append(args, "--metrics-addr", metrics)...)
	feed, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	line := func(i int) string { return fmt.Sprintf(`{"user":"u%d","text":"w%d"}`+"\n", i%7, i) }
	var first strings.Builder
	for i := range 1000 {
		first.WriteString(line(i))
	}
	if _, err := io.WriteString(feed, first.String()); err != nil {
		t.Fatal(err)
	}
	const series = `wasmstream_input_committed_position{input="input0",partition="",task="wordcount",topic=""}`
	hosttest.WaitFor(t, time.Minute, "a checkpoint covering the first 1000 lines", func() bool {
		_, body := scrape(t, "http://"+metrics+"/metrics", "")
		v, ok := sample(body, series)
		return ok && v >= 1000
	})
	var second strings.Builder
	for i := 1000; i < 3000; i++ {
		second.WriteString(line(i))
	}
	io.WriteString(feed, second.String())
	cmd.Process.Kill()
	cmd.Wait()
	feed.Close()

	got := readState(t, dataDir, "wordcount")
	n := 0
	for n < 3000 && got[fmt.Sprintf("u%d", n%7)][fmt.Sprintf("w%d", n)] == 1 {
		n++
	}
	want := wordcountExpect{}
	for i := range n {
		want.add(fmt.Sprintf("u%d", i%7), fmt.Sprintf("w%d", i))
	}
	if diffs := diffState(want, got); n < 1000 || len(diffs) > 0 {
		t.Fatalf("state after the kill is lines 0..%d and %d differences (want at least the 1000 committed, nothing else): %v\n%s", n-1, len(diffs), diffs[:min(len(diffs), 10)], stderr.String())
	}
	code, _, errOut := runBinary(t, bin, []byte(`{"user":"z","text":"after the kill"}`), append(args, "--continue-stdin")...) // its last line without "\n"
	if code != 0 {
		t.Fatalf("run with --continue-stdin: exit %d\n%s", code, errOut)
	}
	want.add("z", "after the kill")
	if diffs := diffState(want, readState(t, dataDir, "wordcount")); len(diffs) > 0 {
		t.Errorf("state after --continue-stdin: %v", diffs)
	}
	t.Logf("killed after line %d of 3000 was committed; %d lines read by the killed run were lost", n, 3000-n)
}

// A file input truncated (as logrotate's copytruncate does), deleted or rotated (a new file
// renamed over it) while a run reads it: the run processes every line it had read, and says what
// happened when it reaches the end (before: it ended in silence). The first record's guest call holds on an HTTP
// request the test answers once the file changed; in strict order and with a short read-ahead the
// reader cannot reach the end before.
func TestFileChangedWhileRead(t *testing.T) {
	bin := guestbuild.Binary(t)
	module := guestbuild.Go(t, "testguests/fetch")
	for _, tc := range []struct {
		name, want string // want "": no warning
		more       int    // lines the change appends
		change     func(t *testing.T, input string)
	}{
		// Lines appended before the reader reaches the end are read: the end is where the file
		// ends when the reader gets there (docs/getting-started.md, "Restarts").
		{name: "grown", more: 10, change: func(t *testing.T, input string) {
			var b strings.Builder
			for i := range 10 {
				fmt.Fprintf(&b, "more\t%d\n", i)
			}
			appendFile(t, input, b.String())
		}},
		{name: "truncated", want: "input file was truncated while it was read: it holds 0 bytes", change: func(t *testing.T, input string) {
			if err := os.Truncate(input, 0); err != nil {
				t.Fatal(err)
			}
		}},
		{name: "deleted", want: "input file was removed or renamed while it was read", change: func(t *testing.T, input string) {
			if err := os.Remove(input); err != nil {
				t.Fatal(err)
			}
		}},
		{name: "rotated", want: "input file was replaced by another file while it was read", change: func(t *testing.T, input string) {
			if err := os.Rename(input, input+".1"); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(input, []byte("new\tline\n"), 0o644); err != nil {
				t.Fatal(err)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			first, release := make(chan struct{}), make(chan struct{})
			var once sync.Once
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				once.Do(func() { close(first); <-release })
				io.WriteString(w, "ok")
			}))
			defer srv.Close()
			defer func() {
				select {
				case <-release:
				default:
					close(release)
				}
			}()
			dir := t.TempDir()
			input := filepath.Join(dir, "in.txt")
			const lines = 1500 // six chunks of the reader: more than it reads ahead of the first
			var b strings.Builder
			for i := range lines {
				fmt.Fprintf(&b, "k%d\t%s/%d\n", i%5, srv.URL, i)
			}
			if err := os.WriteFile(input, []byte(b.String()), 0o644); err != nil {
				t.Fatal(err)
			}
			out := filepath.Join(dir, "out.ndjson")
			yaml := `data_dir: ` + filepath.Join(dir, "data") + `
tasks:
  - name: fetch
    module: ` + module + `
    max_in_flight: 1
    max_queued: 16
    grants: {http: {allow: ["` + strings.TrimPrefix(srv.URL, "http://") + `"]}}
    inputs: [{name: in, path: ` + input + `, format: text, key_separator: "\t"}]
    output: {type: file, path: ` + out + `}
`
			cfg := filepath.Join(dir, "wasmstream.yaml")
			if err := os.WriteFile(cfg, []byte(yaml), 0o644); err != nil {
				t.Fatal(err)
			}
			cmd := exec.Command(bin, "run", "-c", cfg, "--log-level", "warn")
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			exited := make(chan error, 1)
			go func() { exited <- cmd.Wait() }()
			select {
			case <-first:
			case err := <-exited:
				t.Fatalf("run exited before its first request: %v\n%s", err, stderr.String())
			}
			tc.change(t, input)
			close(release)
			if err := <-exited; err != nil {
				t.Fatalf("run: %v\n%s", err, stderr.String())
			}
			if tc.want == "" && strings.Contains(stderr.String(), "input file") {
				t.Errorf("a warning of a changed file:\n%s", stderr.String())
			}
			if tc.want != "" && (!strings.Contains(stderr.String(), tc.want) || !strings.Contains(stderr.String(), "bytes_read="+strconv.Itoa(b.Len()))) {
				t.Errorf("the log does not say %q with the %d bytes read:\n%s", tc.want, b.Len(), stderr.String())
			}
			if outs := readJSONLines(t, out); len(outs) != lines+tc.more {
				t.Errorf("%d outputs, want one per line read: %d", len(outs), lines+tc.more)
			}
		})
	}
}
