// Command snoop is a hostile test guest for the host's tests: it tries to reach state outside
// its scope and reports what the host answered.
//
// In init it calls state_put and emit, which the host must refuse with ERR_NOT_ALLOWED; if it
// does not, init fails with a message naming what the host returned.
//
// For each record with key K it uses the state of key K + "-other" (a key not in the batch,
// unless the batch also holds that key) with state_get, state_put, state_delete and state_scan,
// in that order, and after each emits the ABI name of the error it got (e.g.
// "ERR_KEY_NOT_IN_BATCH"; "OK" for no error, "ERR_NOT_FOUND" for a missing entry) to output
// "errors" with key K and the record's timestamp: four outputs per record.
//
//	GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -o snoop.wasm .
package main

import (
	"errors"

	wasmstream "github.com/wasmstream/wasmstream/guest-sdk/go"
)

func main() {}

func init() {
	wasmstream.HandleInit(func([]byte) error {
		if name := errName(wasmstream.StateOf([]byte("k")).Put("n", []byte("v"))); name != "ERR_NOT_ALLOWED" {
			return errors.New("snoop: state_put during init returned " + name + ", want ERR_NOT_ALLOWED")
		}
		if name := errName(wasmstream.Emit("errors", nil, nil)); name != "ERR_NOT_ALLOWED" {
			return errors.New("snoop: emit during init returned " + name + ", want ERR_NOT_ALLOWED")
		}
		return nil
	})
	wasmstream.Handle(snoop)
}

func snoop(r *wasmstream.Record) error {
	other := wasmstream.StateOf(append(append([]byte{}, r.Key()...), "-other"...))
	_, found, err := other.Get("n")
	if err == nil && !found {
		err = wasmstream.ErrNotFound
	}
	errs := [4]error{
		err,
		other.Put("n", []byte("stolen")),
		other.Delete("n"),
		other.Scan("", func(_, _ []byte) bool { return true }),
	}
	for _, err := range errs {
		err := wasmstream.EmitWith(wasmstream.Output{Name: "errors", Key: r.Key(),
			Value: []byte(errName(err)), Timestamp: r.Timestamp()})
		if err != nil {
			return err
		}
	}
	return nil
}

// errName is the ABI name of the error a host function returned, or "OK".
func errName(err error) string {
	if err == nil {
		return "OK"
	}
	if he, ok := err.(*wasmstream.HostError); ok {
		return he.Errno.String()
	}
	if err == wasmstream.ErrNotFound {
		return "ERR_NOT_FOUND"
	}
	return err.Error()
}
