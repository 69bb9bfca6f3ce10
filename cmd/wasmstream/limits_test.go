package main

import (
	"bufio"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/wasmstream/wasmstream/internal/guestbuild"
)

// Issue 13 §2–4: one record or guest over the store's limits or a per-call budget is
// dead-lettered with the limit named, the task's other records are processed, the host exits 0,
// and a restart over the same data directory is fine. Before, a key or state name too long for
// the store, or a key's writes over one store transaction, made every checkpoint fail: the host
// exited, again on every restart.
func TestRunDeadLettersRecordsOverStoreLimitsAndBudgets(t *testing.T) {
	module := guestbuild.Go(t, "testguests/hostile")
	dir := t.TempDir()
	longKey := strings.Repeat("k", 65000)
	recs := [][2]string{
		{"a", "count"},
		{longKey, "count"}, // a record key the store cannot hold: refused at ingest
		{"b", "bigname"},   // a 64 KiB state name, the error ignored
		{"c", "manyputs"},  // 65000 state names of one key in one call
		{"d", "bigemits"},  // 3000 × 1 MiB emitted by one call
		{"e", "logstorm"},  // 200000 log lines from one call
		{"f", "count"},
	}
	var in strings.Builder
	for _, r := range recs {
		b, err := json.Marshal(map[string]string{"k": r[0], "v": r[1]})
		if err != nil {
			t.Fatal(err)
		}
		in.Write(b)
		in.WriteByte('\n')
	}
	if err := os.WriteFile(filepath.Join(dir, "in.ndjson"), []byte(in.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := filepath.Join(dir, "ws.yaml")
	yaml := `
checkpoint_interval: 50ms
tasks:
  - name: lim
    module: ` + module + `
    inputs: [{path: in.ndjson, key_field: k, value_field: v}]
    output: {type: file, path: out.ndjson}
    dead_letter: {path: dead.ndjson}
    fuel_per_record: -1
    max_emit_bytes_per_call: 8388608
    max_log_lines_per_second: 10
    log_burst_lines: 100
    retry: {max_attempts: 2, backoff: 1ms, max_backoff: 1ms}
`
	if err := os.WriteFile(cfg, []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}

	code, _, stderr := runCLI(t, "run", "-c", cfg)
	if code != 0 {
		t.Fatalf("run: exit %d\n%s", code, tail(stderr))
	}
	// Every hostile record in the dead letters, with the limit it went over.
	want := map[string]string{
		longKey: "record key too large: 65000 bytes, over the store's limit",
		"b":     "state name of 65536 bytes with a key of 1 bytes: over the store's limit",
		"c":     "more than one store transaction holds",
		"d":     "max_emit_bytes_per_call",
	}
	for _, d := range readJSONLines(t, filepath.Join(dir, "dead.ndjson")) {
		key, _ := d["key"].(string)
		msg, _ := d["error"].(string)
		w, ok := want[key]
		if !ok {
			t.Errorf("unexpected dead letter of key %.20q: %s", key, msg)
			continue
		}
		if !strings.Contains(msg, w) {
			t.Errorf("dead letter of key %.20q: error %q; want it to contain %q", key, msg, w)
		}
		delete(want, key)
	}
	for key := range want {
		t.Errorf("no dead letter for key %.20q", key)
	}
	// The other records processed: a, e and f echoed.
	echoed := map[string]bool{}
	for _, o := range readJSONLines(t, filepath.Join(dir, "out.ndjson")) {
		if o["output"] == "echo" {
			echoed[o["key"].(string)] = true
		}
	}
	for _, k := range []string{"a", "e", "f"} {
		if !echoed[k] {
			t.Errorf("record of key %s not echoed; outputs: %v", k, echoed)
		}
	}
	// The log storm was cut short, and said so.
	if !strings.Contains(stderr, "guest log rate limited") {
		t.Errorf("no rate-limit summary in the log:\n%s", tail(stderr))
	}
	m := regexp.MustCompile(`guest_log_dropped=(\d+)`).FindStringSubmatch(stderr)
	if m == nil {
		t.Fatalf("the task's last figures lack guest_log_dropped:\n%s", tail(stderr))
	}
	if n, _ := strconv.Atoi(m[1]); n < 200000-1000 {
		t.Errorf("guest_log_dropped=%d; want most of the 200000 lines", n)
	}
	if n := strings.Count(stderr, "storm "); n > 1000 {
		t.Errorf("%d guest log lines written; want at most the burst and what the rate allows", n)
	}

	// A restart over the same data is fine and reprocesses nothing.
	code, _, stderr = runCLI(t, "run", "-c", cfg)
	if code != 0 {
		t.Fatalf("restart: exit %d\n%s", code, tail(stderr))
	}
	code, stdout, stderr := runCLI(t, "state", "-c", cfg, "--task", "lim")
	if code != 0 || !strings.Contains(stdout, "a\tn\t1\n") || !strings.Contains(stdout, "f\tn\t1\n") {
		t.Errorf("state: exit %d, stdout:\n%s\nstderr:\n%s", code, stdout, tail(stderr))
	}
}

// readJSONLines reads a file of JSON objects, one a line.
func readJSONLines(t *testing.T, path string) []map[string]any {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []map[string]any
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var m map[string]any
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		out = append(out, m)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// tail returns the end of a long log, for failure messages.
func tail(s string) string {
	const n = 4000
	if len(s) > n {
		return "…" + s[len(s)-n:]
	}
	return s
}

// Issue 13 §3: a key's writes are committed in one store transaction, so calls that each write
// little but together more than one transaction takes between two checkpoints must not make the
// checkpoint fail: the host checkpoints before a key outgrows it. Before, the host exited with
// "Txn is too big to fit into one request", and again on every restart.
func TestRunCheckpointsBeforeAKeyOutgrowsATransaction(t *testing.T) {
	module := guestbuild.Go(t, "testguests/hostile")
	dir := t.TempDir()
	var in strings.Builder
	const records = 8 // × 10000 names: over what one Badger transaction takes
	for i := range records {
		in.WriteString(`{"k":"z","v":"fill` + strconv.Itoa(i) + `"}` + "\n")
	}
	if err := os.WriteFile(filepath.Join(dir, "in.ndjson"), []byte(in.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := filepath.Join(dir, "ws.yaml")
	yaml := `
checkpoint_interval: 1h
tasks:
  - name: fill
    module: ` + module + `
    inputs: [{path: in.ndjson, key_field: k, value_field: v}]
    output: {type: file, path: out.ndjson}
    dead_letter: {path: dead.ndjson}
    fuel_per_record: -1
    max_key_records: 1
    retry: {max_attempts: 1}
`
	if err := os.WriteFile(cfg, []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	for run := range 2 { // the second run restarts over the same data
		code, _, stderr := runCLI(t, "run", "-c", cfg)
		if code != 0 {
			t.Fatalf("run %d: exit %d\n%s", run, code, tail(stderr))
		}
	}
	if dead, err := os.ReadFile(filepath.Join(dir, "dead.ndjson")); err == nil && len(dead) > 0 {
		t.Errorf("dead letters:\n%.2000s", dead)
	}
	code, stdout, stderr := runCLI(t, "state", "-c", cfg, "--task", "fill", "--key", "z")
	if n := strings.Count(stdout, "\n"); code != 0 || n != records*10000 {
		t.Errorf("state --key z: exit %d, %d entries, want %d\n%s", code, n, records*10000, tail(stderr))
	}
}
