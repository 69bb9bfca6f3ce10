// Command rekey is the chaining tests' middle stage: it moves records to a new key. For each
// record whose value is "<a> <b>" (wordcount's "<word> <count>"), it emits to output "rekeyed" a
// record keyed by <a> with value "<record key> <b>" and counts the
// records of each key in state "n" (decimal ASCII). A value without a space is emitted whole,
// keyed by itself.
//
//	GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -o rekey.wasm .
package main

import (
	"bytes"
	"strconv"

	wasmstream "github.com/wasmstream/wasmstream/guest-sdk/go"
)

func main() {}

func init() { wasmstream.Handle(rekey) }

var val, buf []byte // reused between records

func rekey(r *wasmstream.Record) error {
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
	if err := st.Put("n", strconv.AppendUint(buf[:0], n+1, 10)); err != nil {
		return err
	}
	v := r.Value()
	a, b, ok := bytes.Cut(v, []byte(" "))
	if !ok {
		return wasmstream.Emit("rekeyed", v, v)
	}
	buf = append(append(append(buf[:0], r.Key()...), ' '), b...)
	return wasmstream.Emit("rekeyed", a, buf)
}
