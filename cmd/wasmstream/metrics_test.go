package main

import (
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
		CheckpointSeconds: h, Inputs: []host.InputStats{
			{Name: "file", Partition: -1, Records: 3, Committed: 2, Lag: -1, Watermark: -1},
			{Name: "kin", Topic: "words", Partition: 0, Records: 7, Committed: 5, Lag: 2, Watermark: 1700000000000},
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
# HELP wasmstream_records_in_total Records read this run.
# TYPE wasmstream_records_in_total counter
wasmstream_records_in_total{task="wc"} 10
`
	if err := testutil.CollectAndCompare(c, strings.NewReader(want), "wasmstream_batch_records",
		"wasmstream_consumer_lag_records", "wasmstream_records_in_total"); err != nil {
		t.Error(err)
	}
}
