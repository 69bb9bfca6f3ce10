package e2e

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/wasmstream/wasmstream/internal/guestbuild"
)

// TestAdminResetThroughBinary runs `wasmstream reset --admin-addr` against a running
// `wasmstream run` of two tasks: a counter over a file, read to its end, and a counter over
// stdin. The read-only token is refused (403), a dry run prints what would move and moves
// nothing, and the reset to earliest replays the file in the same process: its outputs come
// again from count 1 and its state is that of one pass (read once the binary exited), while
// the stdin task keeps running and counting.
func TestAdminResetThroughBinary(t *testing.T) {
	bin := guestbuild.Binary(t)
	module := guestbuild.Go(t, "testguests/counter")
	dir := t.TempDir()
	const records, keys = 40, 4
	var in strings.Builder
	for i := range records {
		fmt.Fprintf(&in, `{"user":"k%d","text":"x"}`+"\n", i%keys)
	}
	input := filepath.Join(dir, "in.ndjson")
	if err := os.WriteFile(input, []byte(in.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	addr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	run := startLive(t, bin, dir, fmt.Sprintf(`data_dir: %s
checkpoint_interval: 50ms
admin:
  addr: %s
  token: full
  read_token: reader
tasks:
  - name: files
    module: %s
    inputs:
      - path: %s
        key_field: user
        value_field: text
    output: {type: file, path: %s}
  - name: other
    module: %s
    inputs:
      - type: stdin
        key_field: k
        value_field: v
    output: {type: file, path: %s}
`, filepath.Join(dir, "data"), addr, module, input, filepath.Join(dir, "files.ndjson"), module, filepath.Join(dir, "other.ndjson")))
	lines := func(name string) []string {
		b, _ := os.ReadFile(filepath.Join(dir, name))
		if s := strings.TrimSpace(string(b)); s != "" {
			return strings.Split(s, "\n")
		}
		return nil
	}
	feed := func() {
		if _, err := io.WriteString(run.stdin, `{"k":"a","v":"1"}`+"\n"); err != nil {
			t.Fatal(err)
		}
	}
	feed()
	run.await("the first pass", func() bool { return len(lines("files.ndjson")) == records && len(lines("other.ndjson")) == 1 })
	reset := func(token string, args ...string) (int, string, string) {
		return runBinary(t, bin, nil, append([]string{"reset", "--admin-addr", addr, "--admin-token", token, "--task", "files", "--to", "earliest"}, args...)...)
	}

	if code, out, errOut := reset("reader"); code != 1 || !strings.Contains(errOut, "403") {
		t.Errorf("reset with the read-only token: exit %d\n%s%s", code, out, errOut)
	}
	code, out, errOut := reset("full", "--dry-run")
	if code != 0 || !strings.Contains(out, "dry run") || !regexp.MustCompile(`file:in\S*/0\s+40\s+-\s+0\s+4\s`).MatchString(out) {
		t.Fatalf("dry run: exit %d\n%s%s", code, out, errOut)
	}
	code, out, errOut = reset("full")
	if code != 0 || !strings.Contains(out, "the task runs again") {
		t.Fatalf("reset: exit %d\n%s%s", code, out, errOut)
	}
	backup := regexp.MustCompile(`files\.reset-[0-9TZ]+`).FindString(out)
	if backup == "" {
		t.Fatalf("the reset does not name its backup:\n%s", out)
	}
	feed()
	run.await("the replay", func() bool { return len(lines("files.ndjson")) >= 2*records && len(lines("other.ndjson")) == 2 })
	all := lines("files.ndjson")
	if len(all) != 2*records {
		t.Fatalf("%d outputs, want %d: one pass and one replay (the dry run moved nothing)", len(all), 2*records)
	}
	ones := 0
	for _, l := range all[records:] {
		if strings.Contains(l, `"value":"1"`) {
			ones++
		}
	}
	if ones != keys {
		t.Errorf("the replay's outputs hold %d counts of 1, want %d (one per key: counting started again)", ones, keys)
	}
	if l := lines("other.ndjson")[1]; !strings.Contains(l, `"value":"2"`) {
		t.Errorf("the stdin task's second output is %s: it did not keep running", l)
	}
	run.closeAndWait()
	for _, task := range []string{"files", backup} {
		got := readCounts(t, filepath.Join(dir, "data"), task, "n")
		for k := range keys {
			if n := got[fmt.Sprintf("k%d", k)]; n != records/keys {
				t.Errorf("%s: k%d's count %d, want %d (one pass)", task, k, n, records/keys)
			}
		}
	}
}
