// Command growkey is the test task of one key whose state grows without end: every record
// "put NAME" stores NAME under the record's key (value "1"), "putn NAME N" stores NAME N times
// (values "1", "2", ... N), and "count PREFIX" scans the key's names with that prefix, page by
// page, and emits how many there are and the last one.
//
//	GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -o growkey.wasm .
package main

import (
	"strconv"
	"strings"

	wasmstream "github.com/wasmstream/wasmstream/guest-sdk/go"
)

func main() {}

func init() {
	wasmstream.Handle(func(r *wasmstream.Record) error {
		cmd, arg, _ := strings.Cut(string(r.Value()), " ")
		st := r.State()
		switch cmd {
		case "put":
			return st.Put(arg, []byte("1"))
		case "putn":
			name, n, _ := strings.Cut(arg, " ")
			times, err := strconv.Atoi(n)
			if err != nil {
				return err
			}
			for i := 1; i <= times; i++ {
				if err := st.Put(name, []byte(strconv.Itoa(i))); err != nil {
					return err
				}
			}
			return nil
		case "count":
			n, last := 0, ""
			err := st.Scan(arg, func(name, _ []byte) bool {
				n++
				last = string(name)
				return true
			})
			if err != nil {
				return err
			}
			return wasmstream.Emit("", r.Key(), []byte(strconv.Itoa(n)+" "+last))
		}
		return nil
	})
}
