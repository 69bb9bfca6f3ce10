package main

import (
	"bytes"
	"log/slog"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/wasmstream/wasmstream/host"
)

// TestMetricsLint: every metric the collector exposes follows Prometheus's naming conventions
// (units in names, _total counters), for a task with a file input and Kafka partitions.
func TestMetricsLint(t *testing.T) {
	h := host.Histogram{Bounds: []float64{1, 10}, Counts: []uint64{2, 1, 1}, Count: 4, Sum: 115}
	stats := []host.TaskStats{{Task: "wc", Records: 10, Processed: 9, Outputs: 4, BatchSize: h, CallSeconds: h,
		CheckpointSeconds: h, PendingTimers: 7, Halted: true, Restarts: 3, LogDropped: 12, RetentionLost: 80, Inputs: []host.InputStats{
			{Name: "file", Partition: -1, Records: 3, Committed: 2, Lag: -1, Watermark: -1, PendingTimers: 4},
			{Name: "kin", Topic: "words", Partition: 0, Records: 7, Committed: 5, Lag: 2, Watermark: 1700000000000, PendingTimers: 3,
				ReplayFrom: 0, ReplayHead: 9, ReplayRemaining: 4},
		}}}
	c := statsCollector{stats: func() []host.TaskStats { return stats }, guestMemory: func() int64 { return 1 << 20 }}
	problems, err := testutil.CollectAndLint(c)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("%s: %s", p.Metric, p.Text)
	}
	want := `
# HELP wasmstream_batch_records Records and timer firings per batch handed to a worker.
# TYPE wasmstream_batch_records histogram
wasmstream_batch_records_bucket{task="wc",le="1"} 2
wasmstream_batch_records_bucket{task="wc",le="10"} 3
wasmstream_batch_records_bucket{task="wc",le="+Inf"} 4
wasmstream_batch_records_sum{task="wc"} 115
wasmstream_batch_records_count{task="wc"} 4
# HELP wasmstream_consumer_lag_records Kafka: records of the partition beyond the committed position, as of its last fetch.
# TYPE wasmstream_consumer_lag_records gauge
wasmstream_consumer_lag_records{input="kin",partition="0",task="wc",topic="words"} 2
# HELP wasmstream_input_timers_pending Timers of the input (Kafka: partition) set and neither deleted nor fired, as of the last checkpoint.
# TYPE wasmstream_input_timers_pending gauge
wasmstream_input_timers_pending{input="file",partition="",task="wc",topic=""} 4
wasmstream_input_timers_pending{input="kin",partition="0",task="wc",topic="words"} 3
# HELP wasmstream_replay_remaining_records After a reset: records between the committed position and the head captured at the reset (absent once caught up, or without a reset).
# TYPE wasmstream_replay_remaining_records gauge
wasmstream_replay_remaining_records{input="kin",partition="0",task="wc",topic="words"} 4
# HELP wasmstream_records_in_total Records read this run.
# TYPE wasmstream_records_in_total counter
wasmstream_records_in_total{task="wc"} 10
# HELP wasmstream_records_lost_to_retention_total Offsets of Kafka input records removed (retention, DeleteRecords) below a partition's position before the task read them; the partition went on from its log start.
# TYPE wasmstream_records_lost_to_retention_total counter
wasmstream_records_lost_to_retention_total{task="wc"} 80
# HELP wasmstream_log_lines_dropped_total Guest log lines the running module version dropped (max_log_lines_per_second).
# TYPE wasmstream_log_lines_dropped_total counter
wasmstream_log_lines_dropped_total{task="wc"} 12
# HELP wasmstream_task_halted 1 while the task is halted (on_task_failure: halt_task; restart: until it is restarted), else 0.
# TYPE wasmstream_task_halted gauge
wasmstream_task_halted{task="wc"} 1
# HELP wasmstream_task_restarts_total Automatic restarts that started the halted task again (on_task_failure: restart).
# TYPE wasmstream_task_restarts_total counter
wasmstream_task_restarts_total{task="wc"} 3
# HELP wasmstream_timers_pending Timers set and neither deleted nor fired, as of the last checkpoint.
# TYPE wasmstream_timers_pending gauge
wasmstream_timers_pending{task="wc"} 7
`
	if err := testutil.CollectAndCompare(c, strings.NewReader(want), "wasmstream_batch_records",
		"wasmstream_consumer_lag_records", "wasmstream_records_in_total", "wasmstream_timers_pending",
		"wasmstream_input_timers_pending", "wasmstream_log_lines_dropped_total", "wasmstream_task_halted", "wasmstream_task_restarts_total",
		"wasmstream_replay_remaining_records", "wasmstream_records_lost_to_retention_total"); err != nil {
		t.Error(err)
	}
}

