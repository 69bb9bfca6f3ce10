// Command v2 is the timers test guest with state version 2 by default: a new version of the
// timers guest for migration tests.
//
//	GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -o timers-v2.wasm .
package main

import "github.com/wasmstream/wasmstream/examples/wasm/testguests/timers/lib"

func main() {}

func init() { lib.Register(2) }
