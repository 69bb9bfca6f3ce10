// Command gmetrics is a test guest for guest-defined metrics (ABI 0.3): it counts the records it
// sees in the counter records_seen{stage="demo"} and sets the gauge last_value_bytes to the size
// of the last record's value. It emits nothing.
package main

import wasmstream "github.com/wasmstream/wasmstream/guest-sdk/go"

func main() {}

var (
	seen      = wasmstream.NewMetricCounter("records_seen", "stage", "demo")
	lastBytes = wasmstream.NewMetricGauge("last_value_bytes")
)

func init() {
	wasmstream.Handle(func(r *wasmstream.Record) error {
		seen.Inc()
		lastBytes.Set(int64(len(r.Value())))
		return nil
	})
}
