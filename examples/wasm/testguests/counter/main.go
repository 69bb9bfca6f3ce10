// Command counter is the benchmarks' stateful task: per record it reads the key's count (one
// state get), writes it back incremented (one put) and emits the new count with the record's key
// (one output), which measures the runtime's cost of state and outputs per record.
//
//	GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -o counter.wasm .
package main

import (
	"strconv"

	wasmstream "github.com/wasmstream/wasmstream/guest-sdk/go"
)

func main() {}

func init() {
	wasmstream.Handle(count)
}

var val, buf []byte // reused between records

func count(r *wasmstream.Record) error {
	st := r.State()
	var err error
	if val, _, err = st.GetAppend(val[:0], "n"); err != nil {
		return err
	}
	var n uint64
	if len(val) > 0 {
		if n, err = strconv.ParseUint(string(val), 10, 64); err != nil {
			return err
		}
	}
	buf = strconv.AppendUint(buf[:0], n+1, 10)
	if err := st.Put("n", buf); err != nil {
		return err
	}
	return wasmstream.Emit("counts", r.Key(), buf)
}
