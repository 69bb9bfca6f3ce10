package e2e

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/wasmstream/wasmstream/internal/guestbuild"
)

// Issue 24 (errors that say what to do): a record the guest fails permanently is dead-lettered
// after one attempt while a plain failure is retried; and a task whose records keep failing
// halts once retry.max_consecutive_failures of them failed in a row (a success between starts
// the count again), naming the last cause, exiting 1, with the record that reached the limit
// left for the next run rather than dead-lettered. Through the real binary, with the Go conform
// guest (conformance/README.md: pfail is a permanent failure, fail a plain one). Every record is
// of one key, so they complete in input order.
func TestConsecutiveFailuresHalt(t *testing.T) {
	bin := guestbuild.Binary(t)
	module := guestbuild.Go(t, "testguests/conform")
	dir := t.TempDir()
	input := filepath.Join(dir, "in.ndjson")
	cmds := []string{
		"put n 1",    // line 1: ok
		"pfail bad1", // 2: permanent: 1 attempt
		"fail flaky", // 3: plain: 3 attempts
		"pfail bad2", // 4
		"put n 2",    // 5: ok, the count starts again
		"pfail bad3", // 6
		"pfail bad4", // 7
		"pfail bad5", // 8
		"pfail bad6", // 9
		"pfail bad7", // 10: the fifth in a row: the task halts here
		"put n 3",    // 11: not reached
	}
	var b strings.Builder
	for i, c := range cmds {
		fmt.Fprintf(&b, `{"user":"a","text":%q,"ts":%d}`+"\n", c, 1000+i)
	}
	if err := os.WriteFile(input, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	retry := func(streak int) string {
		return fmt.Sprintf("    retry: {max_attempts: 3, backoff: 1ms, max_backoff: 2ms, max_consecutive_failures: %d}\n", streak)
	}
	cfg := writeConfig(t, dir, module, input, filepath.Join(dir, "out.ndjson"), retry(5))
	code, _, stderr := runBinary(t, bin, nil, "run", "-c", cfg, "--log-level", "warn")
	const halted = `halting: the last 5 records failed one after another (retry.max_consecutive_failures: 5); the last, input words line 10 key "a" failed permanently (not retried)`
	if code != 1 || !strings.Contains(stderr, halted) || !strings.Contains(stderr, `wasmstream: record words/0@9: bad7`) {
		t.Fatalf("run: exit %d, want 1 with\n%s\nand the guest's message; stderr:\n%s", code, halted, stderr)
	}
	deadPath := filepath.Join(dir, "data", "wc.deadletter.ndjson")
	dead := readJSONLines(t, deadPath)
	var got []string
	for _, d := range dead {
		got = append(got, fmt.Sprintf("line %v: %v attempts", d["line"], d["attempts"]))
	}
	want := []string{"line 2: 1 attempts", "line 3: 3 attempts", "line 4: 1 attempts", "line 6: 1 attempts",
		"line 7: 1 attempts", "line 8: 1 attempts", "line 9: 1 attempts"}
	if strings.Join(got, "; ") != strings.Join(want, "; ") {
		t.Errorf("dead letters\n got %s\nwant %s", strings.Join(got, "; "), strings.Join(want, "; "))
	}
	if st := readState(t, filepath.Join(dir, "data"), "wc"); st["a"]["n"] != 2 {
		t.Errorf("state %v, want n = 2: nothing after the halt", st)
	}

	// Run again with the bound off: the record the halt left is processed (dead-lettered now),
	// and the rest of the input after it; nothing was lost.
	cfg = writeConfig(t, dir, module, input, filepath.Join(dir, "out.ndjson"), retry(-1))
	if code, _, stderr := runBinary(t, bin, nil, "run", "-c", cfg, "--log-level", "warn"); code != 0 {
		t.Fatalf("second run: exit %d\n%s", code, stderr)
	}
	dead = readJSONLines(t, deadPath)
	if len(dead) != len(want)+1 || dead[len(dead)-1]["line"] != 10.0 {
		t.Errorf("after the second run %d dead letters, the last %v; want line 10 added", len(dead), dead[len(dead)-1])
	}
	if st := readState(t, filepath.Join(dir, "data"), "wc"); st["a"]["n"] != 3 {
		t.Errorf("state %v after the second run, want n = 3", st)
	}
}

// Issue 22 item 5: a guest recursing without end is stopped by max_call_depth with an error that
// names the limit and its key, in the log and in every dead letter, instead of growing the
// runtime's stack to its ceiling (about 128 MiB per worker). Through the binary, 4 workers, 8
// records of distinct keys. The process's peak RSS is logged (no threshold: the figures are in
// docs/security.md).
func TestDeepRecursionBounded(t *testing.T) {
	bin := guestbuild.Binary(t)
	module := filepath.Join(guestbuild.Root(), "host", "internal", "modrt", "testdata", "deeprecurse.wasm")
	dir := t.TempDir()
	input := filepath.Join(dir, "in.ndjson")
	var b strings.Builder
	for i := range 8 {
		fmt.Fprintf(&b, `{"user":"u%d","text":"x","ts":%d}`+"\n", i, 1000+i)
	}
	if err := os.WriteFile(input, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := writeConfig(t, dir, module, input, filepath.Join(dir, "out.ndjson"),
		"    max_batch_records: 1\n    retry: {max_attempts: 1}\n")
	cfg = strings.Replace(mustRead(t, cfg), "workers: 2", "workers: 4", 1)
	cfgPath := filepath.Join(dir, "deep.yaml")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "run", "-c", cfgPath, "--log-level", "warn")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	err := cmd.Run()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 1 {
		t.Fatalf("run: %v, want exit 1 (every record failed)\n%s", err, stderr.String())
	}
	ru := cmd.ProcessState.SysUsage().(*syscall.Rusage)
	t.Logf("peak RSS %d MiB", ru.Maxrss/1024)
	const want = "wasmstream_process stopped: call depth exceeded (limit 20000, config key max_call_depth"
	dead := readJSONLines(t, filepath.Join(dir, "data", "wc.deadletter.ndjson"))
	if len(dead) != 8 {
		t.Fatalf("%d dead letters, want 8\n%s", len(dead), stderr.String())
	}
	for _, d := range dead {
		if msg, _ := d["error"].(string); !strings.Contains(msg, want) {
			t.Fatalf("dead letter error %q; want %q", msg, want)
		}
	}
}

func mustRead(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// Sandbox review (one key failing for good): a task that fails permanently on every record of one
// key among many, at least once, through the binary with the conform guest. Every other key goes
// on and its state is exact; each of the failing key's records reaches the dead letters once,
// after one attempt, with its reason; and a restart with more input processes only the new
// records: the dead-lettered ones are not processed again (no second dead letter, no output).
func TestPermanentFailureOneKeyAmongMany(t *testing.T) {
	reasonRE := regexp.MustCompile(`reason-[0-9]+`)
	bin := guestbuild.Binary(t)
	module := guestbuild.Go(t, "testguests/conform")
	dir := t.TempDir()
	input := filepath.Join(dir, "in.ndjson")
	output := filepath.Join(dir, "out.ndjson")
	const keys, perKey = 8, 25
	// lines writes records line0 .. line0+n-1: key "bad" every ninth record, else key u<i%keys>.
	var good, bad int
	lines := func(line0, n int) string {
		var b strings.Builder
		for i := line0; i < line0+n; i++ {
			if i%9 == 4 {
				bad++
				fmt.Fprintf(&b, `{"user":"bad","text":"pfail reason-%d","ts":%d}`+"\n", i, 1000+i)
				continue
			}
			good++
			fmt.Fprintf(&b, `{"user":"u%d","text":"put r%d %d","ts":%d}`+"\n", i%keys, i, i, 1000+i)
		}
		return b.String()
	}
	first := lines(0, keys*perKey)
	if err := os.WriteFile(input, []byte(first), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := writeConfig(t, dir, module, input, output,
		"    retry: {max_attempts: 3, backoff: 1ms, max_backoff: 2ms, max_consecutive_failures: -1}\n")
	check := func(run string, lastLine int) {
		t.Helper()
		// Dead letters: one per bad record, in input order (one key), one attempt, its reason.
		dead := readJSONLines(t, filepath.Join(dir, "data", "wc.deadletter.ndjson"))
		var wantDead []string
		for i := 0; i < lastLine; i++ {
			if i%9 == 4 {
				wantDead = append(wantDead, fmt.Sprintf("line %d key bad: 1 attempts, reason-%d", i+1, i))
			}
		}
		var gotDead []string
		for _, d := range dead {
			msg, _ := d["error"].(string)
			reason := reasonRE.FindString(msg)
			if reason == "" {
				reason = "(no reason in " + msg + ")"
			}
			gotDead = append(gotDead, fmt.Sprintf("line %v key %v: %v attempts, %s", d["line"], d["key"], d["attempts"], reason))
		}
		if strings.Join(gotDead, "\n") != strings.Join(wantDead, "\n") {
			t.Errorf("%s: dead letters\n got %s\nwant %s", run, strings.Join(gotDead, "\n     "), strings.Join(wantDead, "\n     "))
		}
		// Outputs: one "ok" per good record, none for a bad one (at least once, a clean run
		// and a clean restart: nothing is processed twice).
		if out := readJSONLines(t, output); len(out) != good {
			t.Errorf("%s: %d outputs, want %d (one per good record)", run, len(out), good)
		}
		st := readState(t, filepath.Join(dir, "data"), "wc")
		if len(st["bad"]) != 0 {
			t.Errorf("%s: the failing key has state %v", run, st["bad"])
		}
		names := 0
		for k, m := range st {
			for name, v := range m {
				i, err := strconv.Atoi(strings.TrimPrefix(name, "r"))
				if err != nil || v != i || k != fmt.Sprintf("u%d", i%keys) {
					t.Errorf("%s: state %s/%s = %d, not written by record %s", run, k, name, v, name)
				}
				names++
			}
		}
		if names != good {
			t.Errorf("%s: %d state names, want %d (one per good record)", run, names, good)
		}
	}
	if code, _, stderr := runBinary(t, bin, nil, "run", "-c", cfg, "--log-level", "warn"); code != 0 {
		t.Fatalf("run: exit %d, want 0 (the dead-lettered records are handled)\n%s", code, stderr)
	}
	check("first run", keys*perKey)

	// Restart with 50 more records appended: only they are processed.
	f, err := os.OpenFile(input, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString(lines(keys*perKey, 50)); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if code, _, stderr := runBinary(t, bin, nil, "run", "-c", cfg, "--log-level", "warn"); code != 0 {
		t.Fatalf("second run: exit %d\n%s", code, stderr)
	}
	check("after the restart", keys*perKey+50)
}
