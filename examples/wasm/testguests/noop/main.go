// Command noop is the benchmarks' no-op task: it receives batches and does nothing with them,
// which measures the runtime's own cost per record.
//
//	GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -o noop.wasm .
package main

import wasmstream "github.com/wasmstream/wasmstream/guest-sdk/go"

func main() {}

func init() {
	wasmstream.Handle(func(r *wasmstream.Record) error { return nil })
}
