// Command ktable keeps a table of each key's latest value and publishes it (ABI 0.5), the
// KTable pattern: a record with a value stores it as the key's state "v" and emits it to output
// "table" with the record's key; a record with a null value (a Kafka tombstone) deletes the
// key's state and emits a tombstone (a null value) for the key. An empty value is a value.
//
//	GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -o ktable.wasm .
package main

import (
	wasmstream "github.com/wasmstream/wasmstream/guest-sdk/go"
)

func main() {}

func init() {
	wasmstream.Handle(update)
}

func update(r *wasmstream.Record) error {
	st := r.State()
	if r.ValueNull() {
		if err := st.Delete("v"); err != nil {
			return err
		}
		return wasmstream.EmitTombstone("table", r.Key())
	}
	if err := st.Put("v", r.Value()); err != nil {
		return err
	}
	return wasmstream.Emit("table", r.Key(), r.Value())
}
