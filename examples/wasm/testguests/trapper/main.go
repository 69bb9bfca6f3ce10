// Command trapper is a hostile test guest for the host's tests: it traps (a Go panic) on every
// record whose value contains "boom", and otherwise emits the value back to output "echo" with
// the record's key and timestamp.
//
//	GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -o trapper.wasm .
package main

import (
	"bytes"

	wasmstream "github.com/wasmstream/wasmstream/guest-sdk/go"
)

func main() {}

func init() {
	wasmstream.Handle(func(r *wasmstream.Record) error {
		if bytes.Contains(r.Value(), []byte("boom")) {
			panic("trapper: boom")
		}
		return wasmstream.EmitWith(wasmstream.Output{Name: "echo", Key: r.Key(), Value: r.Value(), Timestamp: r.Timestamp()})
	})
}
