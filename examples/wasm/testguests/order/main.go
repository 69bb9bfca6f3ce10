// Command order is a test guest for the host's ordering tests (S1). Each record's value is
// "<seq> <spin>": seq is the record's position among its key's records (from 1), spin a number
// of busy-loop iterations that makes calls take random time. The guest keeps the last seq of
// each key in state and emits "<seq>" to output "seen" when it is last+1, or
// "violation <last> <seq>" otherwise; and "fail" makes it return an error (a guest failure, not
// a trap) so retries can be tested.
//
//	GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -o order.wasm .
package main

import (
	"bytes"
	"errors"
	"strconv"

	wasmstream "github.com/wasmstream/wasmstream/guest-sdk/go"
)

func main() {}

var sink uint64

func spin(n int) {
	x := uint64(n)
	for i := 0; i < n; i++ {
		x = x*6364136223846793005 + 1442695040888963407
	}
	sink += x
}

func init() {
	wasmstream.Handle(func(r *wasmstream.Record) error {
		v := r.Value()
		if bytes.Equal(v, []byte("fail")) {
			return errors.New("order: asked to fail")
		}
		seqText, spinText, _ := bytes.Cut(v, []byte(" "))
		seq, err := strconv.Atoi(string(seqText))
		if err != nil {
			return err
		}
		n, _ := strconv.Atoi(string(spinText))
		spin(n)
		st := r.State()
		last := 0
		if b, ok, err := st.Get("last"); err != nil {
			return err
		} else if ok {
			last, _ = strconv.Atoi(string(b))
		}
		out := strconv.Itoa(seq)
		if seq != last+1 {
			out = "violation " + strconv.Itoa(last) + " " + out
		}
		if err := st.Put("last", []byte(strconv.Itoa(seq))); err != nil {
			return err
		}
		return wasmstream.EmitWith(wasmstream.Output{Name: "seen", Key: r.Key(), Value: []byte(out), Timestamp: r.Timestamp()})
	})
}
