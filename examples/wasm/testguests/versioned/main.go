// Command versioned is the hot-deploy tests' guest. Each record's value is "<seq>": the record's
// position among its key's records, from 1. The guest counts its key's records in state ("n")
// and emits "<tag> <n>" to output "seen", or "<tag> violation <n> <seq>" when seq is not n (a
// record lost, repeated or out of order).
//
// The tag tells which module version handled the record. It is a fixed-width placeholder,
// Tag, so that a test can make any number of distinct versions from one build by rewriting the
// placeholder's bytes in the .wasm (guestbuild.Retag); it can also be set at build time:
//
//	GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -ldflags "-X main.tag=v2" -o versioned.wasm .
package main

import (
	"strconv"

	wasmstream "github.com/wasmstream/wasmstream/guest-sdk/go"
)

func main() {}

// Tag is the placeholder guestbuild.Retag looks for; Retag rewrites its last 6 characters.
const Tag = "ws-version:000000"

var tag = Tag

func init() {
	wasmstream.Handle(func(r *wasmstream.Record) error {
		st := r.State()
		n := 0
		if b, ok, err := st.Get("n"); err != nil {
			return err
		} else if ok {
			n, _ = strconv.Atoi(string(b))
		}
		n++
		if err := st.Put("n", []byte(strconv.Itoa(n))); err != nil {
			return err
		}
		out := tag + " " + strconv.Itoa(n)
		if seq, err := strconv.Atoi(string(r.Value())); err != nil || seq != n {
			out = tag + " violation " + strconv.Itoa(n) + " " + string(r.Value())
		}
		return wasmstream.EmitWith(wasmstream.Output{Name: "seen", Key: r.Key(), Value: []byte(out), Timestamp: r.Timestamp()})
	})
}
