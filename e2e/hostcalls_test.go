package e2e

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/wasmstream/wasmstream/internal/guestbuild"
)

// Host calls that do much for a few instructions are paid for (testdata/hostcalls.wat): a task
// looping on random_get of 16 MiB, on poll_oneoff of 500,000 subscriptions, on a real-clock
// sleep of an hour or on now_ms spends its budget like a plain loop, and every record goes to
// the dead letters once, naming the budget, beside a healthy task that gets all its outputs.
// Before, a call cost one fuel unit whatever it did: the random_get and poll_oneoff loops ran
// for hours (the binary ignored SIGTERM for 600 s, the call never reaching the end of a time
// slice), the sleep slept an hour per call, and the now_ms loop took 9.7 s a record.
func TestBinaryHostCallLoopsBounded(t *testing.T) {
	bin := guestbuild.Binary(t)
	healthy := guestbuild.Go(t, "wordcount")
	hostile, err := filepath.Abs(filepath.Join("testdata", "hostcalls.wasm"))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	words := filepath.Join(dir, "words.ndjson")
	var b strings.Builder
	for i := range 2000 {
		fmt.Fprintf(&b, `{"user":"u%d","text":"the quick brown fox %d"}`+"\n", i%50, i%7)
	}
	if err := os.WriteFile(words, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	modes := map[string]string{"rand": "r", "poll": "p", "sleep": "s", "now": "n"}
	cfg := fmt.Sprintf(`data_dir: %s
tasks:
  - name: wc
    module: %s
    inputs: [{path: %s, key_field: user, value_field: text}]
    output: {type: file, path: %s}
`, filepath.Join(dir, "data"), healthy, words, filepath.Join(dir, "wc.ndjson"))
	for _, name := range slices.Sorted(maps.Keys(modes)) {
		in := filepath.Join(dir, name+".ndjson")
		if err := os.WriteFile(in, []byte(fmt.Sprintf("{\"k\":\"a\",\"v\":%q}\n{\"k\":\"b\",\"v\":%q}\n", modes[name], modes[name])), 0o644); err != nil {
			t.Fatal(err)
		}
		cfg += fmt.Sprintf(`  - name: %s
    module: %s
    workers: 1
    retry: {max_attempts: 1}
    grants: {real_clock: true}
    inputs: [{path: %s, key_field: k, value_field: v}]
    output: {type: file, path: %s}
`, name, hostile, in, filepath.Join(dir, name+".out"))
	}
	path := filepath.Join(dir, "wasmstream.yaml")
	if err := os.WriteFile(path, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "run", "-c", path, "--log-level", "warn")
	stderr := &lockedBuffer{}
	cmd.Stderr = stderr
	start := time.Now()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	select {
	case err = <-exited:
	case <-time.After(120 * time.Second):
		cmd.Process.Kill()
		<-exited
		t.Fatalf("the binary did not finish its input in 120 s (a hostile call never ended); stderr:\n%s", stderr.String())
	}
	t.Logf("finished in %v", time.Since(start).Round(time.Millisecond))
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 1 {
		t.Errorf("exit %v; want 1 (every record of the hostile tasks failed); stderr:\n%s", err, stderr.String())
	}
	for name := range modes {
		data, err := os.ReadFile(filepath.Join(dir, "data", name+".deadletter.ndjson"))
		if err != nil {
			t.Errorf("task %s: %v", name, err)
			continue
		}
		var lines []int
		for l := range strings.Lines(string(data)) {
			var dl struct {
				Line  int
				Error string
			}
			if err := json.Unmarshal([]byte(l), &dl); err != nil {
				t.Fatalf("task %s: dead letter %q: %v", name, l, err)
			}
			if !strings.Contains(dl.Error, "exceeded its CPU budget") {
				t.Errorf("task %s: dead letter of line %d: %s; want the CPU budget named", name, dl.Line, dl.Error)
			}
			lines = append(lines, dl.Line)
		}
		if slices.Sort(lines); !slices.Equal(lines, []int{1, 2}) {
			t.Errorf("task %s: dead letters of lines %v; want 1 and 2, once each", name, lines)
		}
	}
	out, _ := os.ReadFile(filepath.Join(dir, "wc.ndjson"))
	if n := strings.Count(string(out), "\n"); n == 0 {
		t.Errorf("the healthy task wrote no output beside the hostile ones")
	}
	if dl, err := os.ReadFile(filepath.Join(dir, "data", "wc.deadletter.ndjson")); err == nil && len(dl) > 0 {
		t.Errorf("the healthy task dead-lettered records:\n%s", dl)
	}
}
