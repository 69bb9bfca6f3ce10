package e2e

// Issue 15: the real binary's /metrics under load, counted against the records it processed,
// and its probes.

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil/promlint"

	"github.com/wasmstream/wasmstream/internal/guestbuild"
)

// scrape GETs url with the bearer token tok (none if ""), returning the status and body.
func scrape(t *testing.T, url, tok string) (int, string) {
	t.Helper()
	req, err := http.NewRequest("GET", url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if tok != "" {
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// sample returns the value of the sample whose name and labels are exactly series
// (`name{label="v",...}` as exposed), and whether it is there.
func sample(text, series string) (float64, bool) {
	for _, line := range strings.Split(text, "\n") {
		if rest, ok := strings.CutPrefix(line, series+" "); ok {
			v, err := strconv.ParseFloat(strings.TrimSpace(rest), 64)
			return v, err == nil
		}
	}
	return 0, false
}

// TestBinaryMetricsScrape runs the binary on a stdin feed of records (some malformed), scrapes
// /metrics on the unauthenticated metrics.addr until every record is processed, and checks the
// counters against what was fed and what the output file holds; the admin listener serves the
// same behind its token, and the probes without it.
func TestBinaryMetricsScrape(t *testing.T) {
	bin := guestbuild.Binary(t)
	module := guestbuild.Go(t, "wordcount")
	dir := t.TempDir()
	output := filepath.Join(dir, "out.ndjson")
	adminPort, metricsPort := freePort(t), freePort(t)
	cfg := fmt.Sprintf(`data_dir: %s
checkpoint_interval: 50ms
admin:
  addr: 127.0.0.1:%d
  token: tok
metrics:
  addr: 127.0.0.1:%d
tasks:
  - name: wc
    module: %s
    workers: 2
    inputs:
      - name: feed
        type: stdin
        key_field: user
        value_field: text
    output:
      type: file
      path: %s
`, filepath.Join(dir, "data"), adminPort, metricsPort, module, output)
	run := startLive(t, bin, dir, cfg)
	metricsURL := fmt.Sprintf("http://127.0.0.1:%d", metricsPort)
	adminURL := fmt.Sprintf("http://127.0.0.1:%d", adminPort)

	run.await("readiness", func() bool { code, _ := scrape(t, metricsURL+"/readyz", ""); return code == 200 })

	const records, malformed = 20000, 7
	w := bufio.NewWriter(run.stdin)
	for i := range records {
		fmt.Fprintf(w, `{"user":"u%d","text":"alpha beta gamma %d"}`+"\n", i%97, i%13)
		if i%(records/malformed) == 0 && i/(records/malformed) < malformed {
			w.WriteString("not json\n")
		}
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	const total = records + malformed

	outLines := func() float64 {
		b, err := os.ReadFile(output)
		if err != nil && !os.IsNotExist(err) {
			t.Fatal(err)
		}
		return float64(bytes.Count(b, []byte("\n")))
	}
	var text string
	var lines float64
	run.awaitShowing("every record processed in /metrics and its outputs in the file", func() bool {
		code, body := scrape(t, metricsURL+"/metrics", "")
		text = body
		// Malformed lines go to the dead letters as they are read: they are never processed.
		v, _ := sample(body, `wasmstream_records_processed_total{task="wc"}`)
		// records_out_total counts an output when the guest emits it, the file holds it from
		// the next checkpoint on: the two agree once that checkpoint flushed.
		out, _ := sample(body, `wasmstream_records_out_total{task="wc"}`)
		lines = outLines()
		return code == 200 && v == records && out == lines
	}, func() string { return fmt.Sprintf("%s\n(the output file: %v lines)", text, lines) })
	for series, want := range map[string]float64{
		`wasmstream_records_in_total{task="wc"}`:                                          total,
		`wasmstream_input_records_in_total{input="feed",partition="",task="wc",topic=""}`: total,
		`wasmstream_records_dead_lettered_total{task="wc"}`:                               malformed,
		`wasmstream_records_out_total{task="wc"}`:                                         lines,
		`wasmstream_records_pending{task="wc"}`:                                           0,
		`wasmstream_records_in_flight{task="wc"}`:                                         0,
		`wasmstream_instance_traps_total{task="wc"}`:                                      0,
		`wasmstream_paused{task="wc"}`:                                                    0,
	} {
		if got, ok := sample(text, series); !ok || got != want {
			t.Errorf("%s = %v (present %v), want %v", series, got, ok, want)
		}
	}
	// Every batch is in the batch size histogram, and its records add up to the records the
	// guest saw (the malformed lines never reach it).
	if got, _ := sample(text, `wasmstream_batch_records_sum{task="wc"}`); got != records {
		t.Errorf("wasmstream_batch_records_sum = %v, want %d", got, records)
	}
	if got, _ := sample(text, `wasmstream_guest_call_duration_seconds_count{task="wc"}`); got < 1 {
		t.Errorf("wasmstream_guest_call_duration_seconds_count = %v, want at least 1", got)
	}
	if _, ok := sample(text, `wasmstream_checkpoint_duration_seconds_count{task="wc"}`); !ok {
		t.Error("no wasmstream_checkpoint_duration_seconds histogram")
	}
	// Every user is a key read from the store once (97 users), then found in the cache.
	if misses, _ := sample(text, `wasmstream_state_cache_misses_total{task="wc"}`); misses < 97 {
		t.Errorf("wasmstream_state_cache_misses_total = %v, want at least the 97 keys", misses)
	}
	if hits, _ := sample(text, `wasmstream_state_cache_hits_total{task="wc"}`); hits == 0 {
		t.Error("wasmstream_state_cache_hits_total = 0")
	}
	if mem, _ := sample(text, `wasmstream_guest_memory_bytes`); mem <= 0 {
		t.Errorf("wasmstream_guest_memory_bytes = %v while the workers hold instances", mem)
	}
	problems, err := promlint.New(strings.NewReader(text)).Lint()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		if strings.HasPrefix(p.Metric, "wasmstream_") {
			t.Errorf("lint: %s: %s", p.Metric, p.Text)
		}
	}

	// The admin listener: /metrics behind the token, probes without it.
	if code, _ := scrape(t, adminURL+"/metrics", ""); code != http.StatusUnauthorized {
		t.Errorf("admin /metrics without the token: %d, want 401", code)
	}
	if code, body := scrape(t, adminURL+"/metrics", "tok"); code != 200 || !strings.Contains(body, `wasmstream_records_in_total{task="wc"} 20007`) {
		t.Errorf("admin /metrics with the token: %d, records_in_total missing", code)
	}
	for _, p := range []string{"/healthz", "/readyz"} {
		if code, _ := scrape(t, adminURL+p, ""); code != 200 {
			t.Errorf("admin %s without the token: %d, want 200", p, code)
		}
	}
	if code, _ := scrape(t, metricsURL+"/v1/status", ""); code != http.StatusNotFound {
		t.Errorf("metrics.addr serves /v1/status: %d, want 404", code)
	}

	run.closeAndWait()
}

// TestBinaryGuestMetrics runs the binary on a task whose guest declares a counter, a gauge and a
// histogram (ABI 0.3) with two workers, and scrapes them from /metrics: the counter and the
// histogram sum both workers' instances to the records fed, with the task label beside the
// guest's own; the task's pending-timers gauge is there too.
func TestBinaryGuestMetrics(t *testing.T) {
	bin := guestbuild.Binary(t)
	module := guestbuild.Go(t, "testguests/gmetrics")
	dir := t.TempDir()
	metricsPort := freePort(t)
	cfg := fmt.Sprintf(`data_dir: %s
checkpoint_interval: 50ms
metrics:
  addr: 127.0.0.1:%d
tasks:
  - name: gm
    module: %s
    workers: 2
    inputs:
      - name: feed
        type: stdin
        key_field: k
        value_field: v
    output:
      type: file
      path: %s
`, filepath.Join(dir, "data"), metricsPort, module, filepath.Join(dir, "out.ndjson"))
	run := startLive(t, bin, dir, cfg)
	url := fmt.Sprintf("http://127.0.0.1:%d/metrics", metricsPort)
	const records = 500
	w := bufio.NewWriter(run.stdin)
	for i := range records {
		fmt.Fprintf(w, `{"k":"k%d","v":"value"}`+"\n", i%17)
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	var text string
	run.awaitShowing("every record processed", func() bool {
		code, body := scrape(t, url, "")
		text = body
		v, _ := sample(body, `wasmstream_records_processed_total{task="gm"}`)
		return code == 200 && v == records
	}, func() string { return text })
	for series, want := range map[string]float64{
		`wasmstream_guest_records_seen_total{stage="demo",task="gm"}`: records,
		`wasmstream_guest_last_value_bytes{task="gm"}`:                float64(len("value")),
		`wasmstream_guest_value_bytes_bucket{task="gm",le="4"}`:       0,
		`wasmstream_guest_value_bytes_bucket{task="gm",le="8"}`:       records,
		`wasmstream_guest_value_bytes_bucket{task="gm",le="+Inf"}`:    records,
		`wasmstream_guest_value_bytes_sum{task="gm"}`:                 records * float64(len("value")),
		`wasmstream_guest_value_bytes_count{task="gm"}`:               records,
		`wasmstream_timers_pending{task="gm"}`:                        0, // the guest sets none
	} {
		if got, ok := sample(text, series); !ok || got != want {
			t.Errorf("%s = %v (present %v), want %v\n%s", series, got, ok, want, grepLines(text, "wasmstream_guest_"))
		}
	}
	problems, err := promlint.New(strings.NewReader(text)).Lint()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		if strings.HasPrefix(p.Metric, "wasmstream_guest_") {
			t.Errorf("lint: %s: %s", p.Metric, p.Text)
		}
	}
}

// grepLines returns the lines of text containing s.
func grepLines(text, s string) string {
	var out []string
	for _, l := range strings.Split(text, "\n") {
		if strings.Contains(l, s) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// TestBinaryPendingTimers runs the binary on the timers test guest fed on stdin: 30 keys set a
// processing-time timer, 10 of them due at once and 20 far in the future, and one deletes its
// timer. /metrics counts the 19 left in wasmstream_timers_pending and the input's series once
// the 10 have fired.
func TestBinaryPendingTimers(t *testing.T) {
	bin := guestbuild.Binary(t)
	module := guestbuild.Go(t, "testguests/timers")
	dir := t.TempDir()
	adminPort, metricsPort := freePort(t), freePort(t)
	cfg := fmt.Sprintf(`data_dir: %s
checkpoint_interval: 50ms
admin:
  addr: 127.0.0.1:%d
  token: tok
metrics:
  addr: 127.0.0.1:%d
tasks:
  - name: tm
    module: %s
    inputs:
      - name: feed
        type: stdin
        key_field: k
        value_field: v
    output:
      type: file
      path: %s
`, filepath.Join(dir, "data"), adminPort, metricsPort, module, filepath.Join(dir, "out.ndjson"))
	run := startLive(t, bin, dir, cfg)
	w := bufio.NewWriter(run.stdin)
	for i := range 30 {
		at := int64(1) // long past: due at once
		if i >= 10 {
			at = 1 << 50 // far in the future
		}
		fmt.Fprintf(w, `{"k":"k%d","v":"set t p %d"}`+"\n", i, at)
	}
	fmt.Fprintf(w, `{"k":"k29","v":"del t"}`+"\n")
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	url := fmt.Sprintf("http://127.0.0.1:%d/metrics", metricsPort)
	want := map[string]float64{
		`wasmstream_timers_fired_total{task="tm"}`:                                      10,
		`wasmstream_timers_pending{task="tm"}`:                                          19,
		`wasmstream_input_timers_pending{input="feed",partition="",task="tm",topic=""}`: 19,
	}
	var text string
	run.awaitShowing(fmt.Sprintf("timers at %v", want), func() bool {
		_, text = scrape(t, url, "")
		for series, v := range want {
			if got, ok := sample(text, series); !ok || got != v {
				return false
			}
		}
		return true
	}, func() string { return grepLines(text, "timers") })
	// The admin API's status says the same.
	code, body := scrape(t, fmt.Sprintf("http://127.0.0.1:%d/v1/status", adminPort), "tok")
	if code != 200 || !strings.Contains(body, `"timers_pending": 19,`) {
		t.Errorf("/v1/status: %d %s, want timers_pending 19", code, body)
	}
}
