// Command gmetrics is a test guest for guest-defined metrics (ABI 0.3): it counts the records it
// sees in the counter records_seen{stage="demo"} and sets the gauge last_value_bytes to the size
// of the last record's value and observes it in the histogram value_bytes (buckets 4, 8). It
// emits nothing.
package main

import wasmstream "github.com/wasmstream/wasmstream/guest-sdk/go"

func main() {}

var (
	seen      = wasmstream.NewMetricCounter("records_seen", "stage", "demo")
	lastBytes = wasmstream.NewMetricGauge("last_value_bytes")
	valueSize = wasmstream.NewMetricHistogram("value_bytes", []float64{4, 8})
)

func init() {
	wasmstream.Handle(func(r *wasmstream.Record) error {
		seen.Inc()
		lastBytes.Set(int64(len(r.Value())))
		valueSize.Observe(float64(len(r.Value())))
		return nil
	})
}