// TestGuestMetricsExport: guest metrics get the wasmstream_guest_ prefix, counters a _total
// suffix, histograms cumulative buckets, and the task label beside the guest's; a name another
// task (or the host) declared differently goes to the task's own namespace,
// wasmstream_guest_<task>_<name>, with a warning, instead of vanishing from the scrape.
func TestGuestMetricsExport(t *testing.T) {
	stats := []host.TaskStats{
		{Task: "a", GuestMetrics: []host.GuestMetric{
			{Counter: true, Name: "hits", Labels: []host.GuestLabel{{Name: "kind", Value: "x"}}, Value: 3},
			{Name: "depth", Value: -2},
			{Name: "memory_bytes", Value: 1},                 // the host's wasmstream_guest_memory_bytes
			{Counter: true, Name: "call_failures", Value: 1}, // the host's wasmstream_guest_call_failures_total
			{Name: "latency_seconds", Labels: []host.GuestLabel{{Name: "kind", Value: "x"}},
				Histogram: &host.Histogram{Bounds: []float64{0.1, 1}, Counts: []uint64{1, 2, 3}, Count: 6, Sum: 12.5}},
			{Name: "call_duration_seconds", Histogram: &host.Histogram{Bounds: []float64{1}, Counts: []uint64{0, 0}}}, // the host's
		}},
		{Task: "b", GuestMetrics: []host.GuestMetric{
			{Name: "hits_total", Value: 9}, // a gauge here: conflicts with task a's counter
			{Name: "depth", Value: 4},
			{Counter: true, Name: "sent_total", Value: 1},
			{Name: "latency_seconds_count", Value: 1}, // task a's histogram has that series
		}},
	}
	var logs bytes.Buffer
	h := newMetricsHandler(statsCollector{stats: func() []host.TaskStats { return stats }}, slog.New(slog.NewTextHandler(&logs, nil)))
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	if rec.Code != 200 {
		t.Fatalf("status %d: %s", rec.Code, rec.Body)
	}
	var got []string
	for _, l := range strings.Split(rec.Body.String(), "\n") {
		if strings.HasPrefix(l, "wasmstream_guest_") && !strings.HasPrefix(l, "wasmstream_guest_call_duration") {
			got = append(got, l)
		}
	}
	want := []string{
		`wasmstream_guest_a_call_duration_seconds_bucket{task="a",le="1"} 0`,
		`wasmstream_guest_a_call_duration_seconds_bucket{task="a",le="+Inf"} 0`,
		`wasmstream_guest_a_call_duration_seconds_sum{task="a"} 0`,
		`wasmstream_guest_a_call_duration_seconds_count{task="a"} 0`,
		`wasmstream_guest_a_call_failures_total{task="a"} 1`,
		`wasmstream_guest_a_memory_bytes{task="a"} 1`,
		`wasmstream_guest_b_hits_total{task="b"} 9`,
		`wasmstream_guest_b_latency_seconds_count{task="b"} 1`,
		`wasmstream_guest_call_failures_total{task="a"} 0`, `wasmstream_guest_call_failures_total{task="b"} 0`,
		`wasmstream_guest_depth{task="a"} -2`, `wasmstream_guest_depth{task="b"} 4`,
		`wasmstream_guest_hits_total{kind="x",task="a"} 3`,
		`wasmstream_guest_latency_seconds_bucket{kind="x",task="a",le="0.1"} 1`,
		`wasmstream_guest_latency_seconds_bucket{kind="x",task="a",le="1"} 3`,
		`wasmstream_guest_latency_seconds_bucket{kind="x",task="a",le="+Inf"} 6`,
		`wasmstream_guest_latency_seconds_sum{kind="x",task="a"} 12.5`,
		`wasmstream_guest_latency_seconds_count{kind="x",task="a"} 6`,
		`wasmstream_guest_sent_total{task="b"} 1`}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("exported\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	// Warned once per task and name, however many scrapes.
	h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("GET", "/metrics", nil))
	if n := strings.Count(logs.String(), "exported_as=wasmstream_guest_b_hits_total"); n != 1 {
		t.Errorf("%d warnings for task b's hits_total, want 1:\n%s", n, logs.String())
	}
}
