package e2e

// Issue 15: the admin listener's dashboard, loaded by a real browser (headless Chromium)
// against the real binary, and `wasmstream top` against the same host.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/wasmstream/wasmstream/internal/guestbuild"
)

// chromium returns the headless browser's path. It skips the test when there is none, except
// in CI (CI set), where its absence is a failure; make deps installs it.
func chromium(t *testing.T) string {
	t.Helper()
	return guestbuild.Tool(t, "chromium")
}

// TestBinaryDashboard runs the binary with the admin API on a stdin feed, waits for the
// records to be processed, then loads the dashboard in headless Chromium with the token in the
// URL fragment and checks the rendered page: the task, its version, its processed records
// and its input. It saves a screenshot in the test's directory. `wasmstream top --once`
// against the same host shows the same figures.
func TestBinaryDashboard(t *testing.T) {
	browser := chromium(t)
	bin := guestbuild.Binary(t)
	module := guestbuild.Go(t, "wordcount")
	dir := t.TempDir()
	adminPort := freePort(t)
	cfg := fmt.Sprintf(`data_dir: %s
checkpoint_interval: 50ms
admin:
  addr: 127.0.0.1:%d
  token: s3cret
tasks:
  - name: wordcount
    module: %s
    inputs:
      - name: feed
        type: stdin
        key_field: user
        value_field: text
    output:
      type: file
      path: %s
`, filepath.Join(dir, "data"), adminPort, module, filepath.Join(dir, "out.ndjson"))
	run := startLive(t, bin, dir, cfg)
	adminURL := fmt.Sprintf("http://127.0.0.1:%d", adminPort)
	run.await("readiness", func() bool { code, _ := scrape(t, adminURL+"/readyz", ""); return code == 200 })

	// Three lines that are not JSON go to the dead letters, among the recent errors; one
	// holds a terminal escape code that top must not print as is.
	const records, malformed = 1234, 3
	w := bufio.NewWriter(run.stdin)
	for i := range records {
		fmt.Fprintf(w, `{"user":"u%d","text":"alpha beta %d"}`+"\n", i%7, i%3)
		if i%500 == 100 {
			fmt.Fprintf(w, "\x1b[2Jnot json %d\n", i)
		}
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	type status struct {
		Tasks []struct {
			Task      string `json:"task"`
			Version   int64  `json:"version"`
			Processed int64  `json:"processed"`
			Outputs   int64  `json:"outputs"`
			Recent    []struct {
				Kind string `json:"kind"`
			} `json:"recent_errors"`
		} `json:"tasks"`
	}
	var st status
	run.await("every record processed", func() bool {
		code, body := scrape(t, adminURL+"/v1/status", "s3cret")
		return code == 200 && json.Unmarshal([]byte(body), &st) == nil && len(st.Tasks) == 1 &&
			st.Tasks[0].Processed == records && len(st.Tasks[0].Recent) == malformed
	})

	// The browser: the token in the fragment, which it never sends to the server.
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	shot := filepath.Join(t.TempDir(), "dashboard.png")
	fragment := "#token=s3cret"
	browse := func(extra ...string) []byte {
		t.Helper()
		args := append([]string{"--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
			"--no-first-run", "--user-data-dir=" + t.TempDir(), "--window-size=1280,900",
			"--virtual-time-budget=3000"}, extra...)
		args = append(args, adminURL+"/dashboard"+fragment)
		c := exec.CommandContext(ctx, browser, args...)
		var out, errOut bytes.Buffer
		c.Stdout, c.Stderr = &out, &errOut
		if err := c.Run(); err != nil {
			t.Fatalf("chromium %v: %v\n%s", extra, err, errOut.String())
		}
		return out.Bytes()
	}
	dom := string(browse("--dump-dom"))
	for _, want := range []string{
		`data-task="wordcount"`,
		`<span class="version">version 1</span>`,
		`<span class="badge running">running</span>`,
		`<td>feed</td>`,
		`<td>1</td><td>*</td>`, // the versions table: version 1, active
		`<td>dead letter</td><td>input feed line 102</td>`,
		`Recent errors (dead letters 3, failures 0)`,
	} {
		if !strings.Contains(dom, want) {
			t.Errorf("the rendered dashboard lacks %s:\n%s", want, dom)
		}
	}
	processed := regexp.MustCompile(`data-fig="processed"><b>([^<]*)</b>`).FindStringSubmatch(dom)
	if processed == nil || processed[1] != "1,234" {
		t.Errorf("the dashboard's processed figure: %q, want 1,234", processed)
	}
	if !strings.Contains(dom, `<div id="loginerr" class="err"></div>`) {
		t.Errorf("the dashboard did not take the token from the fragment:\n%s", dom)
	}
	// A key looked up from the fragment: its state, read from the running task.
	fragment = "#token=s3cret&task=wordcount&key=u3"
	dom = string(browse("--dump-dom"))
	counts := map[string]int{}
	for i := range records {
		if i%7 == 3 {
			counts["alpha"]++
			counts["beta"]++
			counts[fmt.Sprint(i%3)]++
		}
	}
	for w, n := range counts {
		if want := fmt.Sprintf("<tr><td>stdin:feed/0</td><td>%s</td><td>%d</td></tr>", w, n); !strings.Contains(dom, want) {
			t.Errorf("the key lookup lacks %s:\n%s", want, dom)
		}
	}
	if !strings.Contains(dom, `data-lookup="u3"`) {
		t.Errorf("the dashboard shows no lookup of u3:\n%s", dom)
	}
	fragment = "#token=s3cret"
	browse("--screenshot=" + shot)
	png, err := os.ReadFile(shot)
	if err != nil || !bytes.HasPrefix(png, []byte("\x89PNG")) {
		t.Fatalf("no screenshot: %v", err)
	}
	t.Logf("screenshot: %s (%d bytes)", shot, len(png))
	if out := os.Getenv("WASMSTREAM_DASHBOARD_SCREENSHOT"); out != "" {
		if err := os.WriteFile(out, png, 0o644); err != nil {
			t.Fatal(err)
		}
	}

	// top --once: the same figures in the terminal.
	top := exec.CommandContext(ctx, bin, "top", "--once", "--interval", "100ms",
		"--admin-addr", fmt.Sprintf("127.0.0.1:%d", adminPort), "--admin-token", "s3cret")
	out, err := top.CombinedOutput()
	if err != nil {
		t.Fatalf("top --once: %v\n%s", err, out)
	}
	row := regexp.MustCompile(`(?m)^\s*wordcount\s+running\s+1\s+` + fmt.Sprint(records+malformed) + `\s+\S+\s+` + fmt.Sprint(records) + `\s`)
	if !row.Match(out) {
		t.Errorf("top --once lacks the task's row (running, version 1, %d read, %d processed):\n%s", records+malformed, records, out)
	}
	if !strings.Contains(string(out), "RECENT ERRORS") || !strings.Contains(string(out), "wordcount dead letter: input feed line 102") {
		t.Errorf("top --once lacks the recent errors:\n%s", out)
	}
	if bytes.ContainsRune(out, 0x1b) {
		t.Errorf("top --once printed an escape code from a record:\n%q", out)
	}
	top = exec.CommandContext(ctx, bin, "top", "--once", "--admin-addr", fmt.Sprintf("127.0.0.1:%d", adminPort), "--admin-token", "wrong")
	if out, err := top.CombinedOutput(); err == nil || !strings.Contains(string(out), "wrong bearer token") {
		t.Errorf("top with a wrong token: %v\n%s", err, out)
	}

	run.closeAndWait()
}
